"""The reports about one run, as values: ``kubectl runs plan`` (``PlanReport``) and ``kubectl runs explain``
(``ExplainReport``, which holds the plan), and the parts they share (engine/reports.py has the fleet-wide ones
and says how report values work: the field order is the JSON contract, ``plain`` the one encoding).

To add a field: add it here in its place in the order, set it where the report is built (the ``*_report``
function below, or engine/plan.py / engine/explain.py), and regenerate the schemas
(``python -m kubectl_runs.engine.schemas``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..model import ClosureReason, ReservationState, RunPhase
from ..timeutil import rfc3339
from .codes import Confidence, FundingClass, ReasonCode, Relation, RemedyKind
from .reports import FindingEntry, Value

if TYPE_CHECKING:
    from ..model import Reservation
    from .forecast import Forecast
    from .funding import Funding
    from .packing import Capacity


# --- plan -----------------------------------------------------------------------------------------------------


class Width(Value):
    min: int
    max: int
    desired: int
    allocated: int  # GPUs of the run's open Active leases


class Reason(Value):
    code: ReasonCode
    message: str


class Remedy(Value):
    kind: RemedyKind
    target: str  # namespace/name of a run or lease, or an owner path (Borrow, window-aligned Wait)
    gpus: int  # GPUs it would free or supply
    message: str


class DomainRow(Value):
    domain: str
    free_gpus: int
    placeable_gpus: int
    groups: int | None


class CapacityReport(Value):
    free_gpus: int
    placeable_gpus: int
    domains: list[DomainRow]


class SourceRow(Value):
    namespace: str
    budget: str
    envelope: str
    owner: str
    relation: Relation
    headroom_gpus: int
    usable_gpus: int


class FundingReport(Value):
    fundable_gpus: int
    sources: list[SourceRow]


class ForecastReport(Value):
    earliest_start: str | None
    confidence: Confidence


class ProtectedRow(Value):
    run: str
    reason: str  # AdmittedByActivation | RecentVictim | FinishingSoon
    until: str
    detail: str


class DrawReport(Value):
    """The pending Reservation's lottery, known before it happens: the instant and seed it draws with, and the
    Runs a protection window leaves out (with the reconciler's default windows)."""

    name: str  # namespace/name
    earliest_start: str
    seed: str
    protected: list[ProtectedRow]


class PlanReport(Value):
    """``kubectl runs plan``: need, capacity, funding, deficits, reasons, remedies, forecast, and the pending
    Reservation's draw."""

    run: str
    at: str
    need: int
    width: Width
    capacity: CapacityReport
    funding: FundingReport
    deficit_gpus: int
    capacity_deficit_gpus: int
    funding_deficit_gpus: int
    reasons: list[Reason]
    remedies: list[Remedy]
    forecast: ForecastReport
    reservation: DrawReport | None = None


def capacity_report(room: Capacity) -> CapacityReport:
    return CapacityReport(
        free_gpus=room.free,
        placeable_gpus=room.placeable,
        domains=[DomainRow(d.domain, d.free, d.placeable, d.groups) for d in room.domains],
    )


def funding_report(money: Funding) -> FundingReport:
    return FundingReport(
        fundable_gpus=money.fundable,
        sources=[
            SourceRow(s.key[0], s.key[1], s.key[2], s.owner, s.relation, s.headroom, s.usable) for s in money.sources
        ],
    )


def forecast_report(outlook: Forecast) -> ForecastReport:
    return ForecastReport(rfc3339(outlook.earliest_start), outlook.confidence)


# --- explain --------------------------------------------------------------------------------------------------


class LenderEntry(Value):
    owner: str
    gpus: int


class FundingSplit(Value):
    owned: int
    shared: int
    borrowed: int
    unfunded: int
    lenders: list[LenderEntry]


class ScopeEntry(Value):
    flavor: str
    domain: str | None


class EnvelopeRef(Value):
    budget: str
    envelope: str


class ActivationEntry(Value):
    at: str | None
    seed: str
    deficit_gpus: int
    freed_gpus: int


class ReservationEntry(Value):
    name: str
    state: ReservationState | None
    scope: ScopeEntry
    paying_envelope: EnvelopeRef | None
    earliest_start: str | None
    activation: ActivationEntry | None


class TicketEntry(Value):
    group: int
    ticket: str
    place: int  # 1-based place in the draw order
    taken: bool  # the lottery took it


class PreemptionEntry(Value, omit_defaults=True):
    """A reservation's activation that took GPUs from the run; with the run's tickets when the draw is recorded."""

    reservation: str
    seed: str
    at: str | None
    gpus: int
    verified: bool | None
    tickets: list[TicketEntry] | None = None
    conflict_set_size: int | None = None
    differences: list[str] | None = None


class LeaseEntry(Value):
    name: str
    group: int | None
    role: Literal["Active", "Spare"]
    gpus: int
    nodes: list[str]
    paid_by: str | None
    start: str | None
    open: bool
    class_: FundingClass | None = msgspec.field(name="class")
    closed: bool
    ended: str | None
    closure_reason: ClosureReason | None


class ExplainReport(Value, omit_defaults=True):
    """``kubectl runs explain``: the run, its funding split, its plan, reservation, preemptions and leases; live,
    its recent Events."""

    run: str
    phase: RunPhase | None
    width: Width
    funding: FundingSplit
    plan: PlanReport
    reservation: ReservationEntry | None
    preemptions: list[PreemptionEntry]
    leases: list[LeaseEntry]
    findings: list[FindingEntry]  # about its leases and sponsors (docs/arithmetic.md, Findings)
    events: list[dict[str, Any]] | None = None


def reservation_entry(reservation: Reservation | None) -> ReservationEntry | None:
    if reservation is None:
        return None
    spec, status = reservation.spec, reservation.status
    activation = status.activation
    paying = spec.paying_envelope
    return ReservationEntry(
        name=reservation.key,
        state=status.state,
        scope=ScopeEntry(spec.scope.flavor, spec.scope.domain),
        paying_envelope=EnvelopeRef(paying.budget, paying.envelope) if paying is not None else None,
        earliest_start=rfc3339(spec.earliest_start),
        activation=(
            ActivationEntry(rfc3339(activation.at), activation.seed, activation.deficit_gpus, activation.freed_gpus)
            if activation is not None
            else None
        ),
    )
