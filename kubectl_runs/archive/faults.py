"""The lease time findings (engine/lease_faults.py: ``InvalidInterval``, ``ClosedWithoutEnd``, ``FutureStart``)
of archived leases: the audit window's view (archive/relation.py) holds only the leases that held GPUs in the
window, and these never did, so they are read from the archive's files here — only the files whose starts can
match (the manifest's ``firstStart``/``lastStart``), only the rows that match (DuckDB pushes the filter on
``start`` into the Parquet scan). A lease read live is judged from its live copy (engine/audit.py), not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..engine.findings import Finding
from ..engine.lease_faults import FUTURE_START_TOLERANCE, future_finding, interval_finding
from ..model import GPULease
from . import db
from .manifest import ArchiveError
from .schema import LEASE_SELECT, lease_of, micros


def archived_time_findings(con, archives: Sequence, live: Sequence[GPULease], since: datetime, hi_at: datetime,
                           read: datetime | None, namespace: str | None) -> list[Finding]:
    """The time findings of the archived leases not read live: interval faults of those starting in
    ``[since, hi_at)``, ``FutureStart`` of those starting after ``read`` (+ the tolerance; none when None)."""
    latest = None if read is None else read + FUTURE_START_TOLERANCE
    live_keys = {lease.archive_key for lease in live}
    out: dict[tuple, Finding] = {}
    for arch in archives:
        files = [p for p in arch.manifest.partitions
                 if (p.first_start < hi_at and p.last_start >= since) or (latest is not None and p.last_start > latest)]
        if not files:
            continue
        where = (f"(start >= {_ts(since)} AND start < {_ts(hi_at)} AND (ended IS NULL OR ended < start))"
                 + (f" OR start > {_ts(latest)}" if latest is not None else ""))
        if namespace is not None:
            where = f"namespace = {db.quote(namespace)} AND ({where})"
        where = f"{arch.where_cluster()} AND ({where})"
        try:
            rows = con.execute(f"SELECT {LEASE_SELECT} FROM {arch.scan(files, ', hive_partitioning = false')} "
                               f"WHERE {where}").fetchall()
        except db.Error as exc:
            raise ArchiveError(f"the audit's findings: DuckDB failed: {db.first_line(exc)}") from None
        for row in rows:
            lease = lease_of(row)
            if lease.archive_key in live_keys:
                continue
            start = lease.spec.start
            found = [future_finding(lease, read) if latest is not None and start > latest else None]
            if since <= start < hi_at:
                found.append(interval_finding(lease))
            for finding in found:
                if finding is not None:
                    out.setdefault((finding.kind, finding.lease, finding.detail), finding)
    return list(out.values())


def _ts(instant: datetime) -> str:
    return f"make_timestamp({micros(instant)})::TIMESTAMPTZ"
