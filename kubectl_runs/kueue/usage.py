"""The `queues usage` report: per ClusterQueue × flavor × GPU resource, Kueue's quota (nominal, borrowing and
lending limits), what is reserved and admitted, the pending demand, the headroom within the queue and what the
Cohort can lend now, and the physical GPUs of the nodes the flavor selects; per Cohort, its pooled quota; and
findings. Every number is in GPUs. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Snapshot
from . import reports
from .assign import affinity_matches, group_of, node_labels_of, untolerated
from .model import ClusterQueue, decode_pod_sets, quantity
from .queue_findings import QueueFinding, concerns, findings_of
from .quota import FR, GPU_RESOURCES, Fleet, QuotaNode


@dataclass(frozen=True)
class QueueRow:
    """One ClusterQueue × flavor × GPU resource."""

    cluster_queue: str
    cohort: str
    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None  # None: no limit
    lending_limit: int | None  # None: lends all
    reserved: int  # quota reserved by workloads (admitted or not): what Kueue's cache counts
    admitted: int  # of which admitted
    pending: int  # GPUs of pending workloads whose first choice is this flavor
    pending_workloads: int
    headroom: int  # of what a new workload can get now, the part from the queue's own quota
    cohort_can_lend: int  # the rest of it: what the Cohort lends now
    maximum: int  # the largest request the queue can ever admit here (no usage anywhere)
    nodes: int  # schedulable nodes the flavor's nodeLabels select
    node_gpus: int  # their allocatable GPUs of this resource
    kueue_reserved: int | None  # ClusterQueue status.flavorsReservation, as Kueue wrote it (None: not written)
    kueue_admitted: int | None  # ClusterQueue status.flavorsUsage

    @property
    def available(self) -> int:
        return self.headroom + self.cohort_can_lend

    def entry(self) -> reports.QueueRowEntry:
        return reports.QueueRowEntry(
            cluster_queue=self.cluster_queue, cohort=self.cohort or None, flavor=self.flavor,
            resource=self.resource, nominal_quota=self.nominal, borrowing_limit=self.borrowing_limit,
            lending_limit=self.lending_limit, reserved=self.reserved, admitted=self.admitted, pending=self.pending,
            pending_workloads=self.pending_workloads, headroom=self.headroom, cohort_can_lend=self.cohort_can_lend,
            available=self.available, maximum=self.maximum, nodes=self.nodes, node_gpus=self.node_gpus,
            kueue_reserved=self.kueue_reserved, kueue_admitted=self.kueue_admitted,
        )


@dataclass(frozen=True)
class CohortRow:
    """One Cohort × flavor × GPU resource: the pool its members lend into."""

    cohort: str
    parent: str
    flavor: str
    resource: str
    nominal: int  # the Cohort's own quota
    pooled: int  # own quota plus what the members lend (subtree quota)
    used: int  # of the pool, in use by members past the quota they keep (guaranteed)
    free: int  # what is left to lend now (at a root; below a root, before the parent's limits)

    def entry(self) -> reports.CohortEntry:
        return reports.CohortEntry(cohort=self.cohort, parent=self.parent or None, flavor=self.flavor,
                                   resource=self.resource, nominal_quota=self.nominal, pooled=self.pooled,
                                   used=self.used, free=self.free)


@dataclass(frozen=True)
class QueuesUsage:
    rows: list[QueueRow]
    cohorts: list[CohortRow]
    findings: list[QueueFinding]

    @property
    def report(self) -> reports.QueuesUsageReport:
        """The value ``-o json|yaml`` prints (``reports.plain`` encodes it, as every report)."""
        return reports.QueuesUsageReport(
            cluster_queues=[r.entry() for r in self.rows],
            cohorts=[c.entry() for c in self.cohorts],
            findings=[f.entry() for f in self.findings],
        )


def queues_usage(snapshot: Snapshot, *, cohort: str | None = None, flavor: str | None = None) -> QueuesUsage:
    """The report over the whole snapshot, then the rows asked for: ``cohort`` keeps the ClusterQueues in that
    Cohort's tree, ``flavor`` the rows of that flavor; the arithmetic always covers everything."""
    fleet = Fleet(snapshot.queues, snapshot.nodes, resources=GPU_RESOURCES)
    pending = pending_demand(fleet)
    rows: list[QueueRow] = []
    for cq in sorted(snapshot.queues.cluster_queues, key=lambda c: c.name):
        node = fleet.nodes_by_name[cq.name]
        if cohort is not None and cohort not in {a.name for a in node.ancestors()}:
            continue
        for fr in _gpu_keys(cq):
            if flavor is not None and fr[0] != flavor:
                continue
            rows.append(_row(fleet, cq, node, fr, pending))
    cohorts = [
        row
        for row in _cohort_rows(fleet)
        if (cohort is None or cohort == row.cohort or cohort in _ancestor_names(fleet, row.cohort))
        and (flavor is None or row.flavor == flavor)
    ]
    findings = [f for f in findings_of(fleet) if concerns(f, cohort, flavor)]
    return QueuesUsage(rows, cohorts, findings)


