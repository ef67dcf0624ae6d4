"""Kueue's quota arithmetic, as Kueue v0.12 computes it (``pkg/cache/resource_node.go``), and the facts both
queue reports share: what a Workload asks, which ClusterQueue it goes to, its priority, which nodes a flavor
selects.

Quota is a tree: ClusterQueues are leaves, Cohorts inner nodes (a Cohort names its ``parent``). Per
(flavor, resource), every node has

- ``subtree``: its own nominal quota plus, for a Cohort, what each child puts in: ``child.subtree −
  child.guaranteed``;
- ``guaranteed``: what it keeps from its Cohort, ``max(0, subtree − lendingLimit)`` (0 without a lendingLimit);
- ``usage``: for a ClusterQueue the quota its workloads reserve; for a Cohort the children's usage past their
  guaranteed quota, ``Σ max(0, child.usage − child.guaranteed)``.

``available`` (what a new workload can get now) is ``subtree − usage`` at a root; below it, ``max(0, guaranteed −
usage)`` plus the parent's available, the latter capped by the borrowing limit at ``subtree − guaranteed −
max(0, usage − guaranteed) + borrowingLimit``. ``potential`` is the same with no usage anywhere: the largest
request the queue can ever admit. Every number is in the resource's Kueue units (GPUs for GPU resources).
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ..model import Node
from .model import (
    ClusterQueue,
    PodSet,
    PodSpec,
    QueueObjects,
    ResourceFlavor,
    ResourceGroup,
    Workload,
    quantity,
)

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
FR = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True)
class Limits:
    nominal: int = 0
    borrowing: int | None = None  # None: no limit
    lending: int | None = None  # None: lends all of it


@dataclass(eq=False)
class QuotaNode:
    """A ClusterQueue or a Cohort in the quota tree."""

    name: str
    kind: str  # "ClusterQueue" | "Cohort"
    quotas: dict[FR, Limits] = field(default_factory=dict)
    parent: QuotaNode | None = None
    children: list[QuotaNode] = field(default_factory=list)
    subtree: dict[FR, int] = field(default_factory=dict)
    usage: dict[FR, int] = field(default_factory=dict)

    def limits(self, fr: FR) -> Limits:
        return self.quotas.get(fr, _NO_LIMITS)

    def guaranteed(self, fr: FR) -> int:
        """The quota this node keeps from its Cohort: ``max(0, subtree − lendingLimit)``, 0 without one."""
        lending = self.limits(fr).lending
        if lending is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - lending)

    def lendable(self, fr: FR) -> int:
        """What this node puts into its Cohort: ``subtree − guaranteed``."""
        return self.subtree.get(fr, 0) - self.guaranteed(fr)

    def local_available(self, fr: FR) -> int:
        return max(0, self.guaranteed(fr) - self.usage.get(fr, 0))

    def available(self, fr: FR) -> int:
        """Kueue's ``available``: may be negative after over-admission (``Available`` clamps it at 0)."""
        if self.parent is None:
            return self.subtree.get(fr, 0) - self.usage.get(fr, 0)
        from_parent = self.parent.available(fr)
        borrowing = self.limits(fr).borrowing
        if borrowing is not None:
            stored_in_parent = self.subtree.get(fr, 0) - self.guaranteed(fr)
            used_in_parent = max(0, self.usage.get(fr, 0) - self.guaranteed(fr))
            from_parent = min(stored_in_parent - used_in_parent + borrowing, from_parent)
        return self.local_available(fr) + from_parent

    def potential(self, fr: FR) -> int:
        """Kueue's ``potentialAvailable``: the most this node could ever get, with no usage anywhere."""
        if self.parent is None:
            return self.subtree.get(fr, 0)
        most = self.guaranteed(fr) + self.parent.potential(fr)
        borrowing = self.limits(fr).borrowing
        if borrowing is not None:
            most = min(self.subtree.get(fr, 0) + borrowing, most)
        return most

    def potential_unlimited(self, fr: FR) -> int:
        """``potential`` as if this node had no borrowing limit (to tell an unreachable limit)."""
        if self.parent is None:
            return self.subtree.get(fr, 0)
        return self.guaranteed(fr) + self.parent.potential(fr)

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def leaves(self) -> Iterable[QuotaNode]:
        if self.kind == "ClusterQueue":
            yield self
        for child in self.children:
            yield from child.leaves()

    def ancestors(self) -> list[QuotaNode]:
        out = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out


