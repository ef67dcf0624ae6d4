"""The plan for one run: what it needs, where it could go, who could pay, what is missing, why, and what would
fix it (API.md §3 Plan, Reasons, Remedies, Forecast; §5 ``plan``).

- **need** = width planned + spares − GPUs held. The width planned is the start width (``minTotalGPUs`` when
  elastic, else ``totalGPUs``); an elastic run that already runs below its desired width plans toward
  ``desiredTotalGPUs``. Spares are ``sparesPerGroup`` per group (one group when the run has no
  ``groupGPUs``). Held = the run's open Active leases (``width.allocated``) and open Spare leases.
- **placeable** (engine/packing.py) and **fundable** (engine/funding.py) at ``at``, on the candidate nodes: the
  flavor, schedulable, and the pending Reservation's domain when its scope names one.
- ``capacityDeficitGPUs = max(0, need − placeable)``, ``fundingDeficitGPUs = max(0, need − fundable)``,
  ``deficitGPUs = max(0, need − min(placeable, fundable))``.
- **reasons**: what is wrong with the request first (``InvalidRequest``, ``UnboundNamespace``), then funding
  (``NoEnvelope``, ``WindowNotOpen``, ``InsufficientBudget``, ``BorrowLimit``, ``ACLDenied``), then capacity
  (``NoSingleDomain``, ``InsufficientCapacity``) — each with a sentence a researcher can act on.
- **remedies**, in API.md order, each naming a run, lease or owner and the GPUs it frees or supplies:
  ``ReclaimUnfunded``, ``DropSpare``, ``Shrink`` (engine/remedies.py, only as many as the capacity deficit
  takes), ``Borrow`` (only as much as the funding deficit takes), ``Wait`` (engine/forecast.py), ``Lottery``.

Pure: the snapshot is never changed, ``at`` is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..model import GPULease, ProtectedEntry, Reservation, Run, Scope, Snapshot
from ..timeutil import rfc3339
from .accounting import Ledger
from .codes import BLOCKING, Confidence, ReasonCode, RemedyKind
from .evaluation import Evaluation, open_book
from .forecast import Forecast, forecast
from .funding import Funding
from .lottery import derive_seed
from .packing import Capacity, group_unit, open_leases
from .plan_remedies import remedies
from .reasons import reasons
from .run_reports import (
    DrawReport,
    PlanReport,
    ProtectedRow,
    Reason,
    Remedy,
    Width,
    capacity_report,
    forecast_report,
    funding_report,
)

# The names a plan carries (engine/codes.py), here too for the reconciler and the tests that read them.
(INVALID_REQUEST, UNBOUND_NAMESPACE, NO_ENVELOPE, WINDOW_NOT_OPEN, INSUFFICIENT_BUDGET, BORROW_LIMIT, ACL_DENIED,
 INSUFFICIENT_CAPACITY, NO_SINGLE_DOMAIN) = ReasonCode
REASON_CODES = tuple(ReasonCode)
RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, BORROW, WAIT, LOTTERY = RemedyKind
REMEDY_KINDS = tuple(RemedyKind)


@dataclass(frozen=True)
class Plan:
    run: Run
    at: datetime
    width: Width
    planned_width: int  # the width the plan is for: start width, or desired when growing
    growing: bool  # an elastic run below its desired width, planning toward it
    spares: int  # spare GPUs the planned width takes
    held_spares: int  # GPUs of the run's open Spare leases
    need: int
    capacity: Capacity
    funding: Funding
    reasons: tuple[Reason, ...]
    remedies: tuple[Remedy, ...]
    forecast: Forecast
    reservation: Reservation | None
    groups: int = 1  # groups of the planned width (1 when the run has no groupGPUs)
    notes: tuple[str, ...] = field(default=())
    protected: tuple[ProtectedEntry, ...] = ()  # runs in scope a lottery would leave out now

    @property
    def seed(self) -> str | None:
        """The seed the pending Reservation will draw with (it activates at its earliestStart)."""
        r = self.reservation
        return derive_seed(r.key, r.spec.earliest_start) if r is not None else None

    # --- the arithmetic ---------------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def flavor(self) -> str:
        return self.run.spec.resources.gpu_type

    @property
    def finished(self) -> bool:
        return self.run.finished

    @property
    def placeable(self) -> int:
        return self.capacity.placeable

    @property
    def fundable(self) -> int:
        return self.funding.fundable

    @property
    def capacity_deficit(self) -> int:
        return max(0, self.need - self.placeable)

    @property
    def funding_deficit(self) -> int:
        return max(0, self.need - self.fundable)

    @property
    def deficit(self) -> int:
        return max(0, self.need - min(self.placeable, self.fundable))

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    @property
    def blocked(self) -> Reason | None:
        """The reason that no GPU count can fix (an invalid request, an unbound namespace), if any."""
        return next((r for r in self.reasons if r.code in BLOCKING), None)

    @property
    def report(self) -> PlanReport:
        """The value ``-o json`` prints."""
        return PlanReport(
            run=self.key,
            at=rfc3339(self.at) or "",
            need=self.need,
            width=self.width,
            capacity=capacity_report(self.capacity),
            funding=funding_report(self.funding),
            deficit_gpus=self.deficit,
            capacity_deficit_gpus=self.capacity_deficit,
            funding_deficit_gpus=self.funding_deficit,
            reasons=list(self.reasons),
            remedies=list(self.remedies),
            forecast=forecast_report(self.forecast),
            reservation=None if self.reservation is None else DrawReport(
                name=self.reservation.key,
                earliest_start=rfc3339(self.reservation.spec.earliest_start) or "",
                seed=self.seed or "",
                protected=[ProtectedRow(p.run, p.reason, rfc3339(p.until) or "", p.detail) for p in self.protected],
            ),
        )


# --- lookups ------------------------------------------------------------------------------------------------------


def reservation_of(snapshot: Snapshot, run: Run, *, pending_only: bool = False) -> Reservation | None:
    """The run's Reservation: the one its ``status.pendingReservation`` names, else a pending one (latest
    earliestStart first), else — unless ``pending_only`` — the latest one whatever its state."""
    return choose_reservation([r for r in snapshot.reservations if r.spec.run_ref.key == run.key], run,
                              pending_only=pending_only)


def choose_reservation(mine: Sequence[Reservation], run: Run, *, pending_only: bool = False) -> Reservation | None:
    """``reservation_of`` among ``mine``, the run's Reservations in snapshot order."""
    if not mine:
        return None
    named = run.status.pending_reservation
    for r in mine:
        # the one status names, unless it no longer is pending and only a pending one will do (a Run's status
        # may still name a Reservation that has since activated, failed or been released)
        if named and named in (r.metadata.name, r.key) and (not pending_only or r.status.state in (None, "Pending")):
            return r
    pending = [r for r in mine if r.status.state in (None, "Pending")]
    chosen = pending or ([] if pending_only else mine)
    return max(chosen, key=lambda r: (r.spec.earliest_start, r.key), default=None)


