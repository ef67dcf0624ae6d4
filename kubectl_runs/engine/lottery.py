"""Preemption seeds: reproducible lotteries that anyone can check (API.md §4).

When a Reservation activates with a deficit that the gentler remedies did not cover, the GPUs are taken from
the *conflict set* (the open Active lease groups left in its scope) by a lottery whose every input is written
down: the seed is derived from the Reservation's name and activation time, each group's ticket from the seed
and the group's name, and victims are taken by class rank first (unfunded, borrowed, shared, owned) and
ticket second, a whole group at a time. Only SHA-256 is involved — no language's random generator — so a
shell with ``sha256sum`` can replay a draw.

``verify`` recomputes a recorded draw from the Reservation's ``status.activation`` and the victim leases and
says exactly what differs; ``run_draws`` gives ``explain RUN`` the same facts for one run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..model import Action, Activation, ConflictEntry, GPULease, Reservation, Snapshot
from ..timeutil import rfc3339
from .accounting import CLASS_RANK

# Action kinds, in the order the resolver applies them (API.md §3 Remedies, §4).
RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, LOTTERY = "ReclaimUnfunded", "DropSpare", "Shrink", "Lottery"
ACTION_KINDS = (RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, LOTTERY)

# The closureReason each action writes on the leases it closes; ReclaimUnfunded and the lottery also write
# status.preemption {reservation, seed}.
CLOSURE_REASON = {RECLAIM_UNFUNDED: "ReclaimUnfunded", DROP_SPARE: "DropSpare", SHRINK: "Shrink", LOTTERY: "RandomPreempt"}
PREEMPTING_KINDS = (RECLAIM_UNFUNDED, LOTTERY)

_UNKNOWN_CLASS_RANK = len(CLASS_RANK)  # an unknown class sorts last (and verify reports it)

GroupKey = tuple[str, int]  # (run "namespace/name", group index)


# --- the formulas ---------------------------------------------------------------------------------------------


def derive_seed(reservation: str, at: datetime) -> str:
    """``"0x" + sha256(f"{ns}/{name}|{at}")[:16]``, ``at`` in RFC 3339 UTC seconds precision."""
    text = f"{reservation}|{rfc3339(at)}"
    return "0x" + hashlib.sha256(text.encode()).hexdigest()[:16]


def ticket(seed: str, run: str, group: int) -> str:
    """``sha256(f"{seed}|{run_ns}/{run_name}|{group}")`` as 64 hex digits; ``run`` is ``namespace/name``."""
    return hashlib.sha256(f"{seed}|{run}|{group}".encode()).hexdigest()


def class_rank(cls: str) -> int:
    """unfunded 0, borrowed 1, shared 2, owned 3 (the lower, the sooner taken)."""
    return CLASS_RANK.get(cls, _UNKNOWN_CLASS_RANK)


def with_tickets(seed: str, entries: Iterable[ConflictEntry]) -> list[ConflictEntry]:
    """The entries with the tickets ``seed`` gives them (any recorded ticket is ignored)."""
    return [
        ConflictEntry(run=e.run, group=e.group, owner=e.owner, class_=e.class_, gpus=e.gpus,
                      ticket=ticket(seed, e.run, e.group))
        for e in entries
    ]


def draw_order(seed: str, entries: Iterable[ConflictEntry]) -> list[ConflictEntry]:
    """The whole conflict set in the order the lottery takes it: class rank, then ticket (run and group only
    break a tie, which needs a SHA-256 collision). Tickets are recomputed from ``seed``."""
    return sorted(with_tickets(seed, entries), key=lambda e: (class_rank(e.class_), e.ticket, e.run, e.group))


def victims(seed: str, entries: Iterable[ConflictEntry], deficit_gpus: int) -> list[ConflictEntry]:
    """The groups the lottery takes, in order, until their GPUs cover ``deficit_gpus`` (or the set runs out).

    A pure function of (seed, conflict set, deficit): the order the entries come in does not matter.
    """
    taken: list[ConflictEntry] = []
    freed = 0
    for entry in draw_order(seed, entries):
        if freed >= deficit_gpus:
            break
        taken.append(entry)
        freed += entry.gpus
    return taken


# --- JSON shapes (API.md §4) ------------------------------------------------------------------------------------


def entry_json(entry: ConflictEntry) -> dict:
    return {
        "run": entry.run,
        "group": entry.group,
        "owner": entry.owner,
        "class": entry.class_,
        "gpus": entry.gpus,
        "ticket": entry.ticket,
    }


def action_json(action: Action) -> dict:
    return {"kind": action.kind, "run": action.run, "group": action.group, "lease": action.lease, "gpus": action.gpus}


def activation_json(activation: Activation) -> dict:
    """``status.activation`` as the Reservation records it."""
    return {
        "at": rfc3339(activation.at),
        "seed": activation.seed,
        "deficitGPUs": activation.deficit_gpus,
        "conflictSet": [entry_json(e) for e in activation.conflict_set],
        "actions": [action_json(a) for a in activation.actions],
        "freedGPUs": activation.freed_gpus,
    }


# --- verification ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """One recorded draw, recomputed. ``differences`` is empty when the record holds."""

    reservation: str  # namespace/name
    run: str
    at: datetime | None
    seed: str
    deficit_gpus: int
    freed_gpus: int
    drawn: tuple[ConflictEntry, ...]  # the recorded conflict set in draw order, tickets recomputed
    victims: tuple[GroupKey, ...]  # what the draw takes
    differences: tuple[str, ...]

    @property
    def verified(self) -> bool:
        return not self.differences

    def place(self, run: str, group: int) -> int | None:
        """1-based place of a group in the draw order; None when it is not in the conflict set."""
        for index, entry in enumerate(self.drawn, start=1):
            if (entry.run, entry.group) == (run, group):
                return index
        return None

    def to_json(self) -> dict:
        return {
            "name": self.reservation,
            "seed": self.seed,
            "verified": self.verified,
            "differences": list(self.differences),
        }


def is_activated(reservation: Reservation) -> bool:
    """It has a recorded activation (state Activated, or Released/Failed later with the record kept)."""
    activation = reservation.status.activation
    return reservation.status.state == "Activated" or (
        activation is not None and (activation.at is not None or bool(activation.seed))
    )


def verify(reservation: Reservation, leases: Mapping[str, GPULease]) -> Verification:
    """Recompute the tickets and the victims from the recorded seed and conflict set, and compare them with the
    recorded actions and the victim leases' ``closureReason`` / ``preemption`` (API.md §4).

    ``leases`` maps ``namespace/name`` to every lease that can be read (victims may be in any namespace).
    """
    key = reservation.key
    run = reservation.spec.run_ref.key
    activation = reservation.status.activation
    if activation is None:
        return Verification(key, run, None, "", 0, 0, (), (), ("no activation is recorded (status.activation)",))
    seed = activation.seed
    differences: list[str] = []
    _check_seed(key, activation, differences)
    _check_conflict_set(seed, activation.conflict_set, differences)
    drawn = tuple(draw_order(seed, activation.conflict_set))
    drawn_victims = _check_victims(seed, activation, differences)
    _check_actions(activation, differences)
    for number, action in enumerate(activation.actions, start=1):
        _check_lease(key, seed, number, action, leases.get(action.lease), differences)
    return Verification(
        reservation=key,
        run=run,
        at=activation.at,
        seed=seed,
        deficit_gpus=activation.deficit_gpus,
        freed_gpus=activation.freed_gpus,
        drawn=drawn,
        victims=tuple(drawn_victims),
        differences=tuple(differences),
    )


def verify_all(snapshot: Snapshot, namespace: str | None = None) -> list[Verification]:
    """Every activated Reservation (in ``namespace``, or all), by namespace/name."""
    reservations = sorted(
        (r for r in snapshot.reservations if is_activated(r) and namespace in (None, r.metadata.namespace)),
        key=lambda r: r.key,
    )
    return [verify(r, snapshot.leases_by_key) for r in reservations]


def _check_seed(key: str, activation: Activation, differences: list[str]) -> None:
    seed = activation.seed
    if not seed:
        differences.append("no seed is recorded (status.activation.seed)")
    if activation.at is None:
        differences.append("no activation time is recorded (status.activation.at): the seed cannot be derived")
        return
    expected = derive_seed(key, activation.at)
    if seed and seed != expected:
        differences.append(
            f"seed mismatch: recorded {seed}, but {key} activated at {rfc3339(activation.at)} derives {expected}"
        )


def _check_conflict_set(seed: str, entries: Sequence[ConflictEntry], differences: list[str]) -> None:
    seen: set[GroupKey] = set()
    for entry in entries:
        name = f"{entry.run} group {entry.group}"
        if (entry.run, entry.group) in seen:
            differences.append(f"{name} appears twice in the conflict set")
        seen.add((entry.run, entry.group))
        if entry.class_ not in CLASS_RANK:
            differences.append(
                f"{name} has class {entry.class_!r} in the conflict set (not unfunded, borrowed, shared or owned)"
            )
        computed = ticket(seed, entry.run, entry.group)
        if entry.ticket != computed:
            shown, want = _abbreviate(entry.ticket, computed)
            differences.append(f"ticket mismatch for {name}: recorded {shown or '(none)'}, computed {want}")


def _lottery_groups(actions: Sequence[Action]) -> list[GroupKey]:
    """The groups the recorded Lottery actions take, in first-taken order (one action per lease)."""
    groups: list[GroupKey] = []
    for action in actions:
        if action.kind == LOTTERY:
            group = (action.run, action.group if action.group is not None else -1)
            if group not in groups:
                groups.append(group)
    return groups


def _check_victims(seed: str, activation: Activation, differences: list[str]) -> list[GroupKey]:
    before = sum(a.gpus for a in activation.actions if a.kind != LOTTERY)
    remaining = activation.deficit_gpus - before
    drawn = victims(seed, activation.conflict_set, remaining)
    expected = [(e.run, e.group) for e in drawn]
    recorded = _lottery_groups(activation.actions)
    in_set = {(e.run, e.group): e for e in activation.conflict_set}
    places = {(e.run, e.group): i for i, e in enumerate(draw_order(seed, activation.conflict_set), start=1)}
    for run, group in expected:
        if (run, group) not in recorded:
            differences.append(
                f"wrong victim: the draw takes {run} group {group} (place {places[(run, group)]} of "
                f"{len(places)}), the recorded actions do not"
            )
    for run, group in recorded:
        if (run, group) not in expected:
            where = (
                f"place {places[(run, group)]} of {len(places)}, not drawn"
                if (run, group) in places
                else "it is not in the conflict set"
            )
            differences.append(f"wrong victim: the recorded actions take {run} group {group} ({where})")
    if set(expected) == set(recorded) and expected != recorded:
        differences.append(
            "wrong order: the recorded actions take "
            + ", ".join(_group_name(g) for g in recorded)
            + "; the draw takes "
            + ", ".join(_group_name(g) for g in expected)
        )
    for group in recorded:
        entry = in_set.get(group)
        if entry is None:
            continue
        gpus = sum(a.gpus for a in activation.actions if a.kind == LOTTERY and (a.run, a.group) == group)
        if gpus != entry.gpus:
            differences.append(
                f"the Lottery actions on {_group_name(group)} free {gpus} GPUs; the conflict set records {entry.gpus}"
            )
    return expected


def _check_actions(activation: Activation, differences: list[str]) -> None:
    rank = {kind: i for i, kind in enumerate(ACTION_KINDS)}
    highest = -1
    for number, action in enumerate(activation.actions, start=1):
        if action.kind not in rank:
            differences.append(f"action {number} has kind {action.kind!r} (not {', '.join(ACTION_KINDS)})")
            continue
        if rank[action.kind] < highest:
            differences.append(
                f"wrong order: action {number} ({action.kind} {action.lease}) comes after "
                f"{ACTION_KINDS[highest]} (remedies are applied in the order {', '.join(ACTION_KINDS)})"
            )
        highest = max(highest, rank[action.kind])
    total = sum(a.gpus for a in activation.actions)
    if total != activation.freed_gpus:
        differences.append(f"freedGPUs is {activation.freed_gpus}, but the recorded actions free {total}")


def _check_lease(
    reservation: str, seed: str, number: int, action: Action, lease: GPULease | None, differences: list[str]
) -> None:
    if action.kind not in CLOSURE_REASON:
        return
    name = action.lease or f"(action {number} names no lease)"
    if lease is None:
        differences.append(f"victim lease {name} (action {number}, {action.kind}) is not in the snapshot")
        return
    if (lease.run_key, lease.spec.group) != (action.run, action.group):
        differences.append(
            f"victim lease {name} belongs to {lease.run_key} group {lease.spec.group}, but action {number} "
            f"says {action.run} group {action.group}"
        )
    if lease.gpus != action.gpus:
        differences.append(f"victim lease {name} holds {lease.gpus} GPUs, but action {number} says {action.gpus}")
    want = CLOSURE_REASON[action.kind]
    status = lease.status
    if not status.closed:
        differences.append(f"victim lease {name} is not closed (expected closureReason {want})")
    elif status.closure_reason != want:
        differences.append(f"victim lease {name} closureReason is {status.closure_reason or '(none)'}, expected {want}")
    if action.kind not in PREEMPTING_KINDS:
        return
    preemption = status.preemption
    if preemption is None or not preemption.seed:
        differences.append(f"victim lease {name} does not name the seed (status.preemption.seed is missing)")
    elif preemption.seed != seed:
        differences.append(f"victim lease {name} names seed {preemption.seed}, the reservation records {seed}")
    if preemption is not None and preemption.reservation and preemption.reservation != reservation:
        differences.append(f"victim lease {name} names reservation {preemption.reservation}, not {reservation}")


def _group_name(group: GroupKey) -> str:
    return f"{group[0]} group {group[1]}"


def _abbreviate(recorded: str, computed: str) -> tuple[str, str]:
    """Enough leading hex digits of both tickets to see where they differ (at least 16)."""
    if not recorded:
        return recorded, computed
    differ_at = next((i for i, (a, b) in enumerate(zip(recorded, computed, strict=False)) if a != b), None)
    if differ_at is None:
        differ_at = min(len(recorded), len(computed))
    width = max(16, differ_at + 4)
    cut = lambda t: t if len(t) <= width else t[:width] + "…"  # noqa: E731
    return cut(recorded), cut(computed)


# --- for `explain RUN` -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupDraw:
    """One of a run's groups in a reservation's draw."""

    group: int
    ticket: str
    place: int  # 1-based place in the draw order
    taken: bool  # the lottery took it

    def to_json(self) -> dict:
        return {"group": self.group, "ticket": self.ticket, "place": self.place, "taken": self.taken}


@dataclass(frozen=True)
class RunDraw:
    """What one activated reservation did to one run: its groups' tickets and places, and the verdict."""

    reservation: str
    seed: str
    at: datetime | None
    conflict_set_size: int
    tickets: tuple[GroupDraw, ...]
    actions: tuple[Action, ...]  # the actions on this run (any kind)
    verified: bool
    differences: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return sum(a.gpus for a in self.actions)

    def to_json(self) -> dict:
        return {
            "reservation": self.reservation,
            "seed": self.seed,
            "at": rfc3339(self.at),
            "gpus": self.gpus,
            "tickets": [t.to_json() for t in self.tickets],
            "conflictSetSize": self.conflict_set_size,
            "actions": [action_json(a) for a in self.actions],
            "verified": self.verified,
            "differences": list(self.differences),
        }