def _gpu_keys(cq: ClusterQueue) -> list[FR]:
    """(flavor, GPU resource) of a ClusterQueue, in its own order (resource groups, then flavors)."""
    keys = []
    for group in cq.spec.resource_groups:
        for flavor in group.flavors:
            for resource in flavor.resources:
                if resource.name in GPU_RESOURCES:
                    keys.append((flavor.name, resource.name))
    return keys


def _row(fleet: Fleet, cq: ClusterQueue, node: QuotaNode, fr: FR, pending: dict) -> QueueRow:
    limits = node.limits(fr)
    reserved = node.usage.get(fr, 0)
    available = max(0, node.available(fr))
    own = min(available, max(0, limits.nominal - reserved))
    gpus, count = pending.get((cq.name, *fr), (0, 0))
    return QueueRow(
        cluster_queue=cq.name,
        cohort=cq.spec.cohort,
        flavor=fr[0],
        resource=fr[1],
        nominal=limits.nominal,
        borrowing_limit=limits.borrowing,
        lending_limit=limits.lending,
        reserved=reserved,
        admitted=fleet.admitted.get(cq.name, {}).get(fr, 0),
        pending=gpus,
        pending_workloads=count,
        headroom=own,
        cohort_can_lend=available - own,
        maximum=node.potential(fr),
        nodes=len(fleet.schedulable_nodes(fr[0])),
        node_gpus=fleet.physical(*fr),
        kueue_reserved=_status_total(cq.status.flavors_reservation, fr),
        kueue_admitted=_status_total(cq.status.flavors_usage, fr),
    )


def _status_total(usages, fr: FR) -> int | None:
    for usage in usages:
        if usage.name == fr[0]:
            for resource in usage.resources:
                if resource.name == fr[1]:
                    return quantity(resource.total, fr[1])
    return None


