"""``leases audit --every day|week|month``: the audit's breakdown once per calendar period (UTC days, ISO weeks
from Monday, months), each period clipped to the window and each lease clipped to each period (as Slurm's
sreport does), with each key's share of the period's GPU-hours and the fleet's utilization: GPU-hours used ÷
GPU-hours its GPUs offered in the period.

Capacity is a step function given by the caller: ``(instant, {flavor: GPUs})`` records, each saying what the
fleet offered up to that instant since the record before it (the nodes an archive run saw, recorded with it),
and the GPUs of the nodes read now for everything after the last record. The findings and totals are the
whole window's, from ``audit.audit`` itself: the same as without ``--every``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from ..model import Snapshot
from ..timeutil import rfc3339
from . import reports
from .audit import FLAVOR, AuditReport, AuditRow, audit, breakdown

DAY, WEEK, MONTH = "day", "week", "month"
EVERY = (DAY, WEEK, MONTH)


@dataclass(frozen=True)
class Period:
    label: str  # 2025-11-03, 2025-W45, 2025-11
    start: datetime  # clipped to the window
    end: datetime
    rows: list[AuditRow]
    gpu_seconds: float
    leases: int
    capacity: dict[str, float]  # GPU-seconds offered, per flavor

    @property
    def capacity_seconds(self) -> float:
        return sum(self.capacity.values())


@dataclass(frozen=True)
class PeriodsReport:
    every: str
    audit: AuditReport  # the whole window: totals, findings, notes
    periods: list[Period]

    @property
    def report(self) -> reports.PeriodsAuditReport:
        by = self.audit.by
        row_type = reports.period_row_type(by)
        hours = reports.round_hours
        rows = []
        periods = []
        for period in self.periods:
            for row in period.rows:
                capacity = period.capacity.get(row.key[by.index(FLAVOR)], 0.0) if FLAVOR in by \
                    else period.capacity_seconds
                rows.append(row_type(period.label, *row.key, hours(row.gpu_hours), row.leases, row.peak_gpus,
                                     _ratio(row.gpu_seconds, period.gpu_seconds), _ratio(row.gpu_seconds, capacity)))
            periods.append(reports.PeriodTotals(
                period=period.label, start=rfc3339(period.start) or "", end=rfc3339(period.end) or "",
                gpu_hours=hours(period.gpu_seconds / 3600.0), leases=period.leases,
                capacity_gpu_hours=hours(period.capacity_seconds / 3600.0),
                utilization=_ratio(period.gpu_seconds, period.capacity_seconds)))
        whole = self.audit
        return reports.PeriodsAuditReport(
            since=rfc3339(whole.since) or "",
            until=rfc3339(whole.until) or "",
            every=self.every,
            periods=periods,
            rows=rows,
            totals=reports.AuditTotals(hours(whole.total_gpu_hours), whole.total_leases),
            findings=reports.finding_entries(whole.findings),
        )


def _held_until(lease) -> float:
    """When the lease stopped holding its slots (epoch seconds); open leases: never (inf)."""
    status = lease.status
    if not status.closed:
        return float("inf")
    return (status.ended or lease.spec.start).timestamp()


def _ratio(part: float, whole: float) -> float | None:
    """Six decimals; None when there is nothing to divide by (no GPU-hours, no capacity known)."""
    return round(part / whole, 6) if whole > 0 else None


def boundaries(since: datetime, until: datetime, every: str) -> list[tuple[str, datetime, datetime]]:
    """The calendar periods that meet ``[since, until)``, each clipped to it: (label, start, end)."""
    if every not in EVERY:
        raise ValueError(f"every: {every!r} is not one of {', '.join(EVERY)}")
    since, until = since.astimezone(UTC), until.astimezone(UTC)
    start = since.replace(hour=0, minute=0, second=0, microsecond=0)
    if every == WEEK:
        start -= timedelta(days=start.weekday())
    elif every == MONTH:
        start = start.replace(day=1)
    out = []
    while start < until:
        if every == DAY:
            end, label = start + timedelta(days=1), start.strftime("%Y-%m-%d")
        elif every == WEEK:
            year, week, _ = start.isocalendar()
            end, label = start + timedelta(days=7), f"{year}-W{week:02d}"
        else:
            end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
            label = start.strftime("%Y-%m")
        out.append((label, max(start, since), min(end, until)))
        start = end
    return out


def offered(capacity: Sequence[tuple[datetime, Mapping[str, int]]], present: Mapping[str, int],
            lo: datetime, hi: datetime) -> dict[str, float]:
    """GPU-seconds per flavor offered during ``[lo, hi)``: each record covers the time since the record before it
    (the first one, everything before it); ``present`` covers the time after the last record."""
    out: dict[str, float] = {}
    begin = lo
    for instant, gpus in sorted(capacity, key=lambda record: record[0]):
        if begin >= hi:
            break
        if instant <= begin:
            continue
        end = min(instant, hi)
        _add(out, gpus, (end - begin).total_seconds())
        begin = end
    if begin < hi:
        _add(out, present, (hi - begin).total_seconds())
    return out


def _add(out: dict[str, float], gpus: Mapping[str, int], seconds: float) -> None:
    for flavor, count in gpus.items():
        out[flavor] = out.get(flavor, 0.0) + count * seconds


def audit_periods(
    snapshot: Snapshot,
    at: datetime,
    *,
    since: datetime,
    until: datetime,
    every: str,
    by: Sequence[str],
    namespace: str | None = None,
    capacity: Sequence[tuple[datetime, Mapping[str, int]]] = (),
    present: Mapping[str, int] | None = None,
    read: datetime | None = None,
) -> PeriodsReport:
    """The audit of ``[since, until)`` (totals and findings) and its breakdown per period. Periods end at the
    evaluation clock ``at`` like the window: nothing after it is counted, and no capacity is offered after it."""
    whole = audit(snapshot, at, since=since, until=until, by=by, namespace=namespace, read=read)
    hi = min(until, at)
    # Each period is counted over the leases that can touch it only (the same leases in the same order as the
    # snapshot's, so the same sums): one pass over the instants per period instead of a clip of every lease.
    leases = snapshot.leases
    starts = [lease.spec.start.timestamp() for lease in leases]
    ends = [_held_until(lease) for lease in leases]
    periods = []
    for label, lo, end in boundaries(since, until, every):
        end = min(end, hi)
        if lo >= end:
            rows, seconds, count, offer = [], 0.0, 0, {}
        else:
            first, last = lo.timestamp(), end.timestamp()
            inside = tuple(leases[i] for i in range(len(leases)) if starts[i] < last and ends[i] > first)
            rows, seconds, count = breakdown(replace(snapshot, leases=inside), at, since=lo, until=end, by=by,
                                             namespace=namespace)
            offer = offered(capacity, present or {}, lo, end)
        periods.append(Period(label, lo, end, rows, seconds, count, offer))
    return PeriodsReport(every=every, audit=whole, periods=periods)
