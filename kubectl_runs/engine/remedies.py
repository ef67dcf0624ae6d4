"""What could free GPUs in a scope without a lottery (API.md §3 Remedies, §4): unfunded groups to reclaim,
spare leases to drop, elastic runs to shrink — and the conflict set that is left for the lottery.

A *scope* is a flavor and, optionally, a fabric domain (``model.Scope``, as in a Reservation). A lease is in
scope when its ``spec.flavor`` is the scope's and, when the scope names a domain, one of its slots sits on a
node of that domain. A *group* is (run, group index): the open leases of one group of one run in scope; its
class is the worst class the ledger gives any of its Active leases (its spares when it has no Active lease).

The listers are pure functions of (snapshot, ledger, scope) and return candidates in the order the resolver
applies them (engine/resolver.py):

1. ``reclaimable_groups`` — unfunded groups with Active leases, whole groups (spares included), by ticket
   when a seed is given, else by (run, group);
2. ``droppable_spares`` — spare leases of the groups not taken, lowest class first, then by their group's
   ticket (or (run, group)), then lease name;
3. ``shrinkable_runs`` — elastic runs, lowest class first then by name, each dropping its in-scope groups from
   the highest index down, only at whole ``stepGPUs`` and never below ``minTotalGPUs`` of Active GPUs held;
4. ``conflict_groups`` — every group with Active leases left (what the lottery draws from).

``remedy_candidates`` runs the four in that order, each skipping what an earlier one took (the runs that report
when they complete, what a forecast counts as coming back, are engine/releases.py). The run a reservation is
for is passed as ``exclude_run``: its own leases are never candidates.

Every candidate says how many GPUs it frees (``gpus``: every slot of the leases it closes, as the resolver
counts) and where (``freed``: slots on schedulable nodes of the scope, by domain — what new placement can use).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..model import GPULease, Scope, Snapshot
from .accounting import UNFUNDED, Ledger
from .codes import class_rank
from .lottery import ticket

GroupKey = tuple[str, int]  # (run "namespace/name", group index)
Freed = tuple[tuple[str, int], ...]  # ((domain, GPUs), …) sorted by domain


@dataclass(frozen=True)
class ScopeNodes:
    """The nodes of a scope: each node of the flavor (in the domain, when set) with its domain, and which of
    them take new placement."""

    flavor: str
    domain: str | None
    node_domain: Mapping[str, str]
    schedulable: frozenset[str]
    # each distinct ``freed`` value once: most groups free ((their domain, 1),), one tuple per domain for all
    _freed: dict[Freed, Freed] = field(default_factory=dict, compare=False, repr=False)

    def in_scope(self, lease: GPULease) -> bool:
        if lease.spec.flavor != self.flavor:
            return False
        if self.domain is None:
            return True
        nodes = self.node_domain
        return any(slot.rpartition("#")[0] in nodes for slot in lease.spec.slice.slots)

    def freed(self, leases: Iterable[GPULease]) -> Freed:
        """Slots of ``leases`` on schedulable nodes of the scope, by domain."""
        out: dict[str, int] = {}
        schedulable, node_domain = self.schedulable, self.node_domain
        for lease in leases:
            for slot in lease.spec.slice.slots:
                name = slot.rpartition("#")[0]
                if name in schedulable:
                    domain = node_domain[name]
                    out[domain] = out.get(domain, 0) + 1
        freed = tuple(sorted(out.items()))
        return self._freed.setdefault(freed, freed)


def scope_nodes(snapshot: Snapshot, scope: Scope) -> ScopeNodes:
    of_scope = [
        n for n in snapshot.nodes if n.flavor == scope.flavor and (scope.domain is None or n.domain == scope.domain)
    ]
    return ScopeNodes(
        flavor=scope.flavor,
        domain=scope.domain,
        node_domain={n.name: n.domain or "" for n in of_scope},
        schedulable=frozenset(n.name for n in of_scope if n.schedulable),
    )


@dataclass(frozen=True, slots=True)
class LeaseGroup:
    """The open leases of one (run, group) in scope (slotted: one per open group, 130,000 at 10,000 runs)."""

    run: str
    group: int
    owner: str
    cls: str  # worst class of its Active leases (of its spares when it has none)
    active: tuple[GPULease, ...]
    spare: tuple[GPULease, ...]
    freed: Freed

    @property
    def key(self) -> GroupKey:
        return (self.run, self.group)

    @property
    def leases(self) -> tuple[GPULease, ...]:
        return self.active + self.spare

    @property
    def active_gpus(self) -> int:
        return sum(lease.gpus for lease in self.active)

    @property
    def gpus(self) -> int:
        return sum(lease.gpus for lease in self.leases)


@dataclass(frozen=True)
class SpareDrop:
    """One spare lease to close (``DropSpare``)."""

    lease: GPULease
    group: LeaseGroup
    cls: str
    freed: Freed

    @property
    def run(self) -> str:
        return self.group.run

    @property
    def gpus(self) -> int:
        return self.lease.gpus


@dataclass(frozen=True)
class ShrinkStep:
    """An elastic run shrunk by whole steps (``Shrink``): the groups it drops, highest index first."""

    run: str
    cls: str
    from_gpus: int  # Active GPUs it holds now
    to_gpus: int  # Active GPUs it keeps (>= minTotalGPUs)
    commits: tuple[tuple[LeaseGroup, ...], ...]  # whole steps, highest group index first: take or leave each

    @property
    def groups(self) -> tuple[LeaseGroup, ...]:
        """The groups it drops, highest index first."""
        return tuple(g for commit in self.commits for g in commit)

    @property
    def leases(self) -> tuple[GPULease, ...]:
        return tuple(lease for g in self.groups for lease in g.leases)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.groups)

    @cached_property
    def freed(self) -> Freed:
        out: dict[str, int] = {}
        for g in self.groups:
            for domain, gpus in g.freed:
                out[domain] = out.get(domain, 0) + gpus
        return tuple(sorted(out.items()))


def _lease_key(lease: GPULease) -> str:
    return lease.key


def _lease_class(book: Ledger, lease: GPULease) -> str:
    charge = book.charges.get(lease.key)
    return charge.worst_class if charge is not None else UNFUNDED


def scope_groups(
    snapshot: Snapshot, book: Ledger, scope: Scope, *, exclude_run: str | None = None
) -> dict[GroupKey, LeaseGroup]:
    """Every open lease group in scope at the ledger's instant (other than ``exclude_run``'s), by (run, group).
    ``snapshot`` gives the nodes; the open leases are the ledger's."""
    nodes = scope_nodes(snapshot, scope)
    members: dict[GroupKey, tuple[list[GPULease], list[GPULease]]] = {}
    run_keys: dict[str, str] = {}  # one string per run for all its groups
    for charge in book.charges.values():
        lease = charge.lease
        run_key = lease.run_key
        run_key = run_keys.setdefault(run_key, run_key)
        if run_key == exclude_run or not nodes.in_scope(lease):
            continue
        active, spare = members.setdefault((run_key, lease.spec.group), ([], []))
        (active if lease.spec.slice.role == "Active" else spare).append(lease)
    return {key: lease_group(book, nodes, key, *members[key]) for key in sorted(members)}


