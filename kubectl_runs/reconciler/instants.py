"""The instants at which what the reconciler computed changes by itself, with no object changing: the loop
looks at everything again then (``next_change``), and what one batch or ledger pass kept for the next stops
standing then (``scope_horizon``: reconciler/books.py; ``evaluation_horizon``: ledger/memory.py)."""

from __future__ import annotations

from datetime import datetime

from ..engine.protection import Windows, protections
from ..model import Snapshot


def next_change(snapshot: Snapshot, at: datetime) -> datetime | None:
    """The first instant after ``at`` at which something the engine reads changes with no event: an envelope
    window opening or closing, a lease starting or ending, a reported ETA passing, a pending Reservation's
    earliestStart arriving, a protection window opening or ending (engine/protection.py). The loop looks at
    everything again then (instead of at the next resync)."""
    soonest: datetime | None = None

    def consider(when: datetime | None) -> None:
        nonlocal soonest
        if when is not None and when > at and (soonest is None or when < soonest):
            soonest = when

    for budget in snapshot.budgets:
        for envelope in budget.spec.envelopes:
            consider(envelope.start)
            consider(envelope.end)
    for lease in snapshot.leases:
        consider(lease.spec.start)
        if lease.status.closed:
            consider(lease.status.ended)
    grace = Windows().eta_grace  # what plan and the remedies in status count (the default windows)
    for run in snapshot.runs:
        eta = run.status.eta
        if eta is not None and eta.estimated_completion is not None:
            for when in (eta.estimated_completion - grace, eta.estimated_completion, eta.estimated_completion + grace):
                consider(when)
    if any(r.status.state in (None, "Pending") for r in snapshot.reservations):  # only a pending one's draw cares
        for protection in protections(snapshot, at, Windows()).values():
            consider(protection.until)  # a Run comes back into the lotteries' conflict sets
    for reservation in snapshot.reservations:
        if reservation.status.state in (None, "Pending"):
            consider(reservation.spec.earliest_start)
    return soonest


def scope_horizon(snapshot: Snapshot, at: datetime) -> datetime | None:
    """The first instant after ``at`` at which a scope's lottery candidates or releases of ``snapshot`` may change
    with no object changing: a lease starting or ending, a reported completion passing or coming within the grace
    (engine/protection.py's FinishingSoon), any protection ending. None: never."""
    grace = Windows().eta_grace
    times = [lease.spec.start for lease in snapshot.leases]
    times += [lease.status.ended for lease in snapshot.leases if lease.status.ended is not None]
    for run in snapshot.runs:
        eta = run.status.eta.estimated_completion if run.status.eta is not None else None
        if eta is not None:
            times += (eta - grace, eta, eta + grace)
    times += [p.until for p in protections(snapshot, at, Windows()).values()]
    return min((t for t in times if t > at), default=None)


def evaluation_horizon(snapshot: Snapshot, at: datetime) -> datetime | None:
    """``scope_horizon`` and the instants an envelope's window opens or closes."""
    times = [t for _budget, envelope in snapshot.envelopes_by_key.values() for t in (envelope.start, envelope.end)]
    found = scope_horizon(snapshot, at)
    return min([t for t in times if t > at] + ([found] if found is not None else []), default=None)
