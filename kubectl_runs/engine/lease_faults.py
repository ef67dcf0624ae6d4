"""Ledger facts the API server accepts but no honest ledger holds (docs/arithmetic.md, Findings): a lease's own
times, a Reservation's references, a Run's sponsors. The slots that name no GPU are engine/slots.py.

* ``InvalidInterval`` — a closed lease whose ``ended`` is before its ``start``;
* ``ClosedWithoutEnd`` — ``closed: true`` without ``ended``;
* ``OpenWithEnd`` — not closed, yet with an ``ended`` or a ``closureReason`` (the ledger keeper writes the three
  together): counted as open, as ``closed`` says, and reported;
  the first two hold no GPU-hours (the arithmetic cannot give a reversed or unknown interval any) and are reported by
  the audits whose window holds the lease's ``start``, and by ``explain`` of its run;
* ``FutureStart`` — a lease whose ``start`` is later than the instant its objects were read (the snapshot's
  stamp; live, or for a file without one, the wall clock at start-up) by more than ``FUTURE_START_TOLERANCE``.
  The ledger keeper mints a lease with ``start`` = the instant it writes it, so no lease can start after the
  snapshot was taken; a reservation's ``earliestStart`` is in the future, its leases are not. ``--at`` in the
  past is no fault: leases minted after it are simply not open yet. Reported by every audit (a lease from the
  future belongs to no window) and by ``explain`` of its run;
* ``DanglingReservation`` — an Activated Reservation whose ``runRef`` names no Run in the snapshot (unless the
  run's leases say it was deleted: ``RunDeleted``/``Orphaned``, as ``UnknownRun``), or whose
  ``payingEnvelope`` names no envelope. Reported by the audits whose window holds its activation instant
  (``activation.at``, else ``earliestStart``);
* ``UnknownSponsor`` — a Run's ``spec.funding.sponsors`` names an owner no Budget in the snapshot has: nothing
  can be borrowed from it. Reported by ``explain`` of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from ..model import GPULease, Reservation, Run, Snapshot
from ..timeutil import rfc3339
from . import findings as fk
from .findings import Finding
from .slots import slot_faults, slot_findings

# Clocks disagree a little: the reconciler's, the machine that took the snapshot. Past this, a start is wrong.
FUTURE_START_TOLERANCE = timedelta(minutes=5)
# Runs whose leases say they were deleted: a reservation naming one is history, not a fault (as UnknownRun).
_RUN_GONE = frozenset({"RunDeleted", "Orphaned"})


def read_at(snapshot: Snapshot, at: datetime, read: datetime | None = None) -> datetime:
    """The instant the snapshot's objects were read: its stamp, else ``read`` (the wall clock, given by the CLI),
    else the evaluation instant ``at``."""
    return snapshot.taken_at or read or at


def interval_finding(lease: GPULease) -> Finding | None:
    """``InvalidInterval``, ``ClosedWithoutEnd`` or ``OpenWithEnd`` for this lease, None when its interval is sound."""
    status = lease.status
    if not status.closed:
        if status.ended is None and status.closure_reason is None:
            return None
        said = " and ".join(x for x in (status.ended and f"ended {rfc3339(status.ended)}",
                                        status.closure_reason and f"closureReason {status.closure_reason}") if x)
        return Finding(fk.OPEN_WITH_END, lease.key,
                       f"not closed, yet has {said}: counted as open (its {_gpus(lease)} held up to the evaluation "
                       "instant); close it, or clear the stray fields", envelope=lease.payer,
                       namespace=lease.metadata.namespace)
    ended, start = status.ended, lease.spec.start
    if ended is None:
        return Finding(fk.CLOSED_WITHOUT_END, lease.key,
                       f"closed ({status.closure_reason or 'no closureReason'}) with no ended: the GPU-hours of its "
                       f"{_gpus(lease)} from {rfc3339(start)} are unknown and counted as 0; record when it ended",
                       envelope=lease.payer, namespace=lease.metadata.namespace)
    if ended < start:
        return Finding(fk.INVALID_INTERVAL, lease.key,
                       f"ended {rfc3339(ended)} before its start {rfc3339(start)}: its {_gpus(lease)} are counted "
                       "0 GPU-hours; correct ended (or start)", envelope=lease.payer,
                       namespace=lease.metadata.namespace)
    return None


def future_finding(lease: GPULease, read: datetime) -> Finding | None:
    """``FutureStart`` when the lease starts more than ``FUTURE_START_TOLERANCE`` after ``read``."""
    start = lease.spec.start
    if start <= read + FUTURE_START_TOLERANCE:
        return None
    return Finding(fk.FUTURE_START, lease.key,
                   f"starts {rfc3339(start)}, after the snapshot was read ({rfc3339(read)}): a lease is minted at "
                   f"the instant it starts, so its {_gpus(lease)} are in no report until then; correct start",
                   envelope=lease.payer, namespace=lease.metadata.namespace)


def lease_time_findings(leases: Iterable[GPULease], since: datetime, hi_at: datetime,
                        read: datetime | None) -> list[Finding]:
    """The interval findings of the leases starting in ``[since, hi_at)`` and every ``FutureStart`` (see above;
    none when ``read`` is unknown): one pass, one comparison per sound lease."""
    out: list[Finding] = []
    latest = None if read is None else read + FUTURE_START_TOLERANCE
    for lease in leases:
        start = lease.spec.start
        if latest is not None and start > latest:
            out.append(future_finding(lease, read))  # type: ignore[arg-type]
        status = lease.status
        if since <= start < hi_at:
            if status.closed:
                ended = status.ended
                if ended is None or ended < start:
                    out.append(interval_finding(lease))  # type: ignore[arg-type]
            elif status.ended is not None or status.closure_reason is not None:
                out.append(interval_finding(lease))  # type: ignore[arg-type]
    return out


def reservation_findings(snapshot: Snapshot, since: datetime, hi_at: datetime) -> list[Finding]:
    """``DanglingReservation`` for the Activated Reservations whose activation instant is in ``[since, hi_at)``."""
    out = []
    for reservation in snapshot.reservations:
        if reservation.status.state != "Activated":
            continue
        activation = reservation.status.activation
        when = (activation.at if activation is not None else None) or reservation.spec.earliest_start
        if since <= when < hi_at:
            found = dangling(snapshot, reservation)
            if found is not None:
                out.append(found)
    return out


def dangling(snapshot: Snapshot, reservation: Reservation) -> Finding | None:
    spec = reservation.spec
    run_key = spec.run_ref.key
    problems = []
    if run_key not in snapshot.runs_by_key:
        closures = {lease.status.closure_reason for lease in snapshot.leases_by_run.get(run_key, ())}
        if closures.isdisjoint(_RUN_GONE):
            problems.append(f"its run {run_key} is not in the snapshot")
    paying = spec.paying_envelope
    envelope = None
    if paying is not None:
        envelope = (spec.run_ref.namespace, paying.budget, paying.envelope)
        if envelope not in snapshot.envelopes_by_key:
            problems.append(f"its paying envelope {'/'.join(envelope[:2])} envelope {envelope[2]} does not exist")
    if not problems:
        return None
    activation = reservation.status.activation
    freed = f", freed {activation.freed_gpus} GPUs" if activation is not None and activation.freed_gpus else ""
    return Finding(fk.DANGLING_RESERVATION, None,
                   f"reservation {reservation.key} is Activated{freed} but {' and '.join(problems)}: check its "
                   "spec, or Release it", envelope=envelope, namespace=reservation.metadata.namespace)


def sponsor_findings(snapshot: Snapshot, run: Run) -> list[Finding]:
    """``UnknownSponsor`` for each of the run's sponsors that no Budget names as its owner."""
    funding = run.spec.funding
    if funding is None or not funding.sponsors:
        return []
    owners = {budget.spec.owner for budget in snapshot.budgets}
    borrow = "" if funding.allow_borrow else " (and allowBorrow is false)"
    return [
        Finding(fk.UNKNOWN_SPONSOR, None,
                f"run {run.key} names sponsor {sponsor}{borrow}, which owns no Budget: nothing can be borrowed "
                "from it; fix spec.funding.sponsors", namespace=run.metadata.namespace)
        for sponsor in dict.fromkeys(funding.sponsors) if sponsor not in owners
    ]


def run_lease_findings(snapshot: Snapshot, leases: Sequence[GPULease], open_keys: Mapping[str, object],
                       read: datetime) -> list[Finding]:
    """What is wrong with a run's leases (``explain``): the slots of the open ones (``open_keys``: the open
    leases by key), and the times of all of them."""
    nodes = snapshot.nodes_by_name
    out: list[Finding] = []
    for lease in leases:
        if lease.key in open_keys:
            faults = slot_faults(lease.spec.slice.slots, nodes)
            if faults:
                out.extend(slot_findings(lease, faults, nodes, envelope=lease.payer))
        for found in (interval_finding(lease), future_finding(lease, read)):
            if found is not None:
                out.append(found)
    return out


def _gpus(lease: GPULease) -> str:
    gpus = lease.gpus
    return f"{gpus} GPU" if gpus == 1 else f"{gpus} GPUs"