_NO_LIMITS = Limits()


def resource_quotas(groups: Iterable[ResourceGroup]) -> dict[FR, Limits]:
    out: dict[FR, Limits] = {}
    for group in groups:
        for flavor in group.flavors:
            for res in flavor.resources:
                out[(flavor.name, res.name)] = Limits(
                    nominal=quantity(res.nominal_quota, res.name),
                    borrowing=None if res.borrowing_limit is None else quantity(res.borrowing_limit, res.name),
                    lending=None if res.lending_limit is None else quantity(res.lending_limit, res.name),
                )
    return out


# --- what a workload asks ---------------------------------------------------------------------------------


def pod_requests(spec: PodSpec) -> dict[str, int]:
    """One pod's requests as Kueue totals them: the sum over containers (a request, else its limit), at least
    each init container's, plus the pod overhead."""
    total: dict[str, int] = {}
    for container in spec.containers:
        _add(total, container.resources.requests or container.resources.limits, container.resources.limits)
    for init in spec.init_containers:
        mine: dict[str, int] = {}
        _add(mine, init.resources.requests or init.resources.limits, init.resources.limits)
        for name, value in mine.items():
            if value > total.get(name, 0):
                total[name] = value
    for name, value in spec.overhead.items():
        total[name] = total.get(name, 0) + quantity(value, name)
    return total


def _add(total: dict[str, int], requests: Mapping, limits: Mapping) -> None:
    for name, value in requests.items():
        total[name] = total.get(name, 0) + quantity(value, name)
    for name, value in limits.items():  # a limit alone is the request (extended resources must say both)
        if name not in requests:
            total[name] = total.get(name, 0) + quantity(value, name)


def podset_requests(pod_set: PodSet) -> dict[str, int]:
    """The whole pod set's requests: one pod's × ``count``."""
    return {name: value * pod_set.count for name, value in pod_requests(pod_set.template.spec).items()}


def workload_gpus(workload: Workload) -> dict[str, int]:
    """GPUs asked by the whole workload, per GPU resource."""
    out: dict[str, int] = {}
    for pod_set in workload.spec.pod_sets:
        per_pod = pod_requests(pod_set.template.spec)
        for resource in GPU_RESOURCES:
            value = per_pod.get(resource)
            if value:
                out[resource] = out.get(resource, 0) + value * pod_set.count
    return out


def reserved_usage(workload: Workload) -> dict[FR, int]:
    """What an admitted workload holds, from its ``status.admission`` (as Kueue's cache counts it)."""
    out: dict[FR, int] = {}
    admission = workload.status.admission
    if admission is None:
        return out
    for assignment in admission.pod_set_assignments:
        for resource, value in assignment.resource_usage.items():
            flavor = assignment.flavors.get(resource)
            if flavor is None:
                continue
            key = (flavor, resource)
            out[key] = out.get(key, 0) + quantity(value, resource)
    return out


# --- the fleet, indexed --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CohortIssue:
    cohort: str
    detail: str


