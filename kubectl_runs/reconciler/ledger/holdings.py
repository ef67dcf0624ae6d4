"""What a Run holds and what it still lacks, in groups (the admission stage's arithmetic), and the states the
stages test (a live Run, a pending or authorized Reservation)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...engine.lottery import CLOSURE_REASON, is_activated
from ...model import GPULease, Reservation, Run, Snapshot
from .options import ACTIVE, APPROVAL_ANNOTATION, APPROVED, MANAGED_BY, MANAGED_BY_LABEL, PENDING

TAKEN = frozenset(CLOSURE_REASON.values())  # closures an activation makes
NOTHING_STARTS = frozenset({"NotEnoughToFree", "NotPlaceable", "NotFunded"})  # Failed: what would start it


def authorized(reservation: Reservation) -> bool:
    """Made by the reconciler, or approved by an admin: the only Reservations that may preempt."""
    meta = reservation.metadata
    return meta.labels.get(MANAGED_BY_LABEL) == MANAGED_BY or meta.annotations.get(APPROVAL_ANNOTATION) == APPROVED


def pending(reservation: Reservation) -> bool:
    return reservation.status.state in (None, PENDING) and not is_activated(reservation)


def live(run: Run) -> bool:
    return not run.finished and run.metadata.deletion_timestamp is None


def open_of(snapshot: Snapshot, run: Run, at: datetime) -> list[GPULease]:
    return [x for x in snapshot.leases_by_run.get(run.key, ()) if x.open_at(at)]


@dataclass(frozen=True)
class Held:
    active: dict[int, int]  # group -> Active GPUs held
    spare: dict[int, int]  # group -> Spare GPUs held

    @property
    def total_active(self) -> int:
        return sum(self.active.values())


def held(snapshot: Snapshot, run: Run, at: datetime) -> Held:
    active: dict[int, int] = {}
    spare: dict[int, int] = {}
    for lease in open_of(snapshot, run, at):
        into = active if lease.spec.slice.role == ACTIVE else spare
        into[lease.spec.group] = into.get(lease.spec.group, 0) + lease.gpus
    return Held(active, spare)


def shape(run: Run, width: int) -> list[int]:
    """Active GPUs of each group at ``width``: whole groups of ``groupGPUs`` (the last may be smaller), or one
    group of everything when the run has no groups."""
    locality = run.spec.locality
    g = locality.group_gpus if locality else None
    if not g:
        return [width]
    groups = -(-width // g)
    return [min(g, width - i * g) for i in range(groups)]


def full(run: Run, holding: Held) -> bool:
    """A fixed-width run that holds every group of its width and their spares: nothing to plan (a shortcut
    that spares ``plan_run`` on a steady fleet)."""
    if run.spec.malleable is not None:
        return False
    groups = shape(run, run.spec.resources.total_gpus)
    spares = run.spec.spares_per_group
    return all(holding.active.get(i, 0) >= size and holding.spare.get(i, 0) >= spares
               for i, size in enumerate(groups))


def start_width(run: Run) -> int:
    malleable = run.spec.malleable
    return malleable.min_total_gpus if malleable is not None else run.spec.resources.total_gpus


def below_start(run: Run, holding: Held) -> bool:
    """The run holds something, but not all of its start width and the spares of its start groups."""
    if not holding.active and not holding.spare:
        return False
    spares = run.spec.spares_per_group
    return any(holding.active.get(i, 0) < size or holding.spare.get(i, 0) < spares
               for i, size in enumerate(shape(run, start_width(run))))


def unfinished_width(run: Run, holding: Held) -> int | None:
    """The width whose groups the run has begun but not finished, if any: its start width when it holds part
    of it, else (grown in groups) the width up to its highest group, when one of those lacks GPUs or spares."""
    if below_start(run, holding):
        return start_width(run)
    locality = run.spec.locality
    g = locality.group_gpus if locality else None
    malleable = run.spec.malleable
    if not g or malleable is None or not holding.active:
        return None
    top = min((max(holding.active) + 1) * g, malleable.max_total_gpus)
    spares = run.spec.spares_per_group
    if any(holding.active.get(i, 0) < size or holding.spare.get(i, 0) < spares
           for i, size in enumerate(shape(run, top))):
        return top
    return None
