"""Which flavor Kueue would give each pod set of a workload now, and why every other flavor was ruled out
(Kueue v0.12 ``pkg/scheduler/flavorassigner``, default feature gates, flavors tried from the first).

Per pod set and resource group, the flavors are tried in the ClusterQueue's order. A flavor is ruled out when it
does not exist, when it has a NoSchedule/NoExecute taint the pod (or the flavor) does not tolerate, when the
pod's node selector/affinity (restricted to the group's label keys) does not match its ``nodeLabels``, or when the
request is larger than the most the queue could ever get there (``potential``). Otherwise the request either
fits what is ``available`` now, or is short by ``request − available`` ("N more needed"). Flavor fungibility
decides whether Kueue stops at a flavor that needs borrowing or preemption. The wording of every reason is
Kueue's own, so it can be compared with the Workload's ``QuotaReserved`` message.

Preemption is not simulated: a flavor where the request does not fit is "preempt" when the ClusterQueue's
policies could free quota there (``withinClusterQueue`` for a request within nominal quota, or borrowing
preemption), else "no fit"; only the choice under ``whenCanPreempt: Preempt`` depends on it. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..corev1 import untolerated
from .model import ClusterQueue, PodSpec, ResourceGroup, Workload, show_quantity
from .quota import FR, Fleet, QuotaNode, podset_requests

NO_FIT, PREEMPT, FIT = 0, 1, 2
MODE_NAMES = {NO_FIT: "NoFit", PREEMPT: "Preempt", FIT: "Fit"}

# How a flavor fared for one pod set.
EXCLUDED = "Excluded"  # not found, untolerated taint, node affinity: Kueue never considers it
TOO_BIG = "TooBig"  # larger than the queue's maximum capacity in this flavor
SHORT = "Insufficient"  # fits the capacity, not what is unused now
FITS = "Fits"
FITS_BORROWING = "FitsByBorrowing"


@dataclass(frozen=True)
class ResourceTry:
    resource: str
    request: int  # this pod set's request plus earlier pod sets' in the same flavor
    available: int
    maximum: int  # potential: the most the queue could ever get here
    nominal: int
    borrows: bool

    @property
    def shortfall(self) -> int:
        return max(0, self.request - self.available)


@dataclass(frozen=True)
class FlavorTry:
    flavor: str
    verdict: str
    mode: int
    reasons: tuple[str, ...] = ()
    resources: tuple[ResourceTry, ...] = ()

    @property
    def borrows(self) -> bool:
        return any(r.borrows for r in self.resources)


@dataclass(frozen=True)
class PodSetChoice:
    pod_set: str
    count: int
    requests: dict[str, int]  # the whole pod set (per pod × count)
    tries: tuple[FlavorTry, ...]  # every flavor looked at, in order, over every resource group
    flavors: dict[str, str]  # resource -> flavor Kueue would assign (best found), empty when none
    mode: int  # NO_FIT, PREEMPT or FIT
    reasons: tuple[str, ...]  # Kueue's reasons for this pod set, sorted as Kueue sorts them
    unavailable: tuple[str, ...] = ()  # requested resources no resource group covers

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


@dataclass(frozen=True)
class Assignment:
    cluster_queue: str
    pod_sets: tuple[PodSetChoice, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return bool(self.pod_sets) and all(p.mode == FIT for p in self.pod_sets)

    @property
    def message(self) -> str:
        """What Kueue writes into ``QuotaReserved=False`` (``Assignment.Message``)."""
        parts = [f"couldn't assign flavors to pod set {p.pod_set}: {p.message}" for p in self.pod_sets if p.reasons]
        return "; ".join(parts)


def group_of(cq: ClusterQueue, resource: str) -> ResourceGroup | None:
    for group in cq.spec.resource_groups:
        if resource in group.covered_resources:
            return group
    return None


def assign(fleet: Fleet, workload: Workload, cq: ClusterQueue) -> Assignment:
    """Kueue's flavor assignment of ``workload`` in ``cq`` against the fleet's current usage."""
    node = fleet.nodes_by_name[cq.name]
    usage_so_far: dict[FR, int] = {}
    choices: list[PodSetChoice] = []
    covers_pods = group_of(cq, "pods") is not None
    for pod_set in workload.spec.pod_sets:
        requests = podset_requests(pod_set)
        if covers_pods:
            requests["pods"] = pod_set.count
        spec = pod_set.template.spec
        flavors: dict[str, str] = {}
        tries: list[FlavorTry] = []
        reasons: list[str] = []
        unavailable: list[str] = []
        mode = FIT
        failed = False
        for resource in sorted(requests):
            if resource in flavors:
                continue
            group = group_of(cq, resource)
            if group is None:
                reasons.append(f"resource {resource} unavailable in ClusterQueue")
                unavailable.append(resource)
                failed = True
                break
            chosen, group_mode, group_tries, group_reasons = _flavor_for_group(
                fleet, cq, node, group, spec, {r: v for r, v in requests.items() if r in group.covered_resources},
                usage_so_far,
            )
            tries.extend(group_tries)
            reasons.extend(group_reasons)
            if chosen is None:
                failed = True
                mode = NO_FIT
                break
            for resource_name in group.covered_resources:
                if resource_name in requests:
                    flavors[resource_name] = chosen
            mode = min(mode, group_mode)
        if failed:
            flavors = {}
            mode = NO_FIT
        for resource, flavor in flavors.items():
            key = (flavor, resource)
            usage_so_far[key] = usage_so_far.get(key, 0) + requests[resource]
        choices.append(PodSetChoice(pod_set.name, pod_set.count, requests, tuple(tries), flavors, mode,
                                    tuple(sorted(reasons)), tuple(unavailable)))
        if failed:
            break  # Kueue stops at the first pod set that gets no flavor
    return Assignment(cq.name, tuple(choices))


def _flavor_for_group(
    fleet: Fleet,
    cq: ClusterQueue,
    node: QuotaNode,
    group: ResourceGroup,
    spec: PodSpec,
    requests: dict[str, int],
    usage_so_far: dict[FR, int],
) -> tuple[str | None, int, list[FlavorTry], list[str]]:
    """``findFlavorForPodSetResource``: (flavor, mode, every flavor tried, reasons) for one resource group."""
    label_keys = {key for f in group.flavors for key in node_labels_of(fleet, f.name)}
    tries: list[FlavorTry] = []
    reasons: list[str] = []
    best: str | None = None
    best_mode = NO_FIT
    fungibility = cq.spec.flavor_fungibility
    for flavor_quotas in group.flavors:
        name = flavor_quotas.name
        flavor = fleet.flavors.get(name)
        if flavor is None:
            reason = f"flavor {name} not found"
            reasons.append(reason)
            tries.append(FlavorTry(name, EXCLUDED, NO_FIT, (reason,)))
            continue
        taint = untolerated(flavor.spec.node_taints, (*spec.tolerations, *flavor.spec.tolerations))
        if taint is not None:
            reason = f"untolerated taint {taint} in flavor {name}"
            reasons.append(reason)
            tries.append(FlavorTry(name, EXCLUDED, NO_FIT, (reason,)))
            continue
        if not affinity_matches(spec, label_keys, flavor.spec.node_labels):
            reason = f"flavor {name} doesn't match node affinity"
            reasons.append(reason)
            tries.append(FlavorTry(name, EXCLUDED, NO_FIT, (reason,)))
            continue
        mode = FIT
        mine: list[str] = []
        checked: list[ResourceTry] = []
        for resource in sorted(requests):
            fr = (name, resource)
            value = requests[resource] + usage_so_far.get(fr, 0)
            available = max(0, node.available(fr))
            maximum = node.potential(fr)
            limits = node.limits(fr)
            # FindHeightOfLowestSubtreeThatFits: borrowing = past its nominal quota, in a cohort
            borrows = node.parent is not None and node.usage.get(fr, 0) + value > limits.nominal
            checked.append(ResourceTry(resource, value, available, maximum, limits.nominal, borrows))
            if value > maximum:
                mine.append(f"insufficient quota for {resource} in flavor {name}, request > maximum capacity "
                            f"({show_quantity(value, resource)} > {show_quantity(maximum, resource)})")
                mode = NO_FIT
                break
            if value <= available:
                continue
            mine.append(f"insufficient unused quota for {resource} in flavor {name}, "
                        f"{show_quantity(value - available, resource)} more needed")
            could_preempt = value <= limits.nominal and cq.spec.preemption.within_cluster_queue != "Never"
            could_preempt = could_preempt or _can_preempt_while_borrowing(cq) or (
                value <= limits.nominal and cq.spec.preemption.reclaim_within_cohort != "Never")
            mode = min(mode, PREEMPT if could_preempt else NO_FIT)
        reasons.extend(mine)
        needs_borrowing = any(r.borrows for r in checked)
        if mode == FIT:
            verdict = FITS_BORROWING if needs_borrowing else FITS
        elif checked and checked[-1].request > checked[-1].maximum:
            verdict = TOO_BIG
        else:
            verdict = SHORT
        tries.append(FlavorTry(name, verdict, mode, tuple(mine), tuple(checked)))
        if not _try_next(mode, fungibility.when_can_borrow, fungibility.when_can_preempt, needs_borrowing):
            return name, mode, tries, ([] if mode == FIT else reasons)
        if mode > best_mode:
            best, best_mode = name, mode
    if best_mode == FIT:
        return best, best_mode, tries, []
    return best, best_mode, tries, reasons


def _try_next(mode: int, when_can_borrow: str, when_can_preempt: str, needs_borrowing: bool) -> bool:
    """Kueue's ``shouldTryNextFlavor``."""
    if mode == PREEMPT and when_can_preempt == "Preempt" and (not needs_borrowing or when_can_borrow == "Borrow"):
        return False
    if mode == FIT and needs_borrowing and when_can_borrow == "Borrow":
        return False
    return not (mode == FIT and not needs_borrowing)