class Fleet:
    """The Kueue objects of a Snapshot, indexed, with the quota tree built and usage added (once)."""

    def __init__(self, queues: QueueObjects, nodes: tuple[Node, ...], resources: Iterable[str] | None = None):
        """``resources``: count usage of these resources only (`queues usage` needs the GPUs alone; it keeps
        no list of the quota-reserving workloads either); None: all (what `explain workload` needs to assign
        every resource group). The workloads may be ``WorkloadHead``s where only usage is asked for."""
        self.queues = queues
        self.resources = None if resources is None else tuple(resources)
        self.nodes = nodes
        self.flavors: dict[str, ResourceFlavor] = {f.name: f for f in queues.flavors}
        self.cluster_queues: dict[str, ClusterQueue] = {cq.name: cq for cq in queues.cluster_queues}
        self.local_queues = {lq.key: lq for lq in queues.local_queues}
        self.priority_classes = {pc.name: pc.value for pc in queues.priority_classes}
        self.issues: list[CohortIssue] = []
        self.memo: dict[str, dict] = {}  # caches of the reports (values that depend on nothing but the fleet)
        self.nodes_by_name: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self._build_tree()
        for root in self._roots():
            _pool_quotas(root)
        self.admitted: dict[str, dict[FR, int]] = {}  # ClusterQueue -> flavor/resource -> admitted
        self.reserving: dict[str, list[Workload]] = {}  # ClusterQueue -> its quota-reserving workloads (resources None)
        self.pending: dict[str, list[Workload]] = {}  # ClusterQueue -> its pending workloads
        self.unqueued: list[Workload] = []  # pending workloads whose LocalQueue or ClusterQueue is missing
        self._add_workloads()
        for root in self._roots():
            _pool_usage(root)

    # --- building --------------------------------------------------------------------------------------

    def _cohort(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:
            node = self.cohorts[name] = QuotaNode(name, "Cohort")
        return node

    def _build_tree(self) -> None:
        for cohort in self.queues.cohorts:
            self._cohort(cohort.name).quotas = resource_quotas(cohort.spec.resource_groups)
        for cohort in self.queues.cohorts:
            if cohort.spec.parent:
                child, parent = self._cohort(cohort.name), self._cohort(cohort.spec.parent)
                if child is parent or child in _chain(parent):
                    self.issues.append(CohortIssue(cohort.name, f"Cohort {cohort.name} is its own ancestor "
                                                   f"(parent {cohort.spec.parent}): Kueue admits nothing in it"))
                    continue
                child.parent = parent
                parent.children.append(child)
        for cq in self.queues.cluster_queues:
            node = QuotaNode(cq.name, "ClusterQueue", quotas=resource_quotas(cq.spec.resource_groups))
            node.subtree = {fr: limits.nominal for fr, limits in node.quotas.items()}
            self.nodes_by_name[cq.name] = node
            if cq.spec.cohort:
                parent = self._cohort(cq.spec.cohort)
                node.parent = parent
                parent.children.append(node)

    def _roots(self) -> list[QuotaNode]:
        return [c for c in self.cohorts.values() if c.parent is None]

    def _add_workloads(self) -> None:
        """One tight pass over every workload (the hot loop of `queues usage` on 50,000 of them): what each holds
        in its ClusterQueue, and which queue each pending one waits in. What they hold is tallied first by
        (ClusterQueue, admitted, flavor, resource, quantity as written), then each distinct quantity is parsed
        once: many workloads hold the same few sizes."""
        only = self.resources
        nodes = self.nodes_by_name
        cluster_queues = self.cluster_queues
        local_to_cq = {key: lq.spec.cluster_queue for key, lq in self.local_queues.items()}
        reserving, pending_by, unqueued = self.reserving, self.pending, self.unqueued
        keep = only is None  # `explain` reads the reserving workloads; `queues usage` needs only their sums
        held: dict[tuple[str, bool, str, str, object], int] = {}
        for workload in self.queues.workloads:
            status = workload.status
            # Workload.state(), inlined: this loop visits every Workload (bench/bench_queues.py). Keep the two in step.
            reserved = admitted = finished = False
            for condition in status.conditions:
                kind = condition.type
                if kind == "QuotaReserved":
                    reserved = condition.status == "True"
                elif kind == "Admitted":
                    admitted = condition.status == "True"
                elif kind == "Finished":
                    finished = condition.status == "True"
            admission = status.admission
            if reserved and not finished and admission is not None:
                cq = admission.cluster_queue
                if keep:
                    reserving.setdefault(cq, []).append(workload)
                for assigned in admission.pod_set_assignments:
                    flavors = assigned.flavors
                    resource_usage = assigned.resource_usage
                    for resource in resource_usage if only is None else only:
                        value = resource_usage.get(resource)
                        if value is None:
                            continue
                        flavor = flavors.get(resource)
                        if flavor is None:
                            continue
                        key = (cq, admitted, flavor, resource, value)
                        held[key] = held.get(key, 0) + 1
            elif workload.spec.active and not finished:
                if admission is not None and admission.cluster_queue:
                    name = admission.cluster_queue
                else:
                    name = local_to_cq.get(f"{workload.metadata.namespace}/{workload.spec.queue_name}")
                if name is None or name not in cluster_queues:
                    unqueued.append(workload)
                else:
                    found = pending_by.get(name)
                    if found is None:
                        pending_by[name] = [workload]
                    else:
                        found.append(workload)
        admitted_by = self.admitted
        for (cq, admitted, flavor, resource, value), times in held.items():
            amount = quantity(value, resource) * times
            key = (flavor, resource)
            node = nodes.get(cq)
            if node is not None:
                node.usage[key] = node.usage.get(key, 0) + amount
            if admitted:
                counted = admitted_by.setdefault(cq, {})
                counted[key] = counted.get(key, 0) + amount

    # --- questions ---------------------------------------------------------------------------------------

    def cluster_queue_of(self, workload: Workload) -> ClusterQueue | None:
        """Where a workload goes: its admission's ClusterQueue, else its LocalQueue's."""
        admission = workload.status.admission
        if admission is not None and admission.cluster_queue:
            return self.cluster_queues.get(admission.cluster_queue)
        local = self.local_queues.get(f"{workload.namespace}/{workload.spec.queue_name}")
        if local is None:
            return None
        return self.cluster_queues.get(local.spec.cluster_queue)

    def priority(self, workload: Workload) -> int:
        """``spec.priority`` (Kueue's webhook fills it from the priority class), else the class's value, else 0."""
        if workload.spec.priority is not None:
            return workload.spec.priority
        return self.priority_classes.get(workload.spec.priority_class_name, 0)

    @cached_property
    def node_labels_index(self) -> list[tuple[Node, dict[str, str]]]:
        return [(node, node.metadata.labels) for node in self.nodes]

    def flavor_nodes(self, flavor: str) -> list[Node]:
        """The nodes a flavor's ``nodeLabels`` select (every node for a flavor without labels; none for a
        flavor that does not exist)."""
        found = self._flavor_nodes.get(flavor)
        if found is None:
            rf = self.flavors.get(flavor)
            found = [] if rf is None else [n for n, labels in self.node_labels_index if rf.selects(labels)]
            self._flavor_nodes[flavor] = found
        return found

    @cached_property
    def _flavor_nodes(self) -> dict[str, list[Node]]:
        return {}

    def schedulable_nodes(self, flavor: str) -> list[Node]:
        found = self._schedulable.get(flavor)
        if found is None:
            found = self._schedulable[flavor] = [n for n in self.flavor_nodes(flavor) if n.schedulable]
        return found

    @cached_property
    def _schedulable(self) -> dict[str, list[Node]]:
        return {}

    def physical(self, flavor: str, resource: str) -> int:
        """GPUs (``allocatable`` of ``resource``) on the schedulable nodes the flavor selects."""
        key = (flavor, resource)
        found = self._physical.get(key)
        if found is None:
            found = self._physical[key] = sum(node_allocatable(n, resource) for n in self.schedulable_nodes(flavor))
        return found

    @cached_property
    def _physical(self) -> dict[FR, int]:
        return {}


def node_allocatable(node: Node, resource: str) -> int:
    value = node.status.allocatable.get(resource)
    return 0 if value is None else quantity(value, resource)


def _chain(node: QuotaNode) -> list[QuotaNode]:
    return [node, *node.ancestors()]


def _pool_quotas(cohort: QuotaNode) -> None:
    """``updateCohortResourceNode``, its quota half: a Cohort's subtree quota from its own quota and its
    children's (what they lend). Depends on no workload."""
    cohort.subtree = {fr: limits.nominal for fr, limits in cohort.quotas.items()}
    for child in cohort.children:
        if child.kind == "Cohort":
            _pool_quotas(child)
        for fr, quota in child.subtree.items():
            cohort.subtree[fr] = cohort.subtree.get(fr, 0) + quota - child.guaranteed(fr)


def _pool_usage(cohort: QuotaNode) -> None:
    """``updateCohortResourceNode``, its usage half: a Cohort's usage from its children's, past what each keeps
    (after ``_pool_quotas``)."""
    cohort.usage = {}
    for child in cohort.children:
        if child.kind == "Cohort":
            _pool_usage(child)
        for fr, used in child.usage.items():
            cohort.usage[fr] = cohort.usage.get(fr, 0) + max(0, used - child.guaranteed(fr))
