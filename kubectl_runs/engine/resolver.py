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

The candidate listers are local to this module (engine/remedies.py did not exist when this was written);
they follow the same §3 definitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ..model import Action, Activation, ConflictEntry, GPULease, Reservation, Snapshot
from .accounting import UNFUNDED, Ledger, ledger
from .lottery import (
    CLOSURE_REASON,
    DROP_SPARE,
    LOTTERY,
    PREEMPTING_KINDS,
    RECLAIM_UNFUNDED,
    SHRINK,
    class_rank,
    derive_seed,
    ticket,
    victims,
)

GroupKey = tuple[str, int]


@dataclass
class Group:
    """The open leases of one (run, group) in the reservation's scope."""

    run: str
    index: int
    owner: str
    active: list[GPULease] = field(default_factory=list)
    spare: list[GPULease] = field(default_factory=list)
    cls: str = UNFUNDED

    @property
    def key(self) -> GroupKey:
        return (self.run, self.index)

    @property
    def active_gpus(self) -> int:
        return sum(lease.gpus for lease in self.active)

    @property
    def gpus(self) -> int:
        return self.active_gpus + sum(lease.gpus for lease in self.spare)


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


def _node_of(slot: str) -> str:
    return slot.rpartition("#")[0] or slot


def in_scope(snapshot: Snapshot, reservation: Reservation, lease: GPULease) -> bool:
    """The lease is of the scope's flavor and, when the scope names a domain, sits on a node of it."""
    scope = reservation.spec.scope
    if lease.spec.flavor != scope.flavor:
        return False
    if scope.domain is None:
        return True
    nodes = snapshot.nodes_by_name
    for slot in lease.spec.slice.slots:
        node = nodes.get(_node_of(slot))
        if node is not None and node.domain == scope.domain:
            return True
    return False


