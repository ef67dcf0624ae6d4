"""``leases audit --archive``: the audit of the live (or snapshot) leases and the archived ones together, its
rows, totals, peaks and periods computed in DuckDB (archive/breakdown.py over the view of archive/relation.py),
its findings by archive/findings.py (SQL selects the leases each kind depends on, the engine judges them alone):
the same ``AuditReport`` / ``PeriodsReport`` values the engine gives on one snapshot holding every lease
(engine/audit.py, engine/audit_periods.py), so the views print them alike and ``-o json`` is byte for byte the
same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime

from ..engine.audit import NODE, AuditReport, checked, window_notes
from ..engine.audit_periods import Period, PeriodsReport, boundaries, offered
from ..engine.audit_window import seconds_of
from ..engine.findings import Finding, sort_findings
from ..engine.lease_faults import read_at
from ..model import Snapshot
from . import breakdown, db, findings, relation
from .faults import archived_time_findings


def audit(snapshot: Snapshot, archives: Sequence, at: datetime, *, since: datetime, until: datetime,
          by: Sequence[str], namespace: str | None = None, hours_only: bool = False,
          read: datetime | None = None) -> AuditReport:
    """``engine.audit.audit`` of ``snapshot`` plus the leases of ``archives`` (each lease once). ``hours_only``:
    GPU-hours and leases alone, one aggregate over the window (``breakdown.hours``)."""
    by = checked(by, since, until)
    notes = window_notes(at, until)
    if hours_only:
        with _window(snapshot, archives, since, min(until, at), by, namespace, entries=False) as con:
            rows, micros, leases = breakdown.hours(con, by, namespace)
        return AuditReport(at=at, since=since, until=until, by=by, rows=rows, total_gpu_seconds=seconds_of(micros),
                           total_leases=leases, findings=[], notes=notes, hours_only=True)
    with _window(snapshot, archives, since, min(until, at), by, namespace) as con:
        rows, micros, leases = breakdown.rows(con, by, namespace)
        found, instants = _findings(con, snapshot, archives, at, since, until, namespace, notes, read)
    return AuditReport(at=at, since=since, until=until, by=by, rows=rows, total_gpu_seconds=seconds_of(micros),
                       total_leases=leases, findings=found, ledger_instants=instants, notes=notes)


def audit_periods(snapshot: Snapshot, archives: Sequence, at: datetime, *, since: datetime, until: datetime,
                  every: str, by: Sequence[str], namespace: str | None = None,
                  capacity: Sequence[tuple[datetime, Mapping[str, int]]] = (),
                  present: Mapping[str, int] | None = None, read: datetime | None = None) -> PeriodsReport:
    """``engine.audit_periods.audit_periods`` of ``snapshot`` plus the leases of ``archives``: the periods and
    the whole window's rows from one sweep (``breakdown.period_rows``)."""
    by = checked(by, since, until)
    hi = min(until, at)
    clipped = [(label, lo, min(end, hi)) for label, lo, end in boundaries(since, until, every)]
    notes = window_notes(at, until)
    with _window(snapshot, archives, since, hi, by, namespace) as con:
        rows, per_period = breakdown.period_rows(con, by, namespace, every,
                                                 [(lo, end) for _label, lo, end in clipped if lo < end])
        if NODE in by:
            micros, leases = breakdown.lease_totals(con, namespace)
        else:
            micros, leases = sum(p[1] for p in per_period), sum(row.leases for row in rows)
        found, instants = _findings(con, snapshot, archives, at, since, until, namespace, notes, read)
    whole = AuditReport(at=at, since=since, until=until, by=by, rows=rows, total_gpu_seconds=seconds_of(micros),
                        total_leases=leases, findings=found, ledger_instants=instants, notes=notes)
    periods = []
    counted = iter(per_period)
    for label, lo, end in clipped:
        if lo >= end:  # after the evaluation time: nothing counted, no capacity offered
            periods.append(Period(label, lo, end, [], 0.0, 0, {}))
            continue
        period_rows, period_micros, period_leases = next(counted)
        periods.append(Period(label, lo, end, period_rows, seconds_of(period_micros), period_leases,
                              offered(capacity, present or {}, lo, end)))
    return PeriodsReport(every=every, audit=whole, periods=periods)


def _findings(con, snapshot: Snapshot, archives: Sequence, at: datetime, since: datetime, until: datetime,
              namespace: str | None, notes: list[str], read: datetime | None) -> tuple[list[Finding], int]:
    """The window's findings (archive/findings.py), with the time findings of archived leases (archive/faults.py)."""
    hi_at = min(until, at)
    read = read_at(snapshot, at, read)
    found, instants = findings.findings(con, relation.VIEW, snapshot, since, hi_at, namespace=namespace, notes=notes,
                                        read=read)
    timed = archived_time_findings(con, archives, snapshot.leases, since, hi_at, read, namespace)
    return sort_findings([*found, *timed]), instants


@contextmanager
def _window(snapshot: Snapshot, archives: Sequence, lo: datetime, hi: datetime, by: tuple[str, ...],
            namespace: str | None, entries: bool = True) -> Iterator:
    """A connection holding the window's view (archive/relation.py) and (``entries``) its entries
    (archive/breakdown.py)."""
    con = db.connect()
    try:
        relation.define(con, archives, snapshot.leases, lo, hi)
        if entries:
            breakdown.define_entries(con, by, namespace)
        yield con
    finally:
        con.close()