def lease_group(book: Ledger, nodes: ScopeNodes, key: GroupKey, active: Sequence[GPULease],
                spare: Sequence[GPULease]) -> LeaseGroup:
    """The group ``key`` of the open in-scope leases ``active`` and ``spare`` (any order)."""
    if len(active) + len(spare) == 1:  # most groups: one lease
        lease = (active or spare)[0]
        return LeaseGroup(key[0], key[1], lease.spec.owner, _lease_class(book, lease), tuple(active), tuple(spare),
                          nodes.freed((lease,)))
    active, spare = (sorted(x, key=_lease_key) if len(x) > 1 else list(x) for x in (active, spare))
    classed = active or spare
    cls = (_lease_class(book, classed[0]) if len(classed) == 1
           else min((_lease_class(book, lease) for lease in classed), key=class_rank))
    return LeaseGroup(
        run=key[0],
        group=key[1],
        owner=classed[0].spec.owner,
        cls=cls,
        active=tuple(active),
        spare=tuple(spare),
        freed=nodes.freed(active + spare),
    )


def _order(key: GroupKey, seed: str | None) -> tuple:
    return (ticket(seed, *key), key) if seed else (key,)


def reclaimable_groups(
    snapshot: Snapshot,
    book: Ledger,
    scope: Scope,
    *,
    exclude_run: str | None = None,
    seed: str | None = None,
    groups: Mapping[GroupKey, LeaseGroup] | None = None,
) -> list[LeaseGroup]:
    """Unfunded groups with Active leases in scope (``ReclaimUnfunded``): whole groups, spares included, by
    ticket under ``seed`` (the order the resolver takes them), else by (run, group)."""
    groups = scope_groups(snapshot, book, scope, exclude_run=exclude_run) if groups is None else groups
    found = [g for g in groups.values() if g.cls == UNFUNDED and g.active]
    return sorted(found, key=lambda g: _order(g.key, seed))


