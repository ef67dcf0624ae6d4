"""The reports as values: what ``-o json|yaml`` prints and what the reconciler writes into status (API.md §5).

Each report is a frozen msgspec Struct whose fields, in order, are its JSON contract: the Python names are the
API's names in snake_case (``model.wire_name`` turns ``used_gpus`` into ``usedGPUs``, as for every record), and
``plain`` is the one encoding: ``msgspec.to_builtins``, nothing written by hand. Times are RFC 3339 strings
(``timeutil.rfc3339``), as the API writes them. The JSON Schemas in docs/schemas/ are generated from these types
(``python -m kubectl_runs.engine.schemas``).

To add a field to a report: add it here, where it belongs in the order, set it where the report is built
(the ``*_report`` function below, or the engine module it names), and regenerate the schemas.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..model import wire_name
from .codes import FindingKind

if TYPE_CHECKING:
    from .accounting import AggregateUsage, EnvelopeUsage
    from .findings import Finding


class Value(msgspec.Struct, frozen=True, rename=wire_name, forbid_unknown_fields=True):
    """Base of every report value: frozen, camelCase with GPU(s) upper-cased on the wire."""


def plain(value: Any) -> Any:
    """The JSON-shaped builtins of a report value (dicts in field order, lists, str, int, float, bool, None)."""
    return msgspec.to_builtins(value)


# --- shared pieces ------------------------------------------------------------------------------------------


class FindingEntry(Value):
    kind: FindingKind
    lease: str | None
    detail: str


def finding_entries(findings: list[Finding]) -> list[FindingEntry]:
    return [FindingEntry(f.kind, f.lease, f.detail) for f in findings]


# --- budgets usage --------------------------------------------------------------------------------------------


class EnvelopeRow(Value):
    namespace: str
    budget: str
    owner: str
    envelope: str
    flavor: str
    window_active: bool
    concurrency: int
    used_gpus: int
    headroom_gpus: int
    owned_gpus: int
    shared_gpus: int
    borrowed_gpus: int
    unfunded_gpus: int
    spare_gpus: int
    consumed_gpu_hours: float
    max_gpu_hours: float | None
    gpu_hours_headroom: float | None


class AggregateRow(Value):
    namespace: str
    budget: str
    owner: str
    name: str
    envelopes: list[str]
    max_concurrency: int
    used_gpus: int
    headroom_gpus: int


class UsageReport(Value):
    """``kubectl runs budgets usage``: every envelope at one instant, its Budget's aggregate caps, findings."""

    at: str
    envelopes: list[EnvelopeRow]
    aggregates: list[AggregateRow]
    findings: list[FindingEntry]


def round_hours(value: float) -> float:
    """GPU-hours in reports: four decimals."""
    return round(value, 4)


def envelope_row(usage: EnvelopeUsage) -> EnvelopeRow:
    headroom_hours = usage.gpu_hours_headroom
    namespace, budget, name = usage.key
    return EnvelopeRow(
        namespace=namespace,
        budget=budget,
        owner=usage.owner,
        envelope=name,
        flavor=usage.envelope.flavor,
        window_active=usage.window_active,
        concurrency=usage.envelope.concurrency,
        used_gpus=usage.used,
        headroom_gpus=usage.headroom,
        owned_gpus=usage.owned,
        shared_gpus=usage.shared,
        borrowed_gpus=usage.borrowed,
        unfunded_gpus=usage.unfunded,
        spare_gpus=usage.spare,
        consumed_gpu_hours=round_hours(usage.consumed_gpu_hours),
        max_gpu_hours=usage.envelope.max_gpu_hours,
        gpu_hours_headroom=None if headroom_hours is None else round_hours(headroom_hours),
    )


def aggregate_row(aggregate: AggregateUsage) -> AggregateRow:
    meta = aggregate.budget.metadata
    return AggregateRow(
        namespace=meta.namespace,
        budget=meta.name,
        owner=aggregate.budget.spec.owner,
        name=aggregate.name,
        envelopes=list(aggregate.envelopes),
        max_concurrency=aggregate.max_concurrency,
        used_gpus=aggregate.used,
        headroom_gpus=aggregate.headroom,
    )


# --- leases audit ---------------------------------------------------------------------------------------------


class AuditHoursRow(Value, kw_only=True):
    """One key of ``--hours-only``: an ``AuditRow`` without its peak (``audit_row_type(by, peaks=False)``)."""

    owner: str | None = None
    envelope: str | None = None
    flavor: str | None = None
    run: str | None = None
    node: str | None = None
    gpu_hours: float
    leases: int


class AuditRow(AuditHoursRow, kw_only=True):
    """One key of the breakdown. Only the ``--by`` dimensions appear, first, in the order asked for
    (``audit_row_type``); this type lists them all, for the schema."""

    peak_gpus: int