def pending_demand(fleet: Fleet) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(ClusterQueue, flavor, resource) -> (GPUs, workloads) of the pending workloads, each pod set's GPUs counted
    once: at the first flavor of the queue's order that its pods may use (no untolerated taint, node affinity
    matches) and that could ever hold the request (the queue's maximum capacity there, counting the workload's
    earlier pod sets in that flavor), else at the first flavor. That is where the demand waits for quota;
    `explain workload` shows Kueue's full assignment. A workload asking GPUs in a (flavor, resource) counts once
    there, however many of its pod sets do.

    The hot loop of `queues usage` (tens of thousands of pending workloads). Where no pod set of a workload has a
    node selector, node affinity or tolerations, where its GPUs go depends on nothing but its shape — per pod
    set, (resource, GPUs per pod as written, pods) — so the shapes are counted per queue and each distinct shape
    is placed once, weighed by its count; other workloads are placed one by one. (tests/unit/test_queues_usage_
    differential.py checks this against placing every workload by its own requests.)"""
    out: dict[tuple[str, str, str], tuple[int, int]] = {}
    for cq_name, workloads in fleet.pending.items():
        queue = _QueueDemand(fleet, cq_name)
        shapes: dict[tuple, int] = {}
        for workload in workloads:
            entries = _entries(decode_pod_sets(workload))
            if entries.__class__ is tuple:
                shapes[entries] = shapes.get(entries, 0) + 1
            else:
                queue.place(entries, 1)
        for shape, times in shapes.items():
            queue.place(shape, times)
        for (flavor, resource), (gpus, count) in queue.sums.items():
            out[(cq_name, flavor, resource)] = (gpus, count)
    return out


def _entries(pod_sets) -> tuple | list:
    """Per pod set and GPU resource: (resource, GPUs per pod as written, pods, the pod spec or None). A tuple (a
    shape: no spec in it) when no pod set has a node selector, node affinity or tolerations, else a list."""
    entries: list = []
    plain_all = True
    for pod_set in pod_sets:
        spec = pod_set.template.spec
        plain = not (spec.node_selector or spec.tolerations or spec.affinity is not None)
        if not plain:
            plain_all = False
        containers = spec.containers
        if len(containers) == 1 and not spec.init_containers and not spec.overhead:
            resources = containers[0].resources  # the common case: the quantities as written
            requests = resources.requests
            for resource in GPU_RESOURCES:
                value = requests.get(resource)
                if value is None:
                    value = resources.limits.get(resource)
                    if value is None:
                        continue
                entries.append((resource, value, pod_set.count, None if plain else spec))
        else:
            for resource, per_pod in _pod_gpus(spec).items():
                entries.append((resource, per_pod, pod_set.count, None if plain else spec))
    return tuple(entries) if plain_all else entries


class _QueueDemand:
    """The pending demand of one ClusterQueue."""

    def __init__(self, fleet: Fleet, cq_name: str) -> None:
        self.fleet = fleet
        self.cq = cq = fleet.cluster_queues[cq_name]
        self.node = fleet.nodes_by_name[cq_name]
        self.orders = {resource: _flavor_order(fleet, cq, resource) for resource in GPU_RESOURCES}
        # For a pod set with no node selector, affinity or tolerations: the flavors it may use, with the most the
        # queue could ever get in each (potential, which no usage changes).
        self.plain = {resource: [(name, _potential(fleet, self.node, (name, resource)))
                                 for name, usable, _keys in order if usable]
                      for resource, order in self.orders.items()}
        self.sums: dict[FR, list[int]] = {}  # (flavor, resource) -> [GPUs, workloads]

    def place(self, entries, times: int) -> None:
        """Add ``times`` workloads of these entries (``_entries``)."""
        sums, orders, plain = self.sums, self.orders, self.plain
        so_far: dict[FR, int] = {}  # GPUs of the workload's earlier pod sets per (flavor, resource)
        for resource, value, count, spec in entries:
            per_pod = quantity(value, resource)
            if not per_pod:
                continue
            order = orders[resource]
            if not order:
                continue
            gpus = per_pod * count
            if spec is None:  # _first_that_holds, inlined for a pod set with no selector, affinity or tolerations
                flavor = order[0][0]
                for name, most in plain[resource]:
                    if gpus + so_far.get((name, resource), 0) <= most:
                        flavor = name
                        break
            else:
                flavor = _first_that_holds(self.fleet, self.node, order, resource, gpus, so_far, spec)
            key = (flavor, resource)
            entry = sums.get(key)
            if entry is None:
                entry = sums[key] = [0, 0]
            entry[0] += gpus * times
            if key not in so_far:
                entry[1] += times
            so_far[key] = so_far.get(key, 0) + gpus


def _pod_gpus(spec) -> dict[str, int]:
    """GPUs per pod, per GPU resource (containers add up, a limit alone is the request; an init container counts
    by its maximum; the overhead adds on)."""
    out: dict[str, int] = {}
    for container in spec.containers:
        resources = container.resources
        requests = resources.requests
        for resource in requests.keys() & _GPU_SET:
            out[resource] = out.get(resource, 0) + quantity(requests[resource], resource)
        limits = resources.limits
        if limits:
            for resource in limits.keys() - requests.keys() & _GPU_SET:
                out[resource] = out.get(resource, 0) + quantity(limits[resource], resource)
    if spec.init_containers or spec.overhead:
        for init in spec.init_containers:
            for resource in GPU_RESOURCES:
                value = init.resources.requests.get(resource, init.resources.limits.get(resource))
                if value is not None:
                    out[resource] = max(out.get(resource, 0), quantity(value, resource))
        for resource in GPU_RESOURCES:
            if resource in spec.overhead:
                out[resource] = out.get(resource, 0) + quantity(spec.overhead[resource], resource)
    return out if all(out.values()) else {r: v for r, v in out.items() if v}


_GPU_SET = frozenset(GPU_RESOURCES)


def _flavor_order(fleet: Fleet, cq: ClusterQueue, resource: str) -> list[tuple[str, bool, set[str]]]:
    """The flavors of the resource group covering ``resource``, in order: (name, usable by a pod with no
    tolerations, the group's label keys)."""
    group = group_of(cq, resource)
    if group is None:
        return []
    keys = {key for f in group.flavors for key in node_labels_of(fleet, f.name)}
    order = []
    for f in group.flavors:
        flavor = fleet.flavors.get(f.name)
        usable = flavor is not None and untolerated(flavor.spec.node_taints, flavor.spec.tolerations) is None
        order.append((f.name, usable, keys))
    return order


def _first_that_holds(fleet: Fleet, node: QuotaNode, order, resource: str, gpus: int, so_far: dict[FR, int],
                      spec) -> str:
    """The flavor of a pod set whose pods have a node selector, node affinity or tolerations (``spec``)."""
    for name, _usable, keys in order:
        flavor = fleet.flavors.get(name)
        if flavor is None:
            continue
        if untolerated(flavor.spec.node_taints, (*spec.tolerations, *flavor.spec.tolerations)) is not None:
            continue
        if not affinity_matches(spec, keys, flavor.spec.node_labels):
            continue
        fr = (name, resource)
        if gpus + so_far.get(fr, 0) <= _potential(fleet, node, fr):
            return name
    return order[0][0]


def _potential(fleet: Fleet, node: QuotaNode, fr: FR) -> int:
    cache = fleet.memo.setdefault("potential", {})
    key = (node.name, fr)
    found = cache.get(key)
    if found is None:
        found = cache[key] = node.potential(fr)
    return found


# --- cohorts ------------------------------------------------------------------------------------------------


def _ancestor_names(fleet: Fleet, cohort: str) -> set[str]:
    node = fleet.cohorts.get(cohort)
    return set() if node is None else {a.name for a in node.ancestors()}


def _cohort_rows(fleet: Fleet) -> list[CohortRow]:
    rows = []
    for name in sorted(fleet.cohorts):
        node = fleet.cohorts[name]
        keys = sorted(fr for fr in node.subtree if fr[1] in GPU_RESOURCES)
        for fr in keys:
            rows.append(CohortRow(
                cohort=name,
                parent=node.parent.name if node.parent is not None else "",
                flavor=fr[0],
                resource=fr[1],
                nominal=node.limits(fr).nominal,
                pooled=node.subtree.get(fr, 0),
                used=node.usage.get(fr, 0),
                free=max(0, node.available(fr)),
            ))
    return rows