def run_draws(snapshot: Snapshot, run: str) -> list[RunDraw]:
    """For every activated reservation whose conflict set or actions name ``run`` (``namespace/name``): the
    run's tickets, its place in the draw, the actions taken on it, and whether ``seeds verify`` holds.
    Ordered by activation time, then reservation."""
    draws: list[RunDraw] = []
    for reservation in snapshot.reservations:
        activation = reservation.status.activation
        if activation is None or not is_activated(reservation):
            continue
        on_run = tuple(a for a in activation.actions if a.run == run)
        if not on_run and not any(e.run == run for e in activation.conflict_set):
            continue
        check = verify(reservation, snapshot.leases_by_key)
        taken = set(check.victims)
        tickets = tuple(
            GroupDraw(group=e.group, ticket=e.ticket, place=index, taken=(e.run, e.group) in taken)
            for index, e in enumerate(check.drawn, start=1)
            if e.run == run
        )
        draws.append(
            RunDraw(
                reservation=reservation.key,
                seed=activation.seed,
                at=activation.at,
                conflict_set_size=len(check.drawn),
                tickets=tickets,
                actions=on_run,
                verified=check.verified,
                differences=check.differences,
            )
        )
    return sorted(draws, key=lambda d: (d.at is None, d.at or datetime.min, d.reservation))
