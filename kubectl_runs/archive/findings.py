"""The findings of ``leases audit --archive`` over the window's view ``audit_leases`` (archive/relation.py).

``window_findings`` is the one call the archive's audit makes for them (archive/audit.py). For now it gives the
engine's findings on the snapshot plus the view's archived leases rebuilt as records (``schema.lease_of``), merged
as ``reader.with_archived`` merges them — the findings of one snapshot holding every lease, exactly, and the
part of the audit whose cost still grows with the leases in the window; the findings in SQL over the same view
replace its body.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from ..engine import audit as engine
from ..engine.findings import Finding
from ..model import Snapshot
from .breakdown import run
from .relation import VIEW
from .schema import LEASE_SELECT, lease_of


def window_findings(con, snapshot: Snapshot, at: datetime, *, since: datetime, until: datetime,
                    namespace: str | None, notes: list[str]) -> list[Finding]:
    """The audit's findings over ``[since, min(until, at))``, sorted (``findings.sort_findings``), of
    ``namespace`` only when given; notes about them go to ``notes``. ``audit_leases`` is defined on ``con`` for
    that window, with ``snapshot``'s leases as the live ones."""
    archived = [lease_of(values) for values in run(con, f"SELECT {LEASE_SELECT} FROM {VIEW} WHERE NOT live")]
    if archived:
        merged = [*snapshot.leases, *archived]
        merged.sort(key=lambda x: (x.metadata.namespace, x.metadata.name))
        snapshot = replace(snapshot, leases=tuple(merged))
    return engine.findings(snapshot, at, since=since, until=until, namespace=namespace, notes=notes)
