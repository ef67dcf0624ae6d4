"""``leases audit --archive``: the audit of the live (or snapshot) leases and the archived ones together, its
rows, totals, peaks and periods computed in DuckDB (archive/breakdown.py over the view of archive/relation.py),
its findings by ``findings.window_findings`` — the same ``AuditReport`` / ``PeriodsReport`` values the engine
gives on one snapshot holding every lease (engine/audit.py, engine/audit_periods.py), so the views print them
alike and ``-o json`` is byte for byte the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from ..engine.audit import DIMENSIONS, AuditReport, window_notes
from ..engine.audit_periods import Period, PeriodsReport, boundaries, offered
from ..engine.audit_window import seconds_of
from ..model import Snapshot
from ..timeutil import rfc3339
from . import breakdown, db, findings, relation


def audit(snapshot: Snapshot, archives: Sequence, at: datetime, *, since: datetime, until: datetime,
          by: Sequence[str], namespace: str | None = None) -> AuditReport:
    """``engine.audit.audit`` of ``snapshot`` plus the leases of ``archives`` (each lease once)."""
    return _audit(snapshot, archives, at, since, until, _checked(by, since, until), namespace)[0]


def audit_periods(snapshot: Snapshot, archives: Sequence, at: datetime, *, since: datetime, until: datetime,
                  every: str, by: Sequence[str], namespace: str | None = None,
                  capacity: Sequence[tuple[datetime, Mapping[str, int]]] = (),
                  present: Mapping[str, int] | None = None) -> PeriodsReport:
    """``engine.audit_periods.audit_periods`` of ``snapshot`` plus the leases of ``archives``."""
    by = _checked(by, since, until)
    spans = boundaries(since, until, every)  # checks ``every``
    hi = min(until, at)
    clipped = [(label, lo, min(end, hi)) for label, lo, end in spans]
    counted = [(lo, end) for _label, lo, end in clipped if lo < end]  # periods after ``at`` count nothing
    whole, con = _audit(snapshot, archives, at, since, until, by, namespace, keep=True)
    try:
        per_period = iter(breakdown.period_rows(con, by, namespace, every, counted))
    finally:
        con.close()
    periods = []
    for label, lo, end in clipped:
        if lo >= end:
            periods.append(Period(label, lo, end, [], 0.0, 0, {}))
            continue
        rows, micros, leases = next(per_period)
        periods.append(Period(label, lo, end, rows, seconds_of(micros), leases, offered(capacity, present or {}, lo,
                                                                                          end)))
    return PeriodsReport(every=every, audit=whole, periods=periods)


def _checked(by: Sequence[str], since: datetime, until: datetime) -> tuple[str, ...]:
    by = tuple(by)
    if not by or any(dim not in DIMENSIONS for dim in by) or len(set(by)) != len(by):
        raise ValueError(f"by: one to {len(DIMENSIONS)} distinct dimensions of {', '.join(DIMENSIONS)}")
    if since >= until:
        raise ValueError(f"since ({rfc3339(since)}) must be before until ({rfc3339(until)})")
    return by


def _audit(snapshot: Snapshot, archives: Sequence, at: datetime, since: datetime, until: datetime,
           by: tuple[str, ...], namespace: str | None, keep: bool = False):
    """The report, and the connection holding the window when ``keep`` (the caller closes it)."""
    notes = window_notes(at, until)
    con = db.connect()
    try:
        relation.define(con, archives, snapshot.leases, since, min(until, at))
        breakdown.define_entries(con, by, namespace)
        rows, micros, leases = breakdown.rows(con, by, namespace)
        found = findings.window_findings(con, snapshot, at, since=since, until=until, namespace=namespace,
                                         notes=notes)
    except BaseException:
        con.close()
        raise
    if not keep:
        con.close()
    report = AuditReport(at=at, since=since, until=until, by=by, rows=rows, total_gpu_seconds=seconds_of(micros),
                         total_leases=leases, findings=found, notes=notes)
    return report, (con if keep else None)