def scope_deficit(snapshot: Snapshot, reservation: Reservation, at: datetime) -> int:
    """GPUs the reserving run lacks in the scope at ``at``: its start width plus spares, less what it holds,
    less the placeable free slots of schedulable nodes in scope (whole groups per domain when the run has
    ``groupGPUs``; only the best domain when it does not allow cross-group spread). A capacity deficit:
    what taking GPUs from others can cure."""
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
    used: set[str] = {slot for lease in snapshot.leases if lease.open_at(at) for slot in lease.spec.slice.slots}
    free_by_domain: dict[str, int] = {}
    for node in snapshot.nodes:
        if node.flavor != scope.flavor or not node.schedulable:
            continue
        if scope.domain is not None and node.domain != scope.domain:
            continue
        free = sum(1 for slot in node.slots if slot not in used)
        free_by_domain[node.domain or ""] = free_by_domain.get(node.domain or "", 0) + free
    if group_gpus:
        unit = group_gpus + spec.spares_per_group
        per_domain = [(free // unit) * unit for free in free_by_domain.values()]
    else:
        per_domain = list(free_by_domain.values())
    spread = spec.locality.allow_cross_group_spread if spec.locality else True
    placeable = sum(per_domain) if spread else max(per_domain, default=0)
    return max(0, need - placeable)


def scope_groups(snapshot: Snapshot, reservation: Reservation, at: datetime, book: Ledger) -> dict[GroupKey, Group]:
    """Every other run's open lease groups in scope at ``at``, classed by the ledger."""
    own = reservation.spec.run_ref.key
    groups: dict[GroupKey, Group] = {}
    for lease in sorted(snapshot.leases, key=lambda x: x.key):
        if lease.run_key == own or not lease.open_at(at) or not in_scope(snapshot, reservation, lease):
            continue
        key = (lease.run_key, lease.spec.group)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(run=key[0], index=key[1], owner=lease.spec.owner)
        (group.active if lease.spec.slice.role == "Active" else group.spare).append(lease)
    for group in groups.values():
        members = group.active or group.spare
        group.cls = min((_lease_class(book, lease) for lease in members), key=class_rank)
        if group.active:
            group.owner = group.active[0].spec.owner
    return groups


def _lease_class(book: Ledger, lease: GPULease) -> str:
    charge = book.charges.get(lease.key)
    return charge.worst_class if charge is not None else UNFUNDED


# --- the resolver -----------------------------------------------------------------------------------------------


def resolve(snapshot: Snapshot, reservation: Reservation, at: datetime, deficit_gpus: int | None = None) -> Resolution:
    """The ordered actions that free ``deficit_gpus`` (default: ``scope_deficit``) in the reservation's scope
    at ``at``, the conflict set the lottery drew from, and the seed. GPUs throughout; pure."""
    deficit = scope_deficit(snapshot, reservation, at) if deficit_gpus is None else deficit_gpus
    seed = derive_seed(reservation.key, at)
    book = ledger(snapshot, at)
    groups = scope_groups(snapshot, reservation, at, book)
    tickets = {key: ticket(seed, *key) for key in groups}
    actions: list[Action] = []
    taken: set[str] = set()  # lease keys closed so far
    remaining = deficit

    def close(kind: str, lease: GPULease) -> None:
        nonlocal remaining
        actions.append(Action(kind=kind, run=lease.run_key, group=lease.spec.group, lease=lease.key, gpus=lease.gpus))
        taken.add(lease.key)
        remaining -= lease.gpus

    # 1. ReclaimUnfunded: whole unfunded groups, by ticket.
    for group in sorted((g for g in groups.values() if g.cls == UNFUNDED and g.active), key=lambda g: tickets[g.key]):
        if remaining <= 0:
            break
        for lease in group.active + group.spare:
            close(RECLAIM_UNFUNDED, lease)

    # 2. DropSpare: spare leases, lowest class first, then by their group's ticket.
    spares = [
        (class_rank(_lease_class(book, lease)), tickets[g.key], lease.key, lease)
        for g in groups.values()
        for lease in g.spare
        if lease.key not in taken
    ]
    for *_, lease in sorted(spares, key=lambda s: s[:3]):
        if remaining <= 0:
            break
        close(DROP_SPARE, lease)

    # 3. Shrink: elastic runs by whole steps, never below their minimum.
    if remaining > 0:
        _shrink(snapshot, groups, book, at, taken, close, lambda: remaining)

    # 4. Lottery over the groups left.
    left = [g for g in groups.values() if g.active and not any(x.key in taken for x in g.active)]
    entries = [
        ConflictEntry(run=g.run, group=g.index, owner=g.owner, class_=g.cls, gpus=g.active_gpus, ticket=tickets[g.key])
        for g in left
    ]
    if remaining > 0:
        for entry in victims(seed, entries, remaining):
            for lease in groups[(entry.run, entry.group)].active:
                close(LOTTERY, lease)
    conflict_set = tuple(sorted(entries, key=lambda e: (class_rank(e.class_), e.ticket, e.run, e.group)))
    return Resolution(
        reservation=reservation.key, at=at, seed=seed, deficit_gpus=deficit, conflict_set=conflict_set,
        actions=tuple(actions),
    )


def _shrink(snapshot, groups, book, at, taken, close, remaining) -> None:
    """Shrink elastic runs (lowest class first, then by name): drop their in-scope groups from the highest
    index down, committing only at whole steps (the GPUs dropped so far are a multiple of ``stepGPUs``) and
    never below ``minTotalGPUs`` of Active GPUs held."""
    by_run: dict[str, list[Group]] = {}
    for group in groups.values():
        if group.active and not any(x.key in taken for x in group.active + group.spare):
            by_run.setdefault(group.run, []).append(group)
    order = []
    for run_key, run_groups in by_run.items():
        run = snapshot.runs_by_key.get(run_key)
        if run is None or run.spec.malleable is None:
            continue
        rank = min(class_rank(g.cls) for g in run_groups)
        order.append((rank, run_key, run, run_groups))
    for _, run_key, run, run_groups in sorted(order, key=lambda o: o[:2]):
        if remaining() <= 0:
            return
        malleable = run.spec.malleable
        held = sum(
            lease.gpus
            for lease in snapshot.leases_by_run.get(run_key, ())
            if lease.open_at(at) and lease.spec.slice.role == "Active" and lease.key not in taken
        )
        dropped = 0
        pending: list[Group] = []
        for group in sorted(run_groups, key=lambda g: g.index, reverse=True):
            if remaining() <= 0:
                break
            if held - dropped - group.active_gpus < malleable.min_total_gpus:
                break
            dropped += group.active_gpus
            pending.append(group)
            if dropped % malleable.step_gpus == 0:
                for whole in pending:
                    for lease in whole.active + whole.spare:
                        if lease.key not in taken:
                            close(SHRINK, lease)
                pending = []