def droppable_spares(
    snapshot: Snapshot,
    book: Ledger,
    scope: Scope,
    *,
    exclude_run: str | None = None,
    seed: str | None = None,
    groups: Mapping[GroupKey, LeaseGroup] | None = None,
    skip: Collection[GroupKey] = (),
    nodes: ScopeNodes | None = None,
) -> list[SpareDrop]:
    """Spare leases in scope (``DropSpare``) of groups not in ``skip``: lowest class first, then by their
    group's ticket under ``seed`` (else (run, group)), then lease name. ``nodes``: ``scope_nodes(snapshot,
    scope)`` when already computed."""
    groups = scope_groups(snapshot, book, scope, exclude_run=exclude_run) if groups is None else groups
    nodes = scope_nodes(snapshot, scope) if nodes is None else nodes
    drops = []
    for key, group in groups.items():
        if key in skip:
            continue
        for lease in group.spare:
            cls = _lease_class(book, lease)
            drops.append(((class_rank(cls), *_order(key, seed), lease.key), SpareDrop(lease, group, cls, nodes.freed([lease]))))
    return [drop for _, drop in sorted(drops, key=lambda pair: pair[0])]


def active_held(book: Ledger) -> dict[str, int]:
    """Active GPUs each run holds at the ledger's instant (every flavor and domain)."""
    held: dict[str, int] = {}
    for charge in book.charges.values():
        lease = charge.lease
        if lease.spec.slice.role == "Active":
            held[lease.run_key] = held.get(lease.run_key, 0) + lease.gpus
    return held


def shrinkable_runs(
    snapshot: Snapshot,
    book: Ledger,
    scope: Scope,
    *,
    exclude_run: str | None = None,
    groups: Mapping[GroupKey, LeaseGroup] | None = None,
    skip: Collection[GroupKey] = (),
    taken: Collection[str] = (),
    held: Mapping[str, int] | None = None,
) -> list[ShrinkStep]:
    """Elastic runs in scope (``Shrink``), lowest class first then by name, each with every group it can drop:
    from its highest group index down, committed only when the GPUs dropped are a whole number of
    ``stepGPUs``, never leaving fewer than ``minTotalGPUs`` Active GPUs. Groups in ``skip``, or with a lease in
    ``taken`` (lease keys an earlier remedy closes), are left alone; taken Active leases no longer count as
    held. ``held``: ``active_held(book)`` when already computed (not changed here)."""
    groups = scope_groups(snapshot, book, scope, exclude_run=exclude_run) if groups is None else groups
    by_run: dict[str, list[LeaseGroup]] = {}
    for key, group in groups.items():
        if key not in skip and group.active and not any(x.key in taken for x in group.leases):
            by_run.setdefault(group.run, []).append(group)
    held = active_held(book) if held is None else dict(held)
    for key in taken:
        charge = book.charges.get(key)
        if charge is not None and charge.lease.spec.slice.role == "Active":
            held[charge.lease.run_key] = held.get(charge.lease.run_key, 0) - charge.lease.gpus
    steps = []
    for run_key, run_groups in by_run.items():
        run = snapshot.runs_by_key.get(run_key)
        if run is None or run.spec.malleable is None:
            continue
        malleable = run.spec.malleable
        have = held.get(run_key, 0)
        dropped = 0
        pending: list[LeaseGroup] = []
        commits: list[tuple[LeaseGroup, ...]] = []
        for group in sorted(run_groups, key=lambda g: g.group, reverse=True):
            if have - dropped - group.active_gpus < malleable.min_total_gpus:
                break
            dropped += group.active_gpus
            pending.append(group)
            if dropped % malleable.step_gpus == 0:
                commits.append(tuple(pending))
                pending = []
        if not commits:
            continue
        cls = min((g.cls for g in run_groups), key=class_rank)
        kept = have - sum(g.active_gpus for commit in commits for g in commit)
        steps.append(ShrinkStep(run=run_key, cls=cls, from_gpus=have, to_gpus=kept, commits=tuple(commits)))
    return sorted(steps, key=lambda s: (class_rank(s.cls), s.run))


