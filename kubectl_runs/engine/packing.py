"""Free slots per node and per fabric domain, and how many of a run's GPUs they can hold (API.md §3 Free
capacity, Plan).

A node's free capacity is its slots minus the slots of leases open at ``at`` (Active and Spare). Only
*candidate* nodes take new placement: the run's flavor, schedulable (not cordoned, not out of service), and the
reservation's fabric domain when its scope names one. A group of ``groupGPUs`` (plus its spares) must sit
inside one domain, so a domain with ``free`` slots holds ``floor(free / unit)`` groups; without
``allowCrossGroupSpread`` only the best single domain counts; a run without ``groupGPUs`` can use every free
slot of every domain.

Everything here is in GPUs (= slots). Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ..model import GPULease, Node, Snapshot
from .slots import gpu_of

NO_DOMAIN = ""  # nodes without a fabric.domain label form one domain of their own


def node_of(slot: str) -> str:
    """``gpu-a-01#3`` -> ``gpu-a-01``."""
    return slot.rpartition("#")[0] or slot


def open_leases(snapshot: Snapshot, at: datetime) -> list[GPULease]:
    """The leases open at ``at`` (``start <= at`` and not closed at ``at``), in snapshot order: one tight pass,
    because a fleet's history holds far more closed leases than open ones."""
    out = []
    append = out.append
    for lease in snapshot.leases:
        status = lease.status
        if status.closed:  # most of a history: one comparison settles it
            ended = status.ended
            if ended is None or ended <= at:
                continue
        if lease.spec.start > at:
            continue
        append(lease)
    return out


def candidate_nodes(snapshot: Snapshot, flavor: str, domain: str | None = None) -> list[Node]:
    """Nodes that take new placement for ``flavor``: the flavor's label, schedulable, and in ``domain`` when
    one is given."""
    return [
        node
        for node in snapshot.nodes
        if node.flavor == flavor and node.schedulable and (domain is None or node.domain == domain)
    ]


def used_slots(nodes: Iterable[Node], leases: Iterable[GPULease]) -> dict[str, set[str]]:
    """The valid slots of ``nodes`` held by ``leases`` (a slot held twice counts once; a slot that names no GPU of
    the node — ``gpu-a-01#8`` or ``#9`` on an 8-GPU node, or not ``node#ordinal`` at all: engine/slots.py — is
    ignored: it is a finding, not a used GPU)."""
    wanted = {node.name: node.gpus for node in nodes}
    used: dict[str, set[str]] = {}
    for lease in leases:
        for slot in lease.spec.slice.slots:
            gpu = gpu_of(slot)
            if gpu is None:
                continue
            name, ordinal = gpu
            gpus = wanted.get(name)
            if gpus is None or ordinal >= gpus:
                continue
            used.setdefault(name, set()).add(slot)
    return used


def free_by_node(nodes: Sequence[Node], leases: Iterable[GPULease]) -> dict[str, int]:
    """Free GPUs of each node: its slots minus the slots open leases hold (0 on an out-of-service node)."""
    used = used_slots(nodes, leases)
    return {
        node.name: 0 if node.out_of_service else max(0, node.gpus - len(used.get(node.name, ()))) for node in nodes
    }


def group_unit(group_gpus: int | None, spares_per_group: int) -> int | None:
    """The slots one group occupies in its domain: ``groupGPUs`` plus its spares; None without groups."""
    return None if not group_gpus else group_gpus + spares_per_group


@dataclass(frozen=True)
class DomainCapacity:
    """One fabric domain's candidate nodes: free GPUs, and the GPUs whole groups can use there."""

    domain: str
    nodes: int
    free: int
    placeable: int
    groups: int | None  # whole groups that fit; None when the run has no groupGPUs


def place(free: Mapping[str, int], unit: int | None, spread: bool) -> tuple[int, dict[str, tuple[int, int | None]]]:
    """Placeable GPUs for free slots ``free`` (domain -> GPUs) and a group footprint ``unit``.

    Returns the total and, per domain, (placeable GPUs, whole groups). With ``unit`` each domain holds
    ``floor(free / unit)`` groups, and without cross-group spread only the best single domain counts towards
    the total; without ``unit`` every free slot is usable ("without g it is the sum of free slots", whatever the
    spread flag says). Always ``0 <= placeable <= free``."""
    per_domain = {domain: _place_domain(gpus, unit) for domain, gpus in free.items()}
    amounts = [p for p, _ in per_domain.values()]
    total = sum(amounts) if spread or not unit else max(amounts, default=0)
    return total, per_domain


def _place_domain(gpus: int, unit: int | None) -> tuple[int, int | None]:
    """(placeable GPUs, whole groups) of one domain with ``gpus`` free (``place``)."""
    if unit:
        groups = max(0, gpus) // unit
        return groups * unit, groups
    return max(0, gpus), None


@dataclass(frozen=True)
class Capacity:
    """Where a run could be placed at one instant (API.md §5 plan ``capacity``)."""

    flavor: str
    domain_scope: str | None  # the reservation's domain, when its scope names one
    unit: int | None  # slots per group, spares included
    spread: bool
    domains: tuple[DomainCapacity, ...]  # sorted by domain name
    placeable: int
    flavor_nodes: int  # nodes with this flavor label anywhere (0: no node offers the flavor)
    excluded_nodes: int  # nodes of the flavor in scope that take no placement (cordoned or out of service)
    nodes: tuple[Node, ...] = ()  # the candidate nodes (candidate_nodes): what the funding stage's selectors match
    spread_placeable: int = 0  # placeable GPUs were groups allowed to spread across domains

    @property
    def free(self) -> int:
        return sum(d.free for d in self.domains)

    @property
    def free_by_domain(self) -> dict[str, int]:
        return {d.domain: d.free for d in self.domains}

    @property
    def best_domain(self) -> DomainCapacity | None:
        """The domain that holds the most GPUs in whole groups (then the most free, then by name)."""
        return min(self.domains, key=lambda d: (-d.placeable, -d.free, d.domain), default=None)

    @property
    def node_count(self) -> int:
        return sum(d.nodes for d in self.domains)