def _can_preempt_while_borrowing(cq: ClusterQueue) -> bool:
    borrow = cq.spec.preemption.borrow_within_cohort
    return borrow is not None and borrow.policy != "Never"


def node_labels_of(fleet: Fleet, flavor: str) -> dict[str, str]:
    found = fleet.flavors.get(flavor)
    return {} if found is None else found.spec.node_labels


def affinity_matches(spec: PodSpec, label_keys: set[str], node_labels: dict[str, str]) -> bool:
    """``flavorSelector``: the pod's nodeSelector and required node affinity, keeping only the keys the
    group's flavors label, matched against the flavor's ``nodeLabels``."""
    for key, want in spec.node_selector.items():
        if key in label_keys and node_labels.get(key) != want:
            return False
    affinity = spec.affinity
    required = None
    if affinity is not None and affinity.node_affinity is not None:
        required = affinity.node_affinity.required_during_scheduling_ignored_during_execution
    if required is None or not required.node_selector_terms:
        return True
    terms = []
    for term in required.node_selector_terms:
        kept = [e for e in term.match_expressions if e.key in label_keys]
        if not kept:
            return True  # a term with no relevant key matches every flavor (the terms are ORed)
        terms.append(kept)
    return any(all(e.matches(node_labels) for e in term) for term in terms)
