"""The `queues usage` report: per ClusterQueue × flavor × GPU resource, Kueue's quota (nominal, borrowing and
lending limits), what is reserved and admitted, the pending demand, the headroom within the queue and what the
Cohort can lend now, and the physical GPUs of the nodes the flavor selects; per Cohort, its pooled quota; and
findings. Every number is in GPUs. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..model import Snapshot
from .assign import assign
from .model import ClusterQueue, Workload
from .quota import FR, GPU_RESOURCES, Fleet, QuotaNode, node_allocatable, podset_requests

MISSING_CLUSTER_QUEUE = "MissingClusterQueue"
MISSING_LOCAL_QUEUE = "MissingLocalQueue"
MISSING_FLAVOR = "MissingFlavor"
FLAVOR_SELECTS_NO_NODE = "FlavorSelectsNoNode"
UNBACKED_QUOTA = "UnbackedQuota"
UNREACHABLE_BORROWING_LIMIT = "UnreachableBorrowingLimit"
COHORT_CYCLE = "CohortCycle"
FINDING_KINDS = (MISSING_CLUSTER_QUEUE, MISSING_LOCAL_QUEUE, MISSING_FLAVOR, FLAVOR_SELECTS_NO_NODE, UNBACKED_QUOTA,
                 UNREACHABLE_BORROWING_LIMIT, COHORT_CYCLE)


@dataclass(frozen=True)
class QueueFinding:
    kind: str
    object: str  # "Kind name" or "Kind namespace/name"
    detail: str
    # What it concerns, for --flavor and --cohort (not in the JSON): a flavor, the queues' or cohort's names.
    flavor: str | None = field(default=None, compare=False)
    cohorts: frozenset[str] = field(default=frozenset(), compare=False)

    def to_json(self) -> dict:
        return {"kind": self.kind, "object": self.object, "detail": self.detail}


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

    def to_json(self) -> dict:
        return {
            "clusterQueue": self.cluster_queue,
            "cohort": self.cohort or None,
            "flavor": self.flavor,
            "resource": self.resource,
            "nominalQuota": self.nominal,
            "borrowingLimit": self.borrowing_limit,
            "lendingLimit": self.lending_limit,
            "reserved": self.reserved,
            "admitted": self.admitted,
            "pending": self.pending,
            "pendingWorkloads": self.pending_workloads,
            "headroom": self.headroom,
            "cohortCanLend": self.cohort_can_lend,
            "available": self.available,
            "maximum": self.maximum,
            "nodes": self.nodes,
            "nodeGPUs": self.node_gpus,
            "kueueReserved": self.kueue_reserved,
            "kueueAdmitted": self.kueue_admitted,
        }


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

    def to_json(self) -> dict:
        return {"cohort": self.cohort, "parent": self.parent or None, "flavor": self.flavor,
                "resource": self.resource, "nominalQuota": self.nominal, "pooled": self.pooled, "used": self.used,
                "free": self.free}


@dataclass(frozen=True)
class QueuesUsage:
    rows: list[QueueRow]
    cohorts: list[CohortRow]
    findings: list[QueueFinding]

    def to_json(self) -> dict:
        return {
            "clusterQueues": [r.to_json() for r in self.rows],
            "cohorts": [c.to_json() for c in self.cohorts],
            "findings": [f.to_json() for f in self.findings],
        }


def queues_usage(snapshot: Snapshot, *, cohort: str | None = None, flavor: str | None = None) -> QueuesUsage:
    """The report over the whole snapshot, then the rows asked for: ``cohort`` keeps the ClusterQueues in that
    Cohort's tree, ``flavor`` the rows of that flavor; the arithmetic always covers everything."""
    fleet = Fleet(snapshot.queues, snapshot.nodes)
    pending = _pending_by_flavor(fleet)
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
    findings = [f for f in findings_of(fleet) if _concerns(f, cohort, flavor)]
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
    nodes = [n for n in fleet.flavor_nodes(fr[0]) if n.schedulable]
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
        nodes=len(nodes),
        node_gpus=sum(node_allocatable(n, fr[1]) for n in nodes),
        kueue_reserved=_status_total(cq.status.flavors_reservation, fr),
        kueue_admitted=_status_total(cq.status.flavors_usage, fr),
    )


def _status_total(usages, fr: FR) -> int | None:
    from .model import quantity

    for usage in usages:
        if usage.name == fr[0]:
            for resource in usage.resources:
                if resource.name == fr[1]:
                    return quantity(resource.total, fr[1])
    return None


