"""The remedies of `explain workload`: what would let a pending Workload in, each naming the objects to change —
lower-priority workloads preemption would evict, cohort members keeping quota behind a lending limit or borrowing
beyond their nominal quota, the borrowing limit when it binds, the nominal quota to raise (by the shortfall, or by
what a request beyond the maximum capacity lacks), the node pool to grow, the workloads ahead. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import reports
from .assign import Assignment
from .capacity import beyond_capacity, never_fits
from .model import ClusterQueue, Workload, show_quantity
from .quota import FR, GPU_RESOURCES, Fleet, QuotaNode, node_allocatable

if TYPE_CHECKING:
    from .explain import QueuePosition, Shortfall


@dataclass(frozen=True)
class Remedy:
    kind: str  # Preempt, Reclaim, Lend, RaiseBorrowingLimit, RaiseQuota, GrowNodePool, Wait, FixQueue
    gpus: int
    message: str
    objects: tuple[str, ...] = ()

    def entry(self) -> reports.RemedyEntry:
        return reports.RemedyEntry(self.kind, self.gpus, self.message, list(self.objects))



def queue_remedies(fleet: Fleet, workload: Workload) -> list[Remedy]:
    name = workload.spec.queue_name
    local = fleet.local_queues.get(f"{workload.namespace}/{name}")
    if local is None:
        return [Remedy("FixQueue", 0, f"create LocalQueue {workload.namespace}/{name or '(none)'} (the Workload "
                       "names it) pointing at a ClusterQueue, or set the workload's queue-name label to an existing "
                       "one", (f"LocalQueue {workload.namespace}/{name}",))]
    return [Remedy("FixQueue", 0, f"LocalQueue {local.key} points at ClusterQueue {local.spec.cluster_queue}, "
                   "which does not exist: create it or point the LocalQueue at one that does",
                   (f"LocalQueue {local.key}", f"ClusterQueue {local.spec.cluster_queue}"))]


def quota_remedies(fleet: Fleet, cq: ClusterQueue, node: QuotaNode, workload: Workload, assignment: Assignment,
              shortfalls: list[Shortfall], position: QueuePosition) -> list[Remedy]:
    out: list[Remedy] = []
    for choice in assignment.pod_sets:
        if choice.unavailable:
            out.append(Remedy("RaiseQuota", 0, f"ClusterQueue {cq.name} covers no {', '.join(choice.unavailable)}: "
                              "add it to a resource group (with quota) or drop it from the pod template",
                              (f"ClusterQueue {cq.name}",)))
    priority = fleet.priority(workload)
    for s in shortfalls:
        fr = (s.flavor, s.resource)
        if s.quota_short > 0:
            out.extend(_preemption(fleet, cq, node, fr, s, priority))
            out.extend(_lenders(fleet, cq, node, fr, s))
            limits = node.limits(fr)
            if limits.borrowing is not None:
                unlimited = _available_without_limit(node, fr)
                if unlimited > s.own_free + s.cohort_free:
                    gain = min(s.quota_short, unlimited - s.own_free - s.cohort_free)
                    out.append(Remedy("RaiseBorrowingLimit", gain,
                                      f"raise ClusterQueue {cq.name}'s borrowingLimit for {s.resource} in flavor "
                                      f"{s.flavor} from {limits.borrowing} to {limits.borrowing + gain}: the cohort "
                                      f"has {gain} more it could lend", (f"ClusterQueue {cq.name}",)))
            out.append(Remedy("RaiseQuota", s.quota_short,
                              f"raise ClusterQueue {cq.name}'s nominalQuota for {s.resource} in flavor {s.flavor} "
                              f"from {s.nominal} to {s.nominal + s.quota_short}"
                              + ("" if s.physical_short == 0 else " (and grow the node pool: see below)"),
                              (f"ClusterQueue {cq.name}",)))
        if s.physical_short > 0:
            flavor = fleet.flavors.get(s.flavor)
            labels = ",".join(f"{k}={v}" for k, v in sorted(flavor.spec.node_labels.items())) if flavor else ""
            size = max((node_allocatable(n, s.resource) for n in fleet.flavor_nodes(s.flavor)), default=0)
            size = max(size, s.gpus_per_pod)
            per_node = max(1, size // s.gpus_per_pod) if s.gpus_per_pod else 1
            grow = -(-s.pods_short // per_node)
            out.append(Remedy("GrowNodePool", s.physical_short,
                              f"add {grow} node{'s' if grow != 1 else ''} labelled {labels or '(any)'} with {size} "
                              f"{s.resource} each (flavor {s.flavor}'s nodeLabels): {s.pods_short} of its pods "
                              f"({s.gpus_per_pod} GPUs each) fit on no node now", (f"ResourceFlavor {s.flavor}",)))
    if position is not None and position.position > 1:
        out.append(Remedy("Wait", position.gpus_ahead,
                          f"{position.position - 1} workload{'s' if position.position != 2 else ''} of ClusterQueue "
                          f"{cq.name} come first (higher priority or older; {position.gpus_ahead} GPUs): "
                          f"{', '.join(position.ahead[:3])}{' …' if len(position.ahead) > 3 else ''}",
                          tuple(f"Workload {k}" for k in position.ahead[:3])))
    return out


def capacity_remedies(cq: ClusterQueue, assignment: Assignment) -> list[Remedy]:
    """A pod set beyond the queue's maximum capacity in every flavor it could use: raise the quota of the flavor
    nearest to holding it (of a GPU resource) by the difference — nothing else ever admits it."""
    out = []
    for choice in assignment.pod_sets:
        if not never_fits(choice):
            continue
        over = [b for b in beyond_capacity(Assignment(assignment.cluster_queue, (choice,)))
                if b.resource in GPU_RESOURCES]
        if not over:
            continue
        b = min(over, key=lambda b: b.request - b.maximum)
        gap = b.request - b.maximum
        out.append(Remedy("RaiseQuota", gap,
                          f"pod set {b.pod_set} asks {b.asks(show_quantity)} but ClusterQueue {cq.name} can never "
                          f"admit more than {b.maximum} in flavor {b.flavor} (nominal quota plus what it may "
                          f"borrow): raise its nominalQuota there by {gap} (or the cohort's quota it may borrow), "
                          "or make the workload smaller", (f"ClusterQueue {cq.name}",)))
    return out


def _available_without_limit(node: QuotaNode, fr: FR) -> int:
    if node.parent is None:
        return max(0, node.available(fr))
    return max(0, node.local_available(fr) + node.parent.available(fr))


def _preemption(fleet: Fleet, cq: ClusterQueue, node: QuotaNode, fr: FR, s: Shortfall, priority: int) -> list[Remedy]:
    """Lower-priority workloads holding quota in this queue and flavor, lowest priority and newest first, as many
    as the shortfall needs (Kueue preempts within the queue only for a request within nominal quota)."""
    policy = cq.spec.preemption.within_cluster_queue
    victims = []
    for w in fleet.reserving.get(cq.name, []):
        if fleet.priority(w) >= priority:
            continue
        held = _held(w, fr)
        if held:
            victims.append((fleet.priority(w), _newest_first(w), w.key, held))
    if not victims or s.needed > s.nominal:
        return []
    victims.sort()
    chosen, freed = [], 0
    for _prio, _age, key, held in victims:
        chosen.append((key, held))
        freed += held
        if freed >= s.quota_short:
            break
    names = ", ".join(f"{k} ({h} GPUs)" for k, h in chosen)
    if policy == "Never":
        return [Remedy("Preempt", min(freed, s.quota_short),
                       f"lower-priority {names} hold {freed} {fr[1]} in flavor {fr[0]}, but ClusterQueue {cq.name} "
                       "does not preempt (preemption.withinClusterQueue: Never); set it to LowerPriority",
                       (f"ClusterQueue {cq.name}", *(f"Workload {k}" for k, _ in chosen)))]
    return [Remedy("Preempt", min(freed, s.quota_short),
                   f"preempting lower-priority {names} frees {freed} of the {s.quota_short} needed "
                   f"(ClusterQueue {cq.name} preemption.withinClusterQueue: {policy})",
                   tuple(f"Workload {k}" for k, _ in chosen))]


def _newest_first(workload: Workload) -> float:
    created = workload.metadata.creation_timestamp
    return -(created.timestamp() if created else 0.0)


def _held(workload: Workload, fr: FR) -> int:
    from .quota import reserved_usage

    return reserved_usage(workload).get(fr, 0)


def _lenders(fleet: Fleet, cq: ClusterQueue, node: QuotaNode, fr: FR, s: Shortfall) -> list[Remedy]:
    """Cohort members that keep unused quota behind a lending limit, and members borrowing beyond their
    nominal quota (which reclaim could take back)."""
    if node.parent is None:
        return []
    out = []
    root = node.root()
    for member in sorted(root.leaves(), key=lambda n: n.name):
        if member is node:
            continue
        limits = member.limits(fr)
        used = member.usage.get(fr, 0)
        locked = max(0, member.guaranteed(fr) - used)
        if locked > 0 and limits.lending is not None:
            gain = min(locked, s.quota_short)
            out.append(Remedy("Lend", gain,
                              f"ClusterQueue {member.name} keeps {locked} {fr[1]} of flavor {fr[0]} unused behind "
                              f"lendingLimit {limits.lending}: raising it to {limits.lending + gain} lends {gain}",
                              (f"ClusterQueue {member.name}",)))
        borrowed = max(0, used - limits.nominal)
        reclaim = cq.spec.preemption.reclaim_within_cohort
        if borrowed > 0 and s.needed <= s.nominal:
            verb = "reclaims" if reclaim != "Never" else "could reclaim (preemption.reclaimWithinCohort is Never)"
            out.append(Remedy("Reclaim", min(borrowed, s.quota_short),
                              f"ClusterQueue {member.name} borrows {borrowed} {fr[1]} of flavor {fr[0]} beyond its "
                              f"nominal quota; {cq.name} {verb} them within its own nominal quota",
                              (f"ClusterQueue {member.name}",)))
    return out
