"""Findings: problems in the ledger, the same kinds in every report (API.md §5 `leases audit`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .codes import FindingKind

DOUBLE_BOOKED = FindingKind.DOUBLE_BOOKED
UNKNOWN_NODE = FindingKind.UNKNOWN_NODE
UNKNOWN_RUN = FindingKind.UNKNOWN_RUN
UNKNOWN_ENVELOPE = FindingKind.UNKNOWN_ENVELOPE
ACL_VIOLATION = FindingKind.ACL_VIOLATION
OVERDRAFT = FindingKind.OVERDRAFT
UNBOUND_NAMESPACE = FindingKind.UNBOUND_NAMESPACE

KINDS = tuple(FindingKind)


@dataclass(frozen=True, order=True)
class Finding:
    """One problem, said in a line a person can act on. ``lease`` is ``namespace/name`` or None when the
    finding is about a namespace or a budget rather than one lease."""

    kind: str
    lease: str | None
    detail: str
    # What the finding concerns, for filtering reports (not part of the JSON): an envelope key
    # (namespace, budget, envelope) and/or a namespace.
    envelope: tuple[str, str, str] | None = field(default=None, compare=False)
    namespace: str | None = field(default=None, compare=False)

    def concerns(self, namespace: str) -> bool:
        """Shown under ``-n namespace``: its lease, its envelope, or the namespace it names is there."""
        return (
            self.namespace == namespace
            or (self.envelope is not None and self.envelope[0] == namespace)
            or (self.lease is not None and self.lease.split("/", 1)[0] == namespace)
        )


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Stable, readable order: by kind as listed in KINDS, then lease, then detail."""
    rank = {kind: i for i, kind in enumerate(KINDS)}
    return sorted(set(findings), key=lambda f: (rank.get(f.kind, len(KINDS)), f.lease or "", f.detail))