def _pending_by_flavor(fleet: Fleet) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(ClusterQueue, flavor, resource) -> (GPUs, workloads) of the pending workloads, each counted once, at the
    flavor Kueue would give it now, else the first flavor it could ever fit (where it waits for quota)."""
    out: dict[tuple[str, str, str], list[int]] = {}
    memo: dict[tuple, list[tuple[str, str, int]]] = {}
    for cq_name, workloads in fleet.pending.items():
        cq = fleet.cluster_queues[cq_name]
        for workload in workloads:
            key = _shape(cq_name, workload)
            places = memo.get(key) if key is not None else None
            if places is None:
                places = _places(fleet, workload, cq)
                if key is not None:
                    memo[key] = places
            seen = set()
            for flavor, resource, gpus in places:
                entry = out.setdefault((cq_name, flavor, resource), [0, 0])
                entry[0] += gpus
                if (flavor, resource) not in seen:
                    entry[1] += 1
                    seen.add((flavor, resource))
    return {k: (v[0], v[1]) for k, v in out.items()}


def _shape(cq: str, workload: Workload) -> tuple | None:
    """What the flavor choice of a plain workload depends on (pod sets without selectors or tolerations): two
    workloads of one shape in one queue get the same answer, computed once."""
    parts: list = [cq]
    for pod_set in workload.spec.pod_sets:
        spec = pod_set.template.spec
        if spec.node_selector or spec.tolerations or spec.affinity is not None or spec.init_containers or spec.overhead:
            return None
        parts.append(pod_set.count)
        for container in spec.containers:
            parts.append(tuple(container.resources.requests.items()))
            parts.append(tuple(container.resources.limits.items()))
        parts.append(None)
    return tuple(parts)


def _places(fleet: Fleet, workload: Workload, cq: ClusterQueue) -> list[tuple[str, str, int]]:
    assignment = assign(fleet, workload, cq)
    places = []
    by_name = {p.name: p for p in workload.spec.pod_sets}
    for choice in assignment.pod_sets:
        requests = choice.requests
        for resource in GPU_RESOURCES:
            gpus = requests.get(resource, 0)
            if not gpus:
                continue
            flavor = choice.flavors.get(resource) or _waiting_flavor(choice, resource)
            if flavor is not None:
                places.append((flavor, resource, gpus))
    # Pod sets after one that got no flavor were not looked at: count them at their first flavor with quota.
    for pod_set in workload.spec.pod_sets[len(assignment.pod_sets):]:
        requests = podset_requests(by_name[pod_set.name])
        for resource in GPU_RESOURCES:
            if requests.get(resource):
                keys = [fr for fr in _gpu_keys(cq) if fr[1] == resource]
                if keys:
                    places.append((keys[0][0], resource, requests[resource]))
    return places


def _waiting_flavor(choice, resource: str) -> str | None:
    """The first flavor where the request fits the capacity but not what is unused now, else the first flavor
    tried for the resource."""
    first = None
    for attempt in choice.tries:
        if not any(r.resource == resource for r in attempt.resources):
            continue
        if first is None:
            first = attempt.flavor
        if attempt.verdict in ("Insufficient", "Fits", "FitsByBorrowing"):
            return attempt.flavor
    return first


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


# --- findings -------------------------------------------------------------------------------------------------


def findings_of(fleet: Fleet) -> list[QueueFinding]:
    found: list[QueueFinding] = []
    queues = fleet.queues
    for local in queues.local_queues:
        if local.spec.cluster_queue not in fleet.cluster_queues:
            found.append(QueueFinding(MISSING_CLUSTER_QUEUE, f"LocalQueue {local.key}",
                                      f"points at ClusterQueue {local.spec.cluster_queue or '(none)'}, which does "
                                      "not exist: its workloads wait for ever"))
    for workload in fleet.unqueued:
        local_key = f"{workload.namespace}/{workload.spec.queue_name}"
        if local_key not in fleet.local_queues:
            found.append(QueueFinding(MISSING_LOCAL_QUEUE, f"Workload {workload.key}",
                                      f"names LocalQueue {workload.spec.queue_name or '(none)'}, which does not "
                                      f"exist in namespace {workload.namespace}"))
    named: dict[str, list[str]] = {}
    for cq in queues.cluster_queues:
        for group in cq.spec.resource_groups:
            for flavor in group.flavors:
                named.setdefault(flavor.name, []).append(cq.name)
    for flavor_name, cqs in sorted(named.items()):
        if flavor_name not in fleet.flavors:
            found.append(QueueFinding(MISSING_FLAVOR, f"ResourceFlavor {flavor_name}",
                                      f"does not exist but ClusterQueue {', '.join(sorted(set(cqs)))} gives quota "
                                      "in it: Kueue admits nothing there", flavor=flavor_name,
                                      cohorts=_cohorts_of(fleet, cqs)))
    for flavor in queues.flavors:
        if not [n for n in fleet.flavor_nodes(flavor.name) if n.schedulable]:
            labels = ",".join(f"{k}={v}" for k, v in sorted(flavor.spec.node_labels.items())) or "(none)"
            found.append(QueueFinding(FLAVOR_SELECTS_NO_NODE, f"ResourceFlavor {flavor.name}",
                                      f"nodeLabels {labels} select no schedulable node: pods admitted in it "
                                      "cannot start", flavor=flavor.name,
                                      cohorts=_cohorts_of(fleet, named.get(flavor.name, ()))))
    found.extend(_unbacked(fleet))
    found.extend(_unreachable(fleet))
    for issue in fleet.issues:
        found.append(QueueFinding(COHORT_CYCLE, f"Cohort {issue.cohort}", issue.detail,
                                  cohorts=frozenset({issue.cohort})))
    rank = {kind: i for i, kind in enumerate(FINDING_KINDS)}
    return sorted(found, key=lambda f: (rank.get(f.kind, len(rank)), f.object, f.detail))


def _unbacked(fleet: Fleet) -> Iterable[QueueFinding]:
    """Quota (ClusterQueues' and Cohorts' nominal, per flavor and GPU resource) beyond the GPUs of the
    schedulable nodes the flavor selects."""
    quota: dict[FR, int] = {}
    givers: dict[FR, list[str]] = {}
    for node in [*fleet.nodes_by_name.values(), *fleet.cohorts.values()]:
        for fr, limits in node.quotas.items():
            if fr[1] in GPU_RESOURCES and limits.nominal > 0:
                quota[fr] = quota.get(fr, 0) + limits.nominal
                givers.setdefault(fr, []).append(f"{node.kind} {node.name}")
    for fr in sorted(quota):
        physical = fleet.physical(*fr)
        if quota[fr] > physical:
            unbacked = quota[fr] - physical
            names = [g.partition(" ")[2] for g in givers[fr]]
            yield QueueFinding(
                UNBACKED_QUOTA, f"ResourceFlavor {fr[0]}",
                f"{quota[fr]} {fr[1]} of nominal quota ({', '.join(givers[fr])}) but its schedulable nodes "
                f"have {physical}: {unbacked} GPUs of quota no node backs",
                flavor=fr[0], cohorts=_cohorts_of(fleet, names) | frozenset(n for n in names if n in fleet.cohorts),
            )


def _unreachable(fleet: Fleet) -> Iterable[QueueFinding]:
    """A borrowing limit larger than the most the Cohort could ever lend (every other member idle)."""
    for name in sorted(fleet.nodes_by_name):
        node = fleet.nodes_by_name[name]
        for fr, limits in sorted(node.quotas.items()):
            if limits.borrowing is None or limits.borrowing == 0:
                continue
            if node.parent is None:
                yield QueueFinding(UNREACHABLE_BORROWING_LIMIT, f"ClusterQueue {name}",
                                   f"borrowingLimit {limits.borrowing} for {fr[1]} in flavor {fr[0]} but it is in "
                                   "no cohort: there is nobody to borrow from", flavor=fr[0])
                continue
            most = node.potential_unlimited(fr) - node.subtree.get(fr, 0)
            if limits.borrowing > most:
                yield QueueFinding(
                    UNREACHABLE_BORROWING_LIMIT, f"ClusterQueue {name}",
                    f"borrowingLimit {limits.borrowing} for {fr[1]} in flavor {fr[0]} but cohort "
                    f"{node.parent.name} can lend it at most {most} (its lending limits and quota): "
                    f"{limits.borrowing - most} of the limit are unreachable",
                    flavor=fr[0], cohorts=_cohorts_of(fleet, [name]),
                )


def _cohorts_of(fleet: Fleet, cluster_queues: Iterable[str]) -> frozenset[str]:
    """Every Cohort the ClusterQueues sit in, up to the roots."""
    out: set[str] = set()
    for name in cluster_queues:
        node = fleet.nodes_by_name.get(name)
        if node is not None:
            out.update(a.name for a in node.ancestors())
    return frozenset(out)


def _concerns(finding: QueueFinding, cohort: str | None, flavor: str | None) -> bool:
    """``--flavor`` keeps the findings about that flavor; ``--cohort`` those about that Cohort's tree."""
    if flavor is not None and finding.flavor != flavor:
        return False
    return cohort is None or cohort in finding.cohorts