def open_ledger(snapshot: Snapshot, at: datetime) -> tuple[list[GPULease], Ledger]:
    """The leases open at ``at`` and the ledger of just those: the same headroom, classes and findings as
    ``ledger(snapshot, at)`` (closed leases only add GPU-hours, which a plan does not read), at a fraction of
    the cost on a fleet with a long history."""
    leases = open_leases(snapshot, at)
    return leases, open_book(snapshot, leases, at)


# --- the stages ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """The first stage: what the run asks for at ``at``, what it holds, and where it may go."""

    width: Width
    planned_width: int  # the start width, or the desired one when growing
    growing: bool
    groups: int  # groups of the planned width (1 without groupGPUs)
    spares: int  # spare GPUs the planned width takes
    held_spares: int  # GPUs of the run's open Spare leases
    gpus: int  # the need: planned + spares − held (0 for a finished run)
    flavor: str
    group_gpus: int | None
    unit: int | None  # a group's footprint, spares included (packing.group_unit)
    spread: bool
    reservation: Reservation | None  # its pending Reservation, whose scope may name a domain
    domain: str | None


def need_of(ev: Evaluation, run: Run) -> Need:
    spec = run.spec
    reservation = None if run.finished else choose_reservation(ev.reservations_of(run.key), run, pending_only=True)
    mine = ev.leases_of(run.key)
    allocated = sum(lease.gpus for lease in mine if lease.spec.slice.role == "Active")
    held_spares = sum(lease.gpus for lease in mine if lease.spec.slice.role == "Spare")
    malleable = spec.malleable
    if malleable is not None:
        desired = malleable.desired_total_gpus or min(max(spec.resources.total_gpus, malleable.min_total_gpus),
                                                      malleable.max_total_gpus)
        width = Width(malleable.min_total_gpus, malleable.max_total_gpus, desired, allocated)
    else:
        total = spec.resources.total_gpus
        width = Width(total, total, total, allocated)
    growing = malleable is not None and 0 < allocated < width.desired and not run.finished
    planned = width.desired if growing else width.min
    group_gpus = spec.locality.group_gpus if spec.locality else None
    groups = -(-planned // group_gpus) if group_gpus else 1
    spares = spec.spares_per_group * groups
    return Need(
        width=width,
        planned_width=planned,
        growing=growing,
        groups=groups,
        spares=spares,
        held_spares=held_spares,
        gpus=0 if run.finished else max(0, planned + spares - allocated - held_spares),
        flavor=spec.resources.gpu_type,
        group_gpus=group_gpus,
        unit=group_unit(group_gpus, spec.spares_per_group),
        spread=spec.locality.allow_cross_group_spread if spec.locality else True,
        reservation=reservation,
        domain=reservation.spec.scope.domain if reservation is not None else None,
    )


@dataclass(frozen=True)
class Startability:
    """Admission's gate without the rest of a plan: the need, and what can be placed and funded for it."""

    need: int  # GPUs: start width (or desired, growing) + spares − held
    placeable: int
    fundable: int
    free: int  # free GPUs on the candidate nodes (placed or not)

    @property
    def starts(self) -> bool:
        """Admission would start it: its plan has no deficit."""
        return self.need <= min(self.placeable, self.fundable)


def startable(snapshot: Snapshot, run: Run, at: datetime) -> Startability:
    """The need → capacity → funding stages of ``plan_run`` alone, for the resolver's placement check (the same
    packing and funding walk admission uses, on a snapshot where the candidate victims' leases are gone)."""
    ev = Evaluation(snapshot, at)
    need = need_of(ev, run)
    room = ev.capacity(need.flavor, domain=need.domain, unit=need.unit, spread=need.spread)
    money = ev.funding(run, room)
    return Startability(need=need.gpus, placeable=room.placeable, fundable=money.fundable, free=room.free)


def plan_run(
    snapshot: Snapshot,
    run: Run,
    at: datetime,
    *,
    leases: Sequence[GPULease] | None = None,
    book: Ledger | None = None,
    evaluation: Evaluation | None = None,
) -> Plan:
    """Plan ``run`` at ``at``, one stage after the other: need → capacity → funding (→ reasons) → forecast →
    remedies, each a function of the snapshot and the values before it. What every plan of the snapshot at
    ``at`` shares — the open leases, their ledger, free capacity, funding inputs, a scope's groups and releases
    — comes from ``evaluation`` (engine/evaluation.py; pass the same one to plan many runs: it is computed once);
    without one, ``leases`` (the leases open at ``at``) and ``book`` (a ledger at ``at``) may be passed when
    already computed, and the rest is computed for this plan."""
    ev = evaluation if evaluation is not None else Evaluation(snapshot, at, leases=leases, book=book)
    if ev.snapshot is not snapshot or ev.at != at:
        raise ValueError("an Evaluation serves only the snapshot and instant it was made for")
    book = ev.book
    need = need_of(ev, run)
    room = ev.capacity(need.flavor, domain=need.domain, unit=need.unit, spread=need.spread)
    money = ev.funding(run, room)
    why = reasons(
        snapshot, run, need=need.gpus, planned=need.planned_width, group_gpus=need.group_gpus, unit=need.unit,
        domain=need.domain, room=room, money=money, book=book, at=at,
    )
    deficit = max(0, need.gpus - min(room.placeable, money.fundable))
    fixes: list[Remedy] = []
    protected: tuple[ProtectedEntry, ...] = ()
    if run.finished or any(r.code in BLOCKING for r in why):
        outlook = Forecast(None, Confidence.UNKNOWN)  # nothing will start, or it cannot start as asked
    elif deficit == 0:
        outlook = Forecast(at, Confidence.REPORTED)
    else:
        scope = Scope(flavor=need.flavor, domain=need.domain)
        reservation = need.reservation
        seed = derive_seed(reservation.key, reservation.spec.earliest_start) if reservation is not None else None
        # the gentle remedies without the run's own leases, and the conflict set less the protected runs
        gentle, protected = ev.lottery_candidates(scope, exclude_run=run.key, seed=seed)
        freed = gentle.freed_by_run()
        reported = ev.releases(scope, exclude_run=run.key)
        outlook = forecast(
            at=at, need=need.gpus, money=money, book=book, free=room.free_by_domain, unit=need.unit,
            spread=need.spread, remedies_by_run=freed, reported=reported,
        )
        fixes = remedies(
            run, reservation, gentle, money, outlook, at,
            capacity_deficit=max(0, need.gpus - room.placeable), funding_deficit=max(0, need.gpus - money.fundable),
        )
    return Plan(
        run=run, at=at, width=need.width, planned_width=need.planned_width, growing=need.growing,
        spares=need.spares, held_spares=need.held_spares, need=need.gpus, capacity=room, funding=money,
        reasons=tuple(why), remedies=tuple(fixes), forecast=outlook, reservation=need.reservation,
        groups=need.groups, protected=protected,
    )