def conflict_groups(
    groups: Mapping[GroupKey, LeaseGroup], *, taken: Collection[str] = ()
) -> list[LeaseGroup]:
    """Groups with Active leases none of which is in ``taken`` (lease keys): the lottery's conflict set, by
    (run, group)."""
    return [g for key, g in sorted(groups.items()) if g.active and not any(x.key in taken for x in g.active)]


@dataclass(frozen=True)
class RemedyCandidates:
    """Everything the gentle remedies could free in a scope, in the resolver's order, without overlap."""

    reclaim: tuple[LeaseGroup, ...]
    spares: tuple[SpareDrop, ...]
    shrinks: tuple[ShrinkStep, ...]
    conflict: tuple[LeaseGroup, ...]  # what is left for the lottery

    @property
    def gpus(self) -> int:
        return (
            sum(g.gpus for g in self.reclaim) + sum(d.gpus for d in self.spares) + sum(s.gpus for s in self.shrinks)
        )

    @cached_property
    def conflict_gpus(self) -> int:
        """Active GPUs of the conflict set: what a lottery could free at most."""
        return sum(g.active_gpus for g in self.conflict)

    def in_order_of(self, seed: str) -> RemedyCandidates:
        """The candidates of ``remedy_candidates(..., seed=None)`` in the order ``seed`` gives them: the same
        reclaimable groups and spares (a seed orders, it never chooses), by ticket as ``reclaimable_groups`` and
        ``droppable_spares`` sort them; shrinks and the conflict set do not depend on it."""
        reclaim = sorted(self.reclaim, key=lambda g: _order(g.key, seed))
        spares = sorted(self.spares, key=lambda d: (class_rank(d.cls), *_order(d.group.key, seed), d.lease.key))
        ordered = RemedyCandidates(reclaim=tuple(reclaim), spares=tuple(spares), shrinks=self.shrinks,
                                   conflict=self.conflict)
        if "conflict_gpus" in self.__dict__:  # the same conflict set: its sum carries over
            ordered.__dict__["conflict_gpus"] = self.conflict_gpus
        return ordered

    def freed_by_run(self) -> dict[str, dict[str, int]]:
        """Schedulable GPUs each run's candidates would free, by domain."""
        out: dict[str, dict[str, int]] = {}
        items: list[tuple[str, Freed]] = [(g.run, g.freed) for g in self.reclaim]
        items += [(d.run, d.freed) for d in self.spares]
        items += [(s.run, s.freed) for s in self.shrinks]
        for run, freed in items:
            per = out.setdefault(run, {})
            for domain, gpus in freed:
                per[domain] = per.get(domain, 0) + gpus
        return out


def remedy_candidates(
    snapshot: Snapshot,
    book: Ledger,
    scope: Scope,
    *,
    exclude_run: str | None = None,
    seed: str | None = None,
    every_group: Mapping[GroupKey, LeaseGroup] | None = None,
    nodes: ScopeNodes | None = None,
    held: Mapping[str, int] | None = None,
) -> RemedyCandidates:
    """All four listers in order, each skipping what an earlier one took (no GPU counted twice).

    When already computed (a batch of plans shares them: engine/evaluation.py): ``every_group`` =
    ``scope_groups(snapshot, book, scope)`` of every run (``exclude_run``'s are left out here), ``nodes`` =
    ``scope_nodes(snapshot, scope)``, ``held`` = ``active_held(book)``."""
    if every_group is None:
        groups = scope_groups(snapshot, book, scope, exclude_run=exclude_run)
    else:
        groups = {key: g for key, g in every_group.items() if key[0] != exclude_run}
    reclaim = reclaimable_groups(snapshot, book, scope, seed=seed, groups=groups)
    taken_groups = {g.key for g in reclaim}
    spares = droppable_spares(snapshot, book, scope, seed=seed, groups=groups, skip=taken_groups, nodes=nodes)
    taken = {lease.key for g in reclaim for lease in g.leases}
    taken.update(d.lease.key for d in spares)
    shrinks = shrinkable_runs(snapshot, book, scope, groups=groups, taken=taken, held=held)
    taken.update(lease.key for s in shrinks for lease in s.leases)
    return RemedyCandidates(
        reclaim=tuple(reclaim),
        spares=tuple(spares),
        shrinks=tuple(shrinks),
        conflict=tuple(conflict_groups(groups, taken=taken)),
    )
