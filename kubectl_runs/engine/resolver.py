"""The resolver: which GPUs a Reservation takes when it activates with a deficit (API.md §3 Remedies, §4).

``resolve(snapshot, reservation, at)`` is a pure function of its arguments. It frees the deficit in the
reservation's scope (flavor, and fabric domain when one is set) by applying, in order and only as far as
needed:

1. ``ReclaimUnfunded`` — unfunded lease groups, whole groups (their spare leases go with them), by ticket;
2. ``DropSpare`` — spare leases, lowest class first, then by their group's ticket;
3. ``Shrink`` — elastic runs, by whole groups that add up to whole steps, highest group index first, never
   below ``malleable.minTotalGPUs``;
4. ``Lottery`` — over the conflict set (every open Active lease group in scope that is left), by class rank
   then ticket, a whole group at a time (engine/lottery.py).

A group is ``(run, group index)``; its class is the worst class the ledger gives any of its Active leases at
``at``. The reserving run's own leases are never taken. The result carries everything the Reservation
records (``status.activation``) and what each closed lease records (``closureReason``, ``preemption``).

The candidates (groups, classes, spares, whole-step shrinks, the conflict set) come from engine/remedies.py,
the listers ``plan`` also shows as remedies; this module decides how far down each list to go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..model import Action, Activation, ConflictEntry, GPULease, Reservation, Snapshot
from .accounting import ledger
from .lottery import (
    CLOSURE_REASON,
    DROP_SPARE,
    LOTTERY,
    PREEMPTING_KINDS,
    RECLAIM_UNFUNDED,
    SHRINK,
    derive_seed,
    draw_order,
    ticket,
    victims,
)
from .packing import capacity, group_unit, open_leases
from .remedies import (
    conflict_groups,
    droppable_spares,
    reclaimable_groups,
    scope_groups,
    scope_nodes,
    shrinkable_runs,
)

GroupKey = tuple[str, int]


@dataclass(frozen=True)
class LeaseClosure:
    """What a lease closed by the resolver records in its status."""

    lease: str  # namespace/name
    closure_reason: str
    reservation: str | None  # status.preemption, set for ReclaimUnfunded and RandomPreempt
    seed: str | None

    def status_patch(self, ended: str) -> dict:
        status: dict = {"closed": True, "ended": ended, "closureReason": self.closure_reason}
        if self.seed is not None:
            status["preemption"] = {"reservation": self.reservation, "seed": self.seed}
        return {"status": status}


@dataclass(frozen=True)
class Resolution:
    """The decision for one activation: what the Reservation records in ``status.activation``."""

    reservation: str  # namespace/name
    at: datetime
    seed: str
    deficit_gpus: int
    conflict_set: tuple[ConflictEntry, ...]  # in draw order
    actions: tuple[Action, ...]

    @property
    def freed_gpus(self) -> int:
        return sum(a.gpus for a in self.actions)

    @property
    def covered(self) -> bool:
        return self.freed_gpus >= self.deficit_gpus

    def activation(self) -> Activation:
        return Activation(
            at=self.at,
            seed=self.seed,
            deficit_gpus=self.deficit_gpus,
            conflict_set=self.conflict_set,
            actions=self.actions,
            freed_gpus=self.freed_gpus,
        )

    def closures(self) -> list[LeaseClosure]:
        preempts = lambda kind: kind in PREEMPTING_KINDS  # noqa: E731
        return [
            LeaseClosure(
                lease=a.lease,
                closure_reason=CLOSURE_REASON[a.kind],
                reservation=self.reservation if preempts(a.kind) else None,
                seed=self.seed if preempts(a.kind) else None,
            )
            for a in self.actions
        ]


# --- scope and deficit ------------------------------------------------------------------------------------------


def in_scope(snapshot: Snapshot, reservation: Reservation, lease: GPULease) -> bool:
    """The lease is of the scope's flavor and, when the scope names a domain, sits on a node of it."""
    return scope_nodes(snapshot, reservation.spec.scope).in_scope(lease)


