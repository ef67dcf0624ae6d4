"""The names reports carry, each listed once, in the order reports list them (API.md §3, §5).

They are ``enum.StrEnum``s: each member is its string (``ReasonCode.NO_ENVELOPE == "NoEnvelope"``), so JSON,
YAML, tables and the status the reconciler writes show the plain name, and the JSON Schemas list the values.
"""

from __future__ import annotations

from enum import StrEnum


class FundingClass(StrEnum):
    """How a funded slot is paid for (API.md §3 Charges); a slot no envelope pays for is unfunded."""

    OWNED = "owned"
    SHARED = "shared"
    BORROWED = "borrowed"
    UNFUNDED = "unfunded"


# The lower, the sooner the resolver and the lottery take it; an unknown class sorts last.
CLASS_RANK = {FundingClass.UNFUNDED: 0, FundingClass.BORROWED: 1, FundingClass.SHARED: 2, FundingClass.OWNED: 3}


def class_rank(cls: str) -> int:
    """unfunded 0, borrowed 1, shared 2, owned 3; anything else 4."""
    return CLASS_RANK.get(cls, len(CLASS_RANK))  # type: ignore[call-overload]


class Relation(StrEnum):
    """Where a funding source stands from the run's owner, in the order the funding walk takes them."""

    OWN = "own"
    ANCESTOR = "ancestor"
    SIBLING = "sibling"
    SPONSOR = "sponsor"


class ReasonCode(StrEnum):
    """Why a run cannot start as asked: the request, then funding, then capacity."""

    INVALID_REQUEST = "InvalidRequest"
    UNBOUND_NAMESPACE = "UnboundNamespace"
    NO_ENVELOPE = "NoEnvelope"
    WINDOW_NOT_OPEN = "WindowNotOpen"
    INSUFFICIENT_BUDGET = "InsufficientBudget"
    BORROW_LIMIT = "BorrowLimit"
    ACL_DENIED = "ACLDenied"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    NO_SINGLE_DOMAIN = "NoSingleDomain"


# The reasons no GPU count can fix: a plan with one of them has no forecast and no remedies.
BLOCKING = (ReasonCode.INVALID_REQUEST, ReasonCode.UNBOUND_NAMESPACE)


class RemedyKind(StrEnum):
    """What would fix a deficit, in the order a plan lists them (and the resolver applies the first three)."""

    RECLAIM_UNFUNDED = "ReclaimUnfunded"
    DROP_SPARE = "DropSpare"
    SHRINK = "Shrink"
    BORROW = "Borrow"
    WAIT = "Wait"
    LOTTERY = "Lottery"


class Confidence(StrEnum):
    """How sure a forecast's earliest start is."""

    REPORTED = "reported"
    WINDOW_ALIGNED = "window-aligned"
    UNKNOWN = "unknown"


class FindingKind(StrEnum):
    """A problem in the ledger, in the order reports list them."""

    DOUBLE_BOOKED = "DoubleBooked"
    UNKNOWN_NODE = "UnknownNode"
    MALFORMED_SLOT = "MalformedSlot"
    SLOT_OUT_OF_RANGE = "SlotOutOfRange"
    UNKNOWN_RUN = "UnknownRun"
    UNKNOWN_ENVELOPE = "UnknownEnvelope"
    INVALID_INTERVAL = "InvalidInterval"
    CLOSED_WITHOUT_END = "ClosedWithoutEnd"
    OPEN_WITH_END = "OpenWithEnd"
    FUTURE_START = "FutureStart"
    DANGLING_RESERVATION = "DanglingReservation"
    UNKNOWN_SPONSOR = "UnknownSponsor"
    ACL_VIOLATION = "ACLViolation"
    OVERDRAFT = "Overdraft"
    UNBOUND_NAMESPACE = "UnboundNamespace"
