"""The resolver: what a Reservation takes when it activates (API.md §3 Remedies, §4 and its round-3 revision;
docs/reconciler.md "Preemption that starts the Run").

``resolve(snapshot, reservation, at)`` is a pure function of its arguments. The candidates, in the order they
are taken:

1. ``ReclaimUnfunded`` — unfunded lease groups, whole groups (their spare leases go with them), by ticket;
2. ``DropSpare`` — spare leases, lowest class first, then by their group's ticket;
3. ``Shrink`` — elastic runs, by whole groups that add up to whole steps, highest group index first, never
   below ``malleable.minTotalGPUs``;
4. ``Lottery`` — the conflict set (every open Active lease group in scope that is left, less the protected
   Runs: engine/protection.py) in draw order: class rank, then ticket, a whole group at a time
   (engine/lottery.py).

Only candidates that free slots the reserving Run can use are listed (schedulable nodes of the scope's flavor,
in its domain when it names one): a lease on a cordoned node frees nothing it could start on. The decision is
the **shortest prefix** of that list after which the Run starts by admission's own gate (``plan.startable``:
its groups place by the same packing, and its funding covers them); then every step of the prefix but the last
whose leases the Run does not need (it still starts without them) is given back, from the end down, when it is
a lottery group — recorded as ``passedOver``, so nobody loses a lottery for GPUs that were not used. If even the whole list would not start it,
nothing is taken and ``failure`` says which: ``NotEnoughToFree`` (too few GPUs would be free for it),
``NotPlaceable`` (enough GPUs, but not in whole groups in the domains it may use) or ``NotFunded``.

A group is ``(run, group index)``; its class is the worst class the ledger gives any of its Active leases at
``at``. The reserving run's own leases are never taken. The result carries everything the Reservation
records (``status.activation``, with ``rule: placement`` and the ``protected`` runs) and what each closed lease
records (``closureReason``, ``preemption``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ..model import (
    Action,
    Activation,
    ConflictEntry,
    DrawRef,
    GPULease,
    ProtectedEntry,
    Reservation,
    Snapshot,
)
from .accounting import ledger
from .lottery import (
    CLOSURE_REASON,
    DROP_SPARE,
    LOTTERY,
    PLACEMENT_RULE,
    PREEMPTING_KINDS,
    RECLAIM_UNFUNDED,
    SHRINK,
    derive_seed,
    draw_order,
    ticket,
)
from .packing import capacity, group_unit, open_leases
from .plan import Startability, startable
from .protection import ADMITTED_BY_ACTIVATION
from .remedies import remedy_candidates, scope_nodes

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
    protected: tuple[ProtectedEntry, ...] = ()  # runs left out of the conflict set, and why
    passed_over: tuple[DrawRef, ...] = ()  # drawn before the last victim, given back: not needed to start the Run
    failure: str | None = None  # NotEnoughToFree | NotPlaceable | NotFunded: nothing is taken
    detail: str = ""  # the failure in one line

    @property
    def freed_gpus(self) -> int:
        return sum(a.gpus for a in self.actions)

    @property
    def placed(self) -> bool:
        """The run starts once the actions are taken (then, and only then, they are taken)."""
        return self.failure is None

    def activation(self, decided_at: datetime | None = None) -> Activation:
        return Activation(
            at=self.at,
            seed=self.seed,
            deficit_gpus=self.deficit_gpus,
            conflict_set=self.conflict_set,
            actions=self.actions,
            freed_gpus=self.freed_gpus,
            rule=PLACEMENT_RULE,
            protected=self.protected,
            passed_over=self.passed_over,
            decided_at=decided_at,
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

NOT_ENOUGH_TO_FREE, NOT_PLACEABLE, NOT_FUNDED = "NotEnoughToFree", "NotPlaceable", "NotFunded"

Step = tuple[str, tuple[GPULease, ...]]  # (action kind, the leases it closes)


def resolve(
    snapshot: Snapshot,
    reservation: Reservation,
    at: datetime,
    *,
    protected: Mapping[str, ProtectedEntry] | None = None,
    admits: Callable[[Snapshot], bool] | None = None,
) -> Resolution:
    """The decision for ``reservation`` at ``at``: the shortest prefix of the remedies, in the order of API.md §3
    (ReclaimUnfunded, DropSpare, Shrink, then the lottery's draw order), after which the reserving Run starts
    by admission's own gate (``plan.startable``: its groups place by the same packing, and its funding covers
    them); or, when even every candidate would not do it, nothing at all (``failure`` says why). Only
    candidates that free slots the Run can use count (schedulable nodes of the scope); Runs in ``protected``
    (engine/protection.py) are left out of the conflict set. ``admits``: the caller's admission itself, asked