ScopedNodes = tuple[list[Node], list[Node], list[Node], list[tuple[str, str]]]


def scoped_nodes(snapshot: Snapshot, flavor: str, domain: str | None = None) -> ScopedNodes:
    """What ``capacity`` reads of the nodes: those of ``flavor``, of them those in ``domain`` (any domain when
    None), of those the schedulable ones, and each schedulable one's (name, domain or NO_DOMAIN). A function of
    the nodes alone: an Evaluation computes it once per flavor and domain."""
    of_flavor = [n for n in snapshot.nodes if n.flavor == flavor]
    in_scope = [n for n in of_flavor if domain is None or n.domain == domain]
    nodes = [n for n in in_scope if n.schedulable]
    return of_flavor, in_scope, nodes, [(n.name, n.domain or NO_DOMAIN) for n in nodes]


DomainSums = tuple[dict[str, int], dict[str, int]]  # free GPUs by domain, schedulable nodes by domain


def domain_sums(where: Iterable[tuple[str, str]], free_nodes: Mapping[str, int]) -> DomainSums:
    """The free GPUs and the nodes of each domain, of the schedulable nodes ``where`` ((name, domain) pairs,
    ``scoped_nodes``) with ``free_nodes`` free GPUs each; in the order the domains first appear."""
    free: dict[str, int] = {}
    counts: dict[str, int] = {}
    for node_name, name in where:
        free[name] = free.get(name, 0) + free_nodes[node_name]
        counts[name] = counts.get(name, 0) + 1
    return free, counts


def capacity(
    snapshot: Snapshot,
    leases: Iterable[GPULease],
    flavor: str,
    *,
    domain: str | None = None,
    unit: int | None = None,
    spread: bool = True,
    free: Mapping[str, int] | None = None,
    scoped: ScopedNodes | None = None,
    sums: DomainSums | None = None,
) -> Capacity:
    """Free and placeable GPUs of ``flavor`` (in ``domain`` when given) with ``leases`` open (pass the leases
    open at the instant: ``open_leases``). ``unit`` is a group's footprint (``group_unit``). ``free``: free GPUs
    of (at least) every schedulable node of the flavor, ``free_by_node`` of them, when already computed — a
    node's free GPUs depend on that node and the leases alone, so one map serves every domain, unit and spread
    (engine/evaluation.py). ``sums``: ``domain_sums`` of those, when already computed (an Evaluation keeps them
    up to date as leases open and close)."""
    of_flavor, in_scope, nodes, where = scoped if scoped is not None else scoped_nodes(snapshot, flavor, domain)
    if sums is None:
        sums = domain_sums(where, free_by_node(nodes, leases) if free is None else free)
    free, counts = sums
    total, per_domain = place(free, unit, spread)
    domains = tuple(
        DomainCapacity(domain=name, nodes=counts[name], free=free[name], placeable=p, groups=g)
        for name, (p, g) in sorted(per_domain.items())
    )
    return Capacity(
        flavor=flavor,
        domain_scope=domain,
        unit=unit,
        spread=spread,
        domains=domains,
        placeable=total,
        flavor_nodes=len(of_flavor),
        excluded_nodes=len(in_scope) - len(nodes),
        nodes=tuple(nodes),
        spread_placeable=total if spread else place(free, unit, True)[0],
    )


def capacity_moved(room: Capacity, sums: DomainSums, moved: Iterable[str]) -> Capacity:
    """``room`` once the free GPUs of the ``moved`` domains are those of ``sums`` (``domain_sums`` of the same
    nodes; the same unit and spread): what ``capacity`` computes, with the entries of only those domains made
    again (an Evaluation that keeps up with the leases a pass mints, a few domains at a time)."""
    free, counts = sums
    domains = list(room.domains)
    where = {d.domain: i for i, d in enumerate(domains)}
    for name in moved:
        i = where.get(name)
        if i is not None:
            p, g = _place_domain(free[name], room.unit)
            domains[i] = DomainCapacity(domain=name, nodes=counts[name], free=free[name], placeable=p, groups=g)
    amounts = [d.placeable for d in domains]
    every = sum(amounts)  # place(free, unit, True)
    total = every if room.spread or not room.unit else max(amounts, default=0)
    return replace(room, domains=tuple(domains), placeable=total, spread_placeable=every)


def slot_counts(nodes: Sequence[Node], leases: Iterable[GPULease]) -> dict[str, dict[str, int]]:
    """Per node of ``nodes``, its valid slots held by ``leases`` (``used_slots``) and by how many."""
    wanted = {node.name: node.gpus for node in nodes}
    out: dict[str, dict[str, int]] = {}
    for lease in leases:
        for slot in lease.spec.slice.slots:
            name, _, ordinal = slot.rpartition("#")
            gpus = wanted.get(name)
            if gpus is None or not ordinal.isdigit() or int(ordinal) >= gpus:
                continue
            held = out.setdefault(name, {})
            held[slot] = held.get(slot, 0) + 1
    return out
