"""The findings of `queues usage`: queue configuration that makes workloads wait for ever or quota that no node
backs (missing ClusterQueues, LocalQueues and flavors, flavors that select no node, unbacked quota, unreachable
borrowing limits, Cohort cycles), each with what it concerns for --flavor and --cohort. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import reports
from .quota import FR, GPU_RESOURCES, Fleet

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

    def entry(self) -> reports.QueueFindingEntry:
        return reports.QueueFindingEntry(self.kind, self.object, self.detail)


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
        if not fleet.schedulable_nodes(flavor.name):
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


def concerns(finding: QueueFinding, cohort: str | None, flavor: str | None) -> bool:
    """``--flavor`` keeps the findings about that flavor; ``--cohort`` those about that Cohort's tree."""
    if flavor is not None and finding.flavor != flavor:
        return False
    return cohort is None or cohort in finding.cohorts
