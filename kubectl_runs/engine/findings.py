"""Findings: problems in the ledger, the same kinds in every report (API.md §5 `leases audit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count, repeat
from operator import attrgetter, itemgetter

from .codes import FindingKind

DOUBLE_BOOKED = FindingKind.DOUBLE_BOOKED
UNKNOWN_NODE = FindingKind.UNKNOWN_NODE
UNKNOWN_RUN = FindingKind.UNKNOWN_RUN
UNKNOWN_ENVELOPE = FindingKind.UNKNOWN_ENVELOPE
MALFORMED_SLOT = FindingKind.MALFORMED_SLOT
SLOT_OUT_OF_RANGE = FindingKind.SLOT_OUT_OF_RANGE
INVALID_INTERVAL = FindingKind.INVALID_INTERVAL
CLOSED_WITHOUT_END = FindingKind.CLOSED_WITHOUT_END
OPEN_WITH_END = FindingKind.OPEN_WITH_END
FUTURE_START = FindingKind.FUTURE_START
DANGLING_RESERVATION = FindingKind.DANGLING_RESERVATION
UNKNOWN_SPONSOR = FindingKind.UNKNOWN_SPONSOR
ACL_VIOLATION = FindingKind.ACL_VIOLATION
OVERDRAFT = FindingKind.OVERDRAFT
UNBOUND_NAMESPACE = FindingKind.UNBOUND_NAMESPACE

KINDS = tuple(FindingKind)


@dataclass(frozen=True, order=True, init=False)
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

    def __init__(self, kind: str, lease: str | None, detail: str, envelope: tuple[str, str, str] | None = None,
                 namespace: str | None = None) -> None:
        # The fields go straight into the instance's dict: a frozen dataclass's own __init__ sets each through
        # object.__setattr__, twice the cost, and an audit of a contended ledger makes thousands of findings.
        fields = self.__dict__
        fields["kind"] = kind
        fields["lease"] = lease
        fields["detail"] = detail
        fields["envelope"] = envelope
        fields["namespace"] = namespace

    def concerns(self, namespace: str) -> bool:
        """Shown under ``-n namespace``: its lease, its envelope, or the namespace it names is there."""
        return (
            self.namespace == namespace
            or (self.envelope is not None and self.envelope[0] == namespace)
            or (self.lease is not None and self.lease.split("/", 1)[0] == namespace)
        )


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Stable, readable order: by kind as listed in KINDS, then lease, then detail; equal findings once (the
    first of them). A report can have thousands: the keys are made and compared by C-level passes, with no
    Python step per finding (``Finding``'s own hash and comparisons are Python functions)."""
    triples = list(map(_COMPARED, findings))  # what Finding's eq and hash compare
    unique = dict(zip(reversed(triples), reversed(findings), strict=True))  # (reversed: the first of equal ones)
    kept = list(unique.values())
    kinds, leases, details = zip(*unique, strict=True) if unique else ((), (), ())
    ranks = map(_RANK.get, kinds, repeat(len(KINDS)))
    order = sorted(zip(ranks, map(_NO_LEASE.get, leases, leases), details, count()))
    return list(map(kept.__getitem__, map(itemgetter(3), order)))


_COMPARED = attrgetter("kind", "lease", "detail")
_RANK = {kind: i for i, kind in enumerate(KINDS)}
_NO_LEASE = {None: ""}
