"""``seeds verify``: recompute a recorded draw from the Reservation's ``status.activation`` and the victim leases
and say exactly what differs (API.md §4); ``run_draws`` gives ``explain RUN`` the same facts for one run.
The formulas (seed, tickets, draw order, victims) are engine/lottery.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..model import Action, Activation, ConflictEntry, GPULease, Reservation, Snapshot
from ..timeutil import rfc3339
from .codes import CLASS_RANK
from .lottery import (
    ACTION_KINDS,
    CLOSURE_REASON,
    LOTTERY,
    PLACEMENT_RULE,
    PREEMPTING_KINDS,
    GroupKey,
    derive_seed,
    draw_order,
    is_activated,
    ticket,
    victims,
)
from .reports import ReservationCheck, VerifyReport

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

    @property
    def check(self) -> ReservationCheck:
        """Its entry in the ``seeds verify`` report."""
        return ReservationCheck(self.reservation, self.seed, self.verified, list(self.differences))


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
    _check_protected(activation, differences)
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


def verify_report(checks: Iterable[Verification]) -> VerifyReport:
    return VerifyReport([c.check for c in checks])


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


def _expected_victims(seed: str, activation: Activation, recorded: list[GroupKey]) -> list[GroupKey]:
    """The groups the draw takes. Placement rule (round 3): the victims are the shortest prefix of the draw
    order after which the Run started — the record says how long (its Lottery actions), and the draw says
    which groups a prefix of that length holds. Older records: groups until their GPUs cover the deficit
    left after the gentle remedies."""
    if activation.rule == PLACEMENT_RULE:
        order = [(e.run, e.group) for e in draw_order(seed, activation.conflict_set)]
        places = [order.index(g) for g in recorded if g in order]
        passed = {(p.run, p.group) for p in activation.passed_over}
        last = max(places, default=-1)
        return [g for g in order[: last + 1] if g not in passed]
    before = sum(a.gpus for a in activation.actions if a.kind != LOTTERY)
    return [(e.run, e.group) for e in victims(seed, activation.conflict_set, activation.deficit_gpus - before)]


def _check_protected(activation: Activation, differences: list[str]) -> None:
    shielded = {p.run: p for p in activation.protected}
    for entry in activation.conflict_set:
        if entry.run in shielded:
            differences.append(
                f"{entry.run} group {entry.group} is in the conflict set, but the record protects {entry.run} "
                f"({shielded[entry.run].reason})"
            )
    order = {(e.run, e.group): i for i, e in enumerate(draw_order(activation.seed, activation.conflict_set))}
    victims_at = [order[(a.run, a.group)] for a in activation.actions if a.kind == LOTTERY and (a.run, a.group) in order]
    for p in activation.passed_over:
        where = order.get((p.run, p.group))
        if where is None:
            differences.append(f"passed-over {p.run} group {p.group} is not in the conflict set")
        elif not victims_at or where > max(victims_at):
            differences.append(f"passed-over {p.run} group {p.group} comes after the last victim in the draw")
    known = ("AdmittedByActivation", "RecentVictim", "FinishingSoon")
    for p in activation.protected:
        if p.reason not in known:
            differences.append(f"protected {p.run} has reason {p.reason!r} (not {', '.join(known)})")
        decided = activation.decided_at or activation.at
        if p.until is None or (decided is not None and p.until <= decided):
            differences.append(f"protected {p.run}'s window ends before the decision ({p.reason})")
        if p.reason == "AdmittedByActivation" and any(a.run == p.run for a in activation.actions):
            differences.append(f"an action takes from {p.run}, which the record protects from every remedy")
    if activation.decided_at is not None and activation.at is not None and activation.decided_at < activation.at:
        differences.append("decidedAt comes before at: a decision cannot come before its Reservation was due")
    if activation.protected and activation.rule != PLACEMENT_RULE:
        differences.append(f"protected runs are recorded under rule {activation.rule or '(none)'!r}, not "
                           f"{PLACEMENT_RULE!r}")


def _check_victims(seed: str, activation: Activation, differences: list[str]) -> list[GroupKey]:
    recorded = _lottery_groups(activation.actions)
    expected = _expected_victims(seed, activation, recorded)
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
