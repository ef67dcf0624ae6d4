"""The leases that give a Run what its plan says it needs: placed group by group, paid source by source, named
so that a pass cut short and resumed mints the same leases (docs/reconciler.md "The ledger keeper", Choices).

- **Placement**: groups in index order; a group goes to the domain the Run already uses (then the activated
  Reservation's domain, then the domain with the most free GPUs); inside a domain, a group's slots continue on
  the nodes the group already holds, else on the node that fits the group most tightly, else on nodes with the
  most free GPUs first; ordinals ascending.
- **Payers**: the funding walk's sources in order, those whose selector matches every node of the group first;
  a group whose GPUs straddle two sources gets one lease per payer.
- **Names**: ``<run>-g<group>-<role>-<n>``, ``n`` = the Run's leases of that group and role that exist already,
  skipping a name another object holds. Reason ``Start`` for the start width, ``Grow`` above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...engine.funding import FundingSource
from ...engine.packing import NO_DOMAIN, group_unit, node_of
from ...engine.plan import Plan
from ...model import API_VERSION, Node, Run
from ...timeutil import rfc3339
from .free_slots import FreeSlots
from .holdings import open_of, shape, start_width
from .options import (
    ACTIVATED,
    ACTIVE,
    GROUP_LABEL,
    GROW,
    ROLE_LABEL,
    RUN_LABEL,
    SPARE,
    START,
    label_value,
    object_name,
)

if TYPE_CHECKING:
    from .pass_state import PassState


class Minting:
    """The leases that give ``run`` what ``plan`` says it needs: placed group by group, paid source by source.
    ``compute`` returns (body, cause) pairs, or None when some group cannot be placed or funded (nothing is
    minted then)."""

    def __init__(self, owner: PassState, run: Run, plan: Plan, book, width: int) -> None:
        self.pass_ = owner
        self.run = run
        self.plan = plan
        self.width = width
        self.book = book
        snap = owner.snap
        self.at = owner.at
        self.snap = snap
        flavor = run.spec.resources.gpu_type
        self.flavor = flavor
        self.domain_scope = plan.capacity.domain_scope
        # the candidate nodes (plan.capacity.nodes: the flavor's schedulable nodes in the plan's domain scope); of
        # those, the ones with a free slot are all that placement can take from or compare (a node without one
        # never fits a group nor gives it a slot)
        self._candidates: dict[str, Node] | None = None  # by name, when asked (_candidate)
        self.all_nodes = snap.nodes_by_name
        lost = set(owner.victims.get(run.key, ())) if owner.serving != run.key else set()
        # (what it lost in this pass went to the Run that took it)
        if lost:
            slots = _without(owner, plan.capacity.nodes, lost)
        else:
            # the pass's (free_slots.FreeSlots, kept as it mints): a candidate whose every slot an open lease holds
            # has no ordinal to give, and most nodes of a busy fleet are full
            slots = owner.free_slots(flavor, self.domain_scope)
        self.nodes: list[Node] = slots.nodes  # the candidates with a free slot, in the plan's order (read only)
        self.by_domain: dict[str, list[Node]] = slots.by_domain  # self.nodes by domain (NO_DOMAIN: none; read only)
        self.free: dict[str, tuple[int, ...]] = dict(slots.free)  # free ordinals by node, kept as slots are picked
        self.domain_free: dict[str, int] = dict(slots.domain_free)  # free slots by domain, kept as slots are picked
        locality = run.spec.locality
        self.group_gpus = locality.group_gpus if locality else None
        self.spread = locality.allow_cross_group_spread if locality else True
        self.spares = run.spec.spares_per_group
        self.unit = group_unit(self.group_gpus, self.spares)
        # what the run holds: slots by group (open leases)
        self.group_slots: dict[int, list[str]] = {}
        self.held_active: dict[int, int] = {}
        self.held_spare: dict[int, int] = {}
        for lease in open_of(snap, run, self.at):
            group = lease.spec.group
            self.group_slots.setdefault(group, []).extend(lease.spec.slice.slots)
            into = self.held_active if lease.spec.slice.role == ACTIVE else self.held_spare
            into[group] = into.get(group, 0) + lease.gpus
        # names: leases of (group, role) that exist (any state), and names taken in the namespace
        self.counts: dict[tuple[int, str], int] = {}
        for lease in snap.leases_by_run.get(run.key, ()):
            k = (lease.spec.group, lease.spec.slice.role)
            self.counts[k] = self.counts.get(k, 0) + 1
        self.taken_names = owner.lease_names(run.namespace)  # shared: the names minted here go in self.named
        self.named: set[str] = set()
        # preferred domain: an Activated reservation's
        self.reserved_domain = None
        for r in sorted(owner.evaluation().reservations_of(run.key), key=lambda r: r.key):
            if r.status.state == ACTIVATED and r.spec.scope.domain:
                self.reserved_domain = r.spec.scope.domain

    # --- domains and nodes -------------------------------------------------------------------------------------

    def _candidate(self, name: str) -> Node | None:
        """The candidate node ``name`` (free slots or not), None when it is not one."""
        if self._candidates is None:
            self._candidates = self.pass_.candidates(self.plan.capacity)
        return self._candidates.get(name)

    def _domain_of(self, name: str) -> str:
        node = self.all_nodes.get(name)
        return (node.domain or NO_DOMAIN) if node is not None else NO_DOMAIN

    def _domain_free(self) -> dict[str, int]:
        """Free slots by domain (a domain with none is left out: it never fits a group)."""
        return self.domain_free

    def _run_domains(self) -> list[str]:
        """Domains where the run holds slots, most slots first."""
        count: dict[str, int] = {}
        for slots in self.group_slots.values():
            for slot in slots:
                d = self._domain_of(node_of(slot))
                count[d] = count.get(d, 0) + 1
        return [d for d, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))]

    def _choose_domain(self, group: int, size: int, groups_left: int) -> str | None:
        held = self.group_slots.get(group)
        if held:
            return self._domain_of(node_of(held[0]))
        free = self._domain_free()
        # the domain with the most free GPUs (then by name): whether a domain fits grows with its free GPUs, so
        # the first that fits in that order is this one or none
        top = min(free, key=lambda d: (-free[d], d), default=None)
        if not self.spread and self.group_gpus:
            mine = self._run_domains()
            if mine:
                return mine[0] if free.get(mine[0], 0) >= size else None
            unit = self.unit or size
            if top is None or free[top] // unit < groups_left:
                return None
            reserved = self.reserved_domain
            return reserved if reserved and free.get(reserved, 0) // unit >= groups_left else top
        for d in [*self._run_domains(), *([self.reserved_domain] if self.reserved_domain else [])]:
            if free.get(d, 0) >= size:
                return d
        return top if top is not None and free[top] >= size else None

    def _pick(self, group: int, count: int, domain: str | None) -> list[str] | None:
        """``count`` free slots for ``group`` (in ``domain`` when given): the group's own nodes first, else the
        tightest single node, else the nodes with the most free GPUs; ordinals ascending."""
        own = {node_of(s) for s in self.group_slots.get(group, ())}
        mine = sorted((node for node in map(self._candidate, own)
                       if node is not None and (domain is None or (node.domain or NO_DOMAIN) == domain)),
                      key=lambda n: n.name)  # free slots or not: the group's own nodes come first
        pool = self.nodes if domain is None else self.by_domain.get(domain, ())
        others = [n for n in pool if n.name not in own] if own else list(pool)
        free = self.free
        if not mine:
            fitting = [n for n in others if len(free[n.name]) >= count]
            if fitting:
                best = min(fitting, key=lambda n: (len(free[n.name]), n.name))
                mine, others = [best], [n for n in others if n is not best]
        others = sorted(others, key=lambda n: (-len(free[n.name]), n.name))
        picked: list[str] = []
        for node in [*mine, *others]:
            if len(picked) >= count:
                break
            take = free.get(node.name, ())[: count - len(picked)]
            picked.extend(f"{node.name}#{i}" for i in take)
        if len(picked) < count:
            return None
        for slot in picked:
            name, _, ordinal = slot.rpartition("#")
            taken = int(ordinal)
            free[name] = tuple(i for i in free[name] if i != taken)
            node_domain = self.all_nodes[name].domain or NO_DOMAIN
            self.domain_free[node_domain] -= 1
        self.group_slots.setdefault(group, []).extend(picked)
        return picked

    # --- payers --------------------------------------------------------------------------------------------------

    def _selects_all(self, source: FundingSource, slots: Sequence[str]) -> bool:
        _budget, envelope = self.snap.envelopes_by_key[source.key]
        for name in {node_of(s) for s in slots}:
            node = self.all_nodes.get(name)
            if node is None or not envelope.selects(node.metadata.labels):
                return False
        return True

    def _pay(self, sources: list[list], gpus: int, group_slots: Sequence[str]) -> list[tuple[tuple, int]] | None:
        """Split ``gpus`` over the sources (each ``[FundingSource, left]``): those whose selector matches every
        node of the group first, in walk order, then the others."""
        eligible = [s for s in sources if self._selects_all(s[0], group_slots)]
        rest = [s for s in sources if s not in eligible]
        out: list[tuple[tuple, int]] = []
        left = gpus
        for entry in [*eligible, *rest]:
            if left <= 0:
                break
            take = min(entry[1], left)
            if take <= 0:
                continue
            entry[1] -= take
            left -= take
            out.append((entry[0].key, take))
        if left > 0:
            return None
        return out

    # --- the leases ------------------------------------------------------------------------------------------------

    def compute(self) -> list[tuple[dict, str]] | None:
        run, plan = self.run, self.plan
        groups = shape(run, self.width)
        start_shape = shape(run, start_width(run))
        owner = plan.funding.owner
        if owner is None:
            return None
        money = plan.funding  # the funding walk on the candidate nodes, of this view's ledger
        sources = [[s, s.usable] for s in money.sources if s.usable > 0]
        out: list[tuple[dict, str]] = []
        missing_groups = [
            i for i, size in enumerate(groups)
            if self.held_active.get(i, 0) < size or self.held_spare.get(i, 0) < self.spares
        ]
        for position, group in enumerate(missing_groups):
            size = groups[group]
            active_missing = max(0, size - self.held_active.get(group, 0))
            spare_missing = max(0, self.spares - self.held_spare.get(group, 0))
            count = active_missing + spare_missing
            domain = None
            if self.group_gpus:
                domain = self._choose_domain(group, count, len(missing_groups) - position)
                if domain is None:
                    return None
            picked = self._pick(group, count, domain)
            if picked is None:
                return None
            # The order a whole pass takes them in: the start width (and a start group's spares), then growth;
            # so finishing a half-minted run picks the same slots and payers for each part.
            start_group = group < len(start_shape)
            start_size = start_shape[group] if start_group else 0
            start_missing = max(0, min(size, start_size) - self.held_active.get(group, 0))
            grow_missing = active_missing - start_missing
            if start_group:
                spare_slots = picked[start_missing: start_missing + spare_missing]
                grow_slots = picked[start_missing + spare_missing:]
            else:
                grow_slots = picked[start_missing: start_missing + grow_missing]
                spare_slots = picked[start_missing + grow_missing:]
            parts = [
                (ACTIVE, START, picked[:start_missing]),
                (SPARE, START, spare_slots if start_group else []),
                (ACTIVE, GROW, grow_slots),
                (SPARE, GROW, [] if start_group else spare_slots),
            ]
            for role, reason, slots in parts:
                if not slots:
                    continue
                paid = self._pay(sources, len(slots), self.group_slots[group])
                if paid is None:
                    return None
                offset = 0
                for key, gpus in paid:
                    chunk = slots[offset: offset + gpus]
                    offset += gpus
                    out.append(self._lease(group, role, reason, chunk, key, owner))
        return out

    def _lease(self, group: int, role: str, reason: str, slots: list[str], payer: tuple, owner: str) -> tuple[dict, str]:
        run = self.run
        k = (group, role)
        n = self.counts.get(k, 0)
        while (taken := object_name(run.name, f"-g{group}-{role.lower()}-{n}")) in self.taken_names or taken in self.named:
            n += 1
        name = object_name(run.name, f"-g{group}-{role.lower()}-{n}")
        self.counts[k] = n + 1
        self.named.add(name)
        body = {
            "apiVersion": API_VERSION,
            "kind": "GPULease",
            "metadata": {
                "name": name,
                "namespace": run.namespace,
                "labels": {RUN_LABEL: label_value(run.name), GROUP_LABEL: str(group), ROLE_LABEL: role},
            },
            "spec": {
                "owner": owner,
                "runRef": {"namespace": run.namespace, "name": run.name},
                "group": group,
                "flavor": self.flavor,
                "slice": {"slots": list(slots), "role": role},
                "paidBy": {"namespace": payer[0], "budget": payer[1], "envelope": payer[2]},
                "start": rfc3339(self.at),
                "reason": reason,
            },
        }
        nodes = sorted({node_of(s) for s in slots})
        cause = (f"{reason}: mint {run.namespace}/{name} for {run.key} group {group} ({len(slots)} {role} GPUs on "
                 f"{', '.join(nodes)}), paid by {'/'.join(payer)}")
        return body, cause


def _without(owner: PassState, candidates: Sequence[Node], lost: set[str]) -> FreeSlots:
    """The free slots of ``candidates`` other than those in ``lost`` (a victim of this instant's activations
    is never minted onto the slots it just lost)."""
    busy = owner.busy()  # slots of the leases not closed at the instant
    made = FreeSlots("", None)
    for node in candidates:
        name = node.name
        held = busy.get(name) or {}
        made.add(node, tuple(i for i in range(node.gpus) if f"{name}#{i}" not in held and f"{name}#{i}" not in lost))
    return made