last about a snapshot without the candidate leases (the reconciler's concrete placement, which also keeps a
group's spare next to the slots the group already holds); by default the counting gate alone. GPUs
throughout; pure."""
    protected = protected or {}
    deficit = scope_deficit(snapshot, reservation, at)
    seed = derive_seed(reservation.key, at)
    run = snapshot.runs_by_key.get(reservation.spec.run_ref.key)
    book = ledger(snapshot, at)
    scope = reservation.spec.scope
    gentle = remedy_candidates(snapshot, book, scope, exclude_run=reservation.spec.run_ref.key, seed=seed)
    # a Run an activation started is out of every remedy for its minimum run time; the other windows keep a Run
    # out of the lottery only (engine/protection.py)
    untouchable = {run for run, p in protected.items() if p.reason == ADMITTED_BY_ACTIVATION}
    spared: set[str] = set()

    def usable(run_key: str, freed) -> bool:
        if not freed:
            return False
        if run_key in untouchable:
            spared.add(run_key)
            return False
        return True

    steps: list[Step] = [(RECLAIM_UNFUNDED, g.leases) for g in gentle.reclaim if usable(g.run, g.freed)]
    steps += [(DROP_SPARE, (d.lease,)) for d in gentle.spares if usable(d.run, d.freed)]
    for shrink in gentle.shrinks:
        for commit in shrink.commits:  # highest groups first; stop where a step frees nothing usable
            if not usable(shrink.run, tuple(f for g in commit for f in g.freed)):
                break
            steps.append((SHRINK, tuple(lease for g in commit for lease in g.leases)))
    nodes = scope_nodes(snapshot, scope)
    kept = []
    for g in gentle.conflict:
        if not nodes.freed(g.active):  # the lottery closes the Active leases: theirs must be usable slots
            continue
        if g.run in protected:
            spared.add(g.run)
        else:
            kept.append(g)
    shielded = tuple(protected[run] for run in sorted(spared))
    entries = [
        ConflictEntry(run=g.run, group=g.group, owner=g.owner, class_=g.cls, gpus=g.active_gpus,
                      ticket=ticket(seed, g.run, g.group))
        for g in kept
    ]
    drawn = draw_order(seed, entries)
    by_key = {g.key: g for g in kept}
    steps += [(LOTTERY, by_key[(e.run, e.group)].active) for e in drawn]
    decision = dict(reservation=reservation.key, at=at, seed=seed, deficit_gpus=deficit,
                    conflict_set=tuple(drawn), protected=shielded)
    if run is None:
        return Resolution(**decision, actions=(), failure=NOT_ENOUGH_TO_FREE, detail="the run is gone")

    def after_steps(indices) -> Startability:
        gone = {lease.key for i in indices for lease in steps[i][1]}
        kept_leases = tuple(lease for lease in snapshot.leases if lease.key not in gone)
        return startable(dataclasses.replace(snapshot, leases=kept_leases), run, at)

    def after(k: int) -> Startability:
        return after_steps(range(k))

    def fits(indices) -> bool:
        if not after_steps(indices).starts:
            return False
        if admits is None:
            return True
        gone = {lease.key for i in indices for lease in steps[i][1]}
        return admits(dataclasses.replace(snapshot, leases=tuple(x for x in snapshot.leases if x.key not in gone)))

    everything = after(len(steps))
    if not everything.starts:
        return Resolution(**decision, actions=(), failure=_why(everything), detail=_failure_detail(everything))
    if not fits(range(len(steps))):
        return Resolution(**decision, actions=(), failure=NOT_PLACEABLE,
                          detail="with every candidate taken its groups would still not place where they must "
                                 "(a group's spares next to the slots it holds)")
    lo, hi = 0, len(steps)  # fits(hi); find the least such prefix (starting is monotone in the prefix)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(range(mid)):
            hi = mid
        else:
            lo = mid + 1
    # Then give back what the prefix took and the Run does not need (a group drawn early whose slots it would not
    # use): from the last step but one down, a step goes back when the Run still starts without it. The last step
    # is needed (the prefix is the shortest), and a lottery group given back is recorded as passed over.
    chosen = list(range(lo))
    for index in range(lo - 2, -1, -1):
        if steps[index][0] != LOTTERY:  # only a lottery's groups are given back (each check costs a pass)
            continue
        trial = [i for i in chosen if i != index]
        if fits(trial):
            chosen = trial
    kept_steps = [steps[i] for i in chosen]
    passed = tuple(DrawRef(run=leases[0].run_key, group=leases[0].spec.group)
                   for i, (kind, leases) in enumerate(steps[:lo]) if kind == LOTTERY and i not in chosen)
    actions = tuple(
        Action(kind=kind, run=lease.run_key, group=lease.spec.group, lease=lease.key, gpus=lease.gpus)
        for kind, leases in kept_steps
        for lease in leases
    )
    return Resolution(**decision, actions=actions, passed_over=passed)


def _why(after: Startability) -> str:
    if after.placeable >= after.need:
        return NOT_FUNDED
    if after.free >= after.need:
        return NOT_PLACEABLE
    return NOT_ENOUGH_TO_FREE


def _failure_detail(after: Startability) -> str:
    """One line: what every candidate taken together would leave the run (GPUs)."""
    reason = _why(after)
    if reason == NOT_FUNDED:
        return f"with every candidate taken its groups place but only {after.fundable} of {after.need} GPUs are funded"
    if reason == NOT_PLACEABLE:
        return (f"with every candidate taken {after.free} GPUs would be free for it but only {after.placeable} of "
                f"the {after.need} it needs place in whole groups in the domains it may use")
    return f"with every candidate taken only {after.free} of the {after.need} GPUs it needs would be free for it"