def scope_deficit(snapshot: Snapshot, reservation: Reservation, at: datetime) -> int:
    """GPUs the reserving run lacks in the scope at ``at``: its start width plus spares, less what it holds,
    less what ``packing.capacity`` can place in scope (the same placement ``plan`` uses). A capacity deficit:
    what taking GPUs from others can cure. (Not ``plan``'s deficit: a replay looks at a run that has since
    finished, and ``plan`` has nothing to plan for a finished run.)"""
    run = snapshot.runs_by_key.get(reservation.spec.run_ref.key)
    if run is None:
        return 0
    spec = run.spec
    width = spec.malleable.min_total_gpus if spec.malleable else spec.resources.total_gpus
    group_gpus = spec.locality.group_gpus if spec.locality else None
    groups = -(-width // group_gpus) if group_gpus else 1
    need = width + spec.spares_per_group * groups
    held = sum(lease.gpus for lease in snapshot.leases_by_run.get(run.key, ()) if lease.open_at(at))
    need -= held
    if need <= 0:
        return 0
    scope = reservation.spec.scope
    spread = spec.locality.allow_cross_group_spread if spec.locality else True
    room = capacity(snapshot, open_leases(snapshot, at), scope.flavor, domain=scope.domain,
                    unit=group_unit(group_gpus, spec.spares_per_group), spread=spread)
    return max(0, need - room.placeable)


# --- the resolver -----------------------------------------------------------------------------------------------


def resolve(snapshot: Snapshot, reservation: Reservation, at: datetime, deficit_gpus: int | None = None) -> Resolution:
    """The ordered actions that free ``deficit_gpus`` (default: ``scope_deficit``) in the reservation's scope
    at ``at``, the conflict set the lottery drew from, and the seed. GPUs throughout; pure.

    The candidates come from engine/remedies.py (the same listers ``plan`` shows as remedies); the resolver
    takes them in order only as far as the deficit needs."""
    deficit = scope_deficit(snapshot, reservation, at) if deficit_gpus is None else deficit_gpus
    seed = derive_seed(reservation.key, at)
    book = ledger(snapshot, at)
    scope = reservation.spec.scope
    groups = scope_groups(snapshot, book, scope, exclude_run=reservation.spec.run_ref.key)
    actions: list[Action] = []
    taken: set[str] = set()  # lease keys closed so far
    remaining = deficit

    def close(kind: str, leases: Iterable[GPULease]) -> None:
        nonlocal remaining
        for lease in leases:
            if lease.key in taken:
                continue
            actions.append(
                Action(kind=kind, run=lease.run_key, group=lease.spec.group, lease=lease.key, gpus=lease.gpus)
            )
            taken.add(lease.key)
            remaining -= lease.gpus

    # 1. ReclaimUnfunded: whole unfunded groups (spares included), by ticket.
    reclaimed: set[GroupKey] = set()
    for group in reclaimable_groups(snapshot, book, scope, seed=seed, groups=groups):
        if remaining <= 0:
            break
        close(RECLAIM_UNFUNDED, group.leases)
        reclaimed.add(group.key)

    # 2. DropSpare: spare leases, lowest class first, then by their group's ticket.
    if remaining > 0:
        for drop in droppable_spares(snapshot, book, scope, seed=seed, groups=groups, skip=reclaimed):
            if remaining <= 0:
                break
            close(DROP_SPARE, (drop.lease,))

    # 3. Shrink: elastic runs by whole steps, never below their minimum; only as many steps as needed.
    if remaining > 0:
        for step in shrinkable_runs(snapshot, book, scope, groups=groups, taken=taken):
            for commit in step.commits:
                if remaining <= 0:
                    break
                close(SHRINK, (lease for group in commit for lease in group.leases))

    # 4. Lottery over the groups left: class rank, then ticket, whole groups.
    entries = [
        ConflictEntry(run=g.run, group=g.group, owner=g.owner, class_=g.cls, gpus=g.active_gpus,
                      ticket=ticket(seed, g.run, g.group))
        for g in conflict_groups(groups, taken=taken)
    ]
    if remaining > 0:
        for entry in victims(seed, entries, remaining):
            close(LOTTERY, groups[(entry.run, entry.group)].active)
    return Resolution(
        reservation=reservation.key,
        at=at,
        seed=seed,
        deficit_gpus=deficit,
        conflict_set=tuple(draw_order(seed, entries)),
        actions=tuple(actions),
    )