@functools.cache
def audit_row_type(by: tuple[str, ...], peaks: bool = True) -> type[msgspec.Struct]:
    """The row type of a breakdown by ``by``: its dimensions first, in that order, then the figures (the peak
    left out for ``--hours-only``)."""
    figures = [("gpu_hours", float), ("leases", int)] + ([("peak_gpus", int)] if peaks else [])
    name = "AuditRow" if peaks else "AuditHoursRow"
    return msgspec.defstruct(f"{name}_{'_'.join(by)}", [(dim, str) for dim in by] + figures, bases=(Value,),
                             frozen=True)


class AuditTotals(Value):
    gpu_hours: float
    leases: int


class AuditReport(Value):
    """``kubectl runs leases audit``: GPU-hours, leases and peaks per key over [since, until), and findings."""

    since: str
    until: str
    rows: list[AuditRow]
    totals: AuditTotals
    findings: list[FindingEntry]


class AuditHoursReport(Value):
    """``kubectl runs leases audit --hours-only``: GPU-hours and leases per key over [since, until), the rows and
    totals of ``AuditReport`` without peaks or findings."""

    since: str
    until: str
    rows: list[AuditHoursRow]
    totals: AuditTotals


# --- leases audit --every -------------------------------------------------------------------------------------


class PeriodRow(Value, kw_only=True):
    """One key in one period. Only the ``--by`` dimensions appear, after ``period``, in the order asked for
    (``period_row_type``); this type lists them all, for the schema."""

    period: str  # 2025-11-03 (day), 2025-W45 (ISO week), 2025-11 (month)
    owner: str | None = None
    envelope: str | None = None
    flavor: str | None = None
    run: str | None = None
    node: str | None = None
    gpu_hours: float  # inside the period (leases clipped to it)
    leases: int
    peak_gpus: int
    share: float | None  # of the period's GPU-hours
    utilization: float | None  # GPU-hours ÷ GPU-hours the fleet's GPUs offered in the period (of its flavor)


@functools.cache
def period_row_type(by: tuple[str, ...]) -> type[msgspec.Struct]:
    fields = [("period", str)] + [(dim, str) for dim in by] + [
        ("gpu_hours", float), ("leases", int), ("peak_gpus", int), ("share", float | None),
        ("utilization", float | None)]
    return msgspec.defstruct(f"PeriodRow_{'_'.join(by)}", fields, bases=(Value,), frozen=True)


class PeriodTotals(Value):
    period: str
    start: str  # the period clipped to the window
    end: str
    gpu_hours: float
    leases: int
    capacity_gpu_hours: float  # what the fleet's GPUs offered in the period
    utilization: float | None


class PeriodsAuditReport(Value):
    """``kubectl runs leases audit --every day|week|month``: one row per period and key, and the whole window's
    totals and findings."""

    since: str
    until: str
    every: Literal["day", "week", "month"]
    periods: list[PeriodTotals]
    rows: list[PeriodRow]
    totals: AuditTotals
    findings: list[FindingEntry]


# --- leases archive ------------------------------------------------------------------------------------------


class ArchivePartition(Value):
    month: str
    file: str
    leases: int
    bytes: int
    first_start: str
    last_ended: str | None


class ArchiveReport(Value):
    """``kubectl runs leases archive --to DIR``: what one archive run added, and the archive after it."""

    archive: str
    added: int  # closed leases this run wrote
    already_archived: int  # closed leases the archive held already (never written twice)
    open: int  # leases left out because they are open
    ended_after_before: int  # closed leases left out because they ended at or after --before
    months: list[str]  # the months whose file this run rewrote
    removed: list[str]  # files of replaced or interrupted runs deleted
    pruned: int  # leases deleted from the cluster (--prune): each re-read from the archive first
    prune_left: list[str]  # leases --prune left in the cluster: gone already, or changed since they were read
    generation: int
    leases: int  # leases in the archive
    first_start: str | None
    last_ended: str | None
    partitions: list[ArchivePartition]


class ArchiveVerifyReport(Value):
    """``kubectl runs leases archive --verify DIR``: the manifest checked against the files."""

    archive: str
    verified: bool
    generation: int
    leases: int
    first_start: str | None
    last_ended: str | None
    partitions: list[ArchivePartition]
    problems: list[str]
    stray: list[str]  # files the manifest does not list (an interrupted run's; the next run deletes them)


# --- seeds verify ---------------------------------------------------------------------------------------------


class ReservationCheck(Value):
    name: str
    seed: str
    verified: bool
    differences: list[str]


class VerifyReport(Value):
    """``kubectl runs seeds verify``: each activated Reservation's recorded draw, recomputed."""

    reservations: list[ReservationCheck]
