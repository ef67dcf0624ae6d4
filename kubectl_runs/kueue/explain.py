"""`explain workload NAME` (and `explain kaiwojob NAME`): why a Workload is pending, from Kueue's own arithmetic.

What it asks (pod sets and GPUs), the flavor it may use and why each other flavor was ruled out (Kueue's wording),
the shortfall split three ways — own quota, cohort borrowing, physical capacity in whole pods per node —, its
place among the ClusterQueue's pending workloads (priority, then creation time, as Kueue orders them under
BestEffortFIFO and StrictFIFO), Kueue's own condition quoted, and remedies that name objects.

kubectl-runs reads no Pods: the physical check places the pods of the workloads holding quota in a flavor
first-fit (largest first) on that flavor's schedulable nodes, then counts how many of this workload's pods fit
whole in what is left. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Node, Snapshot
from ..timeutil import rfc3339
from . import reports
from .assign import FITS, FITS_BORROWING, SHORT, Assignment, FlavorTry, PodSetChoice, assign
from .capacity import BeyondCapacity, beyond_capacity, never_admitted
from .model import KAIWO_NAME_LABEL, KAIWO_TYPE_LABEL, ClusterQueue, Workload, quantity
from .quota import FR, GPU_RESOURCES, Fleet, QuotaNode, node_allocatable, pod_requests
from .remedies import Remedy, capacity_remedies, queue_remedies, quota_remedies

ADMITTED, RESERVED, PENDING, FINISHED, INACTIVE = "Admitted", "QuotaReserved", "Pending", "Finished", "Inactive"


@dataclass(frozen=True)
class PodSetView:
    name: str
    count: int
    per_pod: dict[str, int]  # GPUs per pod, per GPU resource
    flavors: dict[str, str]  # resource -> flavor (admitted: Kueue's; pending: what Kueue would give now)

    def entry(self) -> reports.PodSetEntry:
        return reports.PodSetEntry(self.name, self.count, dict(self.per_pod),
                                   {r: n * self.count for r, n in self.per_pod.items()}, dict(self.flavors))


@dataclass(frozen=True)
class FlavorView:
    pod_set: str
    flavor: str
    verdict: str  # Fits, FitsByBorrowing, Insufficient, TooBig, Excluded
    reasons: tuple[str, ...]

    def entry(self) -> reports.FlavorEntry:
        return reports.FlavorEntry(self.pod_set, self.flavor, self.verdict, list(self.reasons))


@dataclass(frozen=True)
class Shortfall:
    """For one pod set's GPU resource in the flavor it may use (all in GPUs, pods where said)."""

    pod_set: str
    flavor: str
    resource: str
    needed: int  # the request (plus earlier pod sets' in the same flavor)
    nominal: int
    reserved: int  # the queue's reserved quota in this flavor
    own_free: int  # of what is available now, the part from its own quota
    cohort_free: int  # the part the cohort lends now
    borrowing_limit: int | None
    own_short: int  # short if it had only its own quota
    quota_short: int  # short after borrowing: Kueue's "N more needed"
    gpus_per_pod: int
    pods: int
    nodes: int  # schedulable nodes of the flavor
    pods_fit: int  # of its pods, how many fit whole on what the flavor's nodes have free
    physical_short: int  # GPUs: pods that do not fit × GPUs per pod

    @property
    def pods_short(self) -> int:
        return max(0, self.pods - self.pods_fit)

    def entry(self) -> reports.ShortfallEntry:
        return reports.ShortfallEntry(
            pod_set=self.pod_set, flavor=self.flavor, resource=self.resource, needed=self.needed,
            nominal_quota=self.nominal, reserved=self.reserved, own_free=self.own_free, cohort_free=self.cohort_free,
            borrowing_limit=self.borrowing_limit, own_quota_short=self.own_short, quota_short=self.quota_short,
            gpus_per_pod=self.gpus_per_pod, pods=self.pods, nodes=self.nodes, pods_fit=self.pods_fit,
            physical_short=self.physical_short,
        )


@dataclass(frozen=True)
class QueuePosition:
    position: int  # 1-based among the ClusterQueue's pending workloads
    pending: int
    ahead: tuple[str, ...]  # the workloads before it (at most a few are shown)
    gpus_ahead: int

    def entry(self) -> reports.PositionEntry:
        return reports.PositionEntry(self.position, self.pending, list(self.ahead), self.gpus_ahead)


@dataclass(frozen=True)
class WorkloadExplanation:
    workload: Workload
    state: str
    priority: int
    local_queue: str
    cluster_queue: str | None
    cohort: str
    kaiwo: str | None  # "KaiwoJob ns/name" when asked through Kaiwo
    pod_sets: tuple[PodSetView, ...]
    flavors: tuple[FlavorView, ...]
    may_use: dict[str, str]  # pod set -> flavor it may use ("" when none)
    assignment_message: str  # our QuotaReserved message, worded as Kueue words it
    kueue_message: str  # Kueue's own, quoted
    kueue_reason: str
    shortfalls: tuple[Shortfall, ...]
    position: QueuePosition | None
    remedies: tuple[Remedy, ...]
    notes: tuple[str, ...] = field(default=())
    beyond_capacity: tuple[BeyondCapacity, ...] = ()  # (pod set, flavor)s whose request the queue can never admit
    never_admitted: bool = False  # some pod set is beyond the maximum capacity in every flavor it could use

    @property
    def matches_kueue(self) -> bool | None:
        if self.state != PENDING or not self.kueue_message:
            return None
        return self.assignment_message == self.kueue_message

    @property
    def report(self) -> reports.ExplainWorkloadReport:
        """The value ``-o json|yaml`` prints (``reports.plain`` encodes it, as every report)."""
        w = self.workload
        created = w.metadata.creation_timestamp
        return reports.ExplainWorkloadReport(
            workload=w.key,
            kaiwo=self.kaiwo,
            state=self.state,
            priority=self.priority,
            priority_class=w.spec.priority_class_name or None,
            created=rfc3339(created) if created else None,
            local_queue=self.local_queue,
            cluster_queue=self.cluster_queue,
            cohort=self.cohort or None,
            pod_sets=[p.entry() for p in self.pod_sets],
            flavors=[f.entry() for f in self.flavors],
            may_use=dict(self.may_use),
            message=self.assignment_message or None,
            kueue=reports.KueueSays(self.kueue_reason or None, self.kueue_message or None, self.matches_kueue),
            shortfalls=[s.entry() for s in self.shortfalls],
            beyond_capacity=[reports.BeyondCapacityEntry(b.pod_set, b.flavor, b.resource, b.request, b.maximum)
                             for b in self.beyond_capacity],
            never_admitted=self.never_admitted,
            position=self.position.entry() if self.position else None,
            remedies=[r.entry() for r in self.remedies],
            notes=list(self.notes),
        )


# --- finding the workload -----------------------------------------------------------------------------------


class NoWorkload(LookupError):
    """A Kaiwo object without a Workload (yet)."""


def workload_of_kaiwo(snapshot: Snapshot, kind: str, namespace: str, name: str) -> Workload:
    """The Workload Kaiwo made for a KaiwoJob/KaiwoService: same namespace, label ``kaiwo.silogen.ai/name`` =
    its name (and ``kaiwo.silogen.ai/type`` job/service when set). Of several, the newest."""
    wanted_type = "job" if kind == "KaiwoJob" else "service"
    found = [
        w for w in snapshot.queues.workloads
        if w.namespace == namespace and w.metadata.labels.get(KAIWO_NAME_LABEL) == name
        and w.metadata.labels.get(KAIWO_TYPE_LABEL, wanted_type).lower() in (wanted_type, kind.lower())
    ]
    if not found:
        raise NoWorkload(f"{kind} {namespace}/{name} has no Workload (none in {namespace} is labelled "
                         f"{KAIWO_NAME_LABEL}={name}): Kaiwo has not queued it")
    return max(found, key=lambda w: (w.metadata.creation_timestamp is not None, w.metadata.creation_timestamp or 0,
                                     w.name))


# --- the explanation ------------------------------------------------------------------------------------------


def explain_workload(snapshot: Snapshot, workload: Workload, *, kaiwo: str | None = None) -> WorkloadExplanation:
    fleet = Fleet(snapshot.queues, snapshot.nodes)
    cq = fleet.cluster_queue_of(workload)
    state = _state(workload)
    local = workload.spec.queue_name
    notes: list[str] = []
    condition = workload.condition("QuotaReserved")
    kueue_message = condition.message if condition is not None and condition.status == "False" else ""
    kueue_reason = condition.reason if condition is not None else ""
    if state in (ADMITTED, RESERVED):
        admitted = workload.condition("Admitted") if state == ADMITTED else condition
        kueue_message = admitted.message if admitted is not None else ""
        kueue_reason = admitted.reason if admitted is not None else ""
    pod_views: list[PodSetView] = []
    flavors: list[FlavorView] = []
    may_use: dict[str, str] = {}
    shortfalls: list[Shortfall] = []
    remedies: list[Remedy] = []
    message = ""
    position = None
    assignment: Assignment | None = None
    if cq is None:
        remedies.extend(queue_remedies(fleet, workload))
    elif state == PENDING:
        assignment = assign(fleet, workload, cq)
        message = assignment.message
        node = fleet.nodes_by_name[cq.name]
        for choice in assignment.pod_sets:
            flavors.extend(FlavorView(choice.pod_set, t.flavor, t.verdict, t.reasons) for t in choice.tries)
            may_use[choice.pod_set] = _may_use(choice)
        shortfalls = _shortfalls(fleet, node, workload, assignment, may_use)
        position = _position(fleet, workload, cq)
        remedies = quota_remedies(fleet, cq, node, workload, assignment, shortfalls, position)
        remedies.extend(capacity_remedies(cq, assignment))
        if assignment.fits:
            notes.append(f"it fits ClusterQueue {cq.name} now: Kueue admits it at its next scheduling pass")
    admission = workload.status.admission
    by_name = {c.pod_set: c for c in assignment.pod_sets} if assignment else {}
    for pod_set in workload.spec.pod_sets:
        per_pod = {r: v for r, v in pod_requests(pod_set.template.spec).items() if r in GPU_RESOURCES and v}
        if admission is not None and state in (ADMITTED, RESERVED, FINISHED):
            chosen = next((a.flavors for a in admission.pod_set_assignments if a.name == pod_set.name), {})
        else:
            choice = by_name.get(pod_set.name)
            chosen = choice.flavors if choice else {}
        pod_views.append(PodSetView(pod_set.name, pod_set.count, per_pod,
                                    {r: f for r, f in chosen.items() if r in GPU_RESOURCES}))
    for s in shortfalls:
        if s.quota_short == 0 and s.physical_short > 0:
            notes.append(f"quota is there but {s.flavor}'s nodes are not: {s.pods_short} of its {s.pods} pods "
                         f"({s.gpus_per_pod} {s.resource} each) do not fit whole on them")
    return WorkloadExplanation(
        workload=workload,
        state=state,
        priority=fleet.priority(workload),
        local_queue=f"{workload.namespace}/{local}" if local else "",
        cluster_queue=cq.name if cq is not None else None,
        cohort=cq.spec.cohort if cq is not None else "",
        kaiwo=kaiwo,
        pod_sets=tuple(pod_views),
        flavors=tuple(flavors),
        may_use=may_use,
        assignment_message=message,
        kueue_message=kueue_message,
        kueue_reason=kueue_reason,
        shortfalls=tuple(shortfalls),
        position=position,
        remedies=tuple(remedies),
        notes=tuple(notes),
        beyond_capacity=beyond_capacity(assignment) if assignment is not None else (),
        never_admitted=never_admitted(assignment),
    )


def _state(workload: Workload) -> str:
    if workload.finished:
        return FINISHED
    if workload.admitted:
        return ADMITTED
    if workload.quota_reserved:
        return RESERVED
    if not workload.spec.active:
        return INACTIVE
    return PENDING


def _may_use(choice: PodSetChoice) -> str:
    """The flavor Kueue gives it now, else the first where it fits the capacity but not what is unused now."""
    for resource in sorted(choice.flavors):
        if resource in GPU_RESOURCES:
            return choice.flavors[resource]
    for attempt in choice.tries:
        if attempt.verdict in (FITS, FITS_BORROWING, SHORT):
            return attempt.flavor
    return ""


def _try_for(choice: PodSetChoice, flavor: str) -> FlavorTry | None:
    for attempt in choice.tries:
        if attempt.flavor == flavor and attempt.resources:
            return attempt
    return None


def _shortfalls(fleet: Fleet, node: QuotaNode, workload: Workload, assignment: Assignment,
                may_use: dict[str, str]) -> list[Shortfall]:
    out = []
    pod_sets = {p.name: p for p in workload.spec.pod_sets}
    for choice in assignment.pod_sets:
        flavor = may_use.get(choice.pod_set)
        if not flavor:
            continue
        attempt = _try_for(choice, flavor)
        if attempt is None:
            continue
        per_pod_all = pod_requests(pod_sets[choice.pod_set].template.spec)
        for tried in attempt.resources:
            if tried.resource not in GPU_RESOURCES:
                continue
            fr = (flavor, tried.resource)
            limits = node.limits(fr)
            reserved = node.usage.get(fr, 0)
            own = min(tried.available, max(0, limits.nominal - reserved))
            per_pod = per_pod_all.get(tried.resource, 0)
            nodes, fit = _pods_that_fit(fleet, fr, per_pod, choice.count)
            out.append(Shortfall(
                pod_set=choice.pod_set, flavor=flavor, resource=tried.resource, needed=tried.request,
                nominal=limits.nominal, reserved=reserved, own_free=own, cohort_free=tried.available - own,
                borrowing_limit=limits.borrowing, own_short=max(0, tried.request - own),
                quota_short=tried.shortfall, gpus_per_pod=per_pod, pods=choice.count, nodes=nodes, pods_fit=fit,
                physical_short=max(0, choice.count - fit) * per_pod,
            ))
    return out


def free_on_nodes(fleet: Fleet, fr: FR) -> dict[str, int]:
    """Free GPUs of each schedulable node of the flavor after the pods of every workload holding quota in it
    are placed first-fit, largest first (node order by name)."""
    nodes: list[Node] = sorted((n for n in fleet.flavor_nodes(fr[0]) if n.schedulable), key=lambda n: n.name)
    free = {n.name: node_allocatable(n, fr[1]) for n in nodes}
    pods: list[int] = []
    for workloads in fleet.reserving.values():
        for w in workloads:
            admission = w.status.admission
            if admission is None:
                continue
            for assigned in admission.pod_set_assignments:
                if assigned.flavors.get(fr[1]) != fr[0]:
                    continue
                total = quantity(assigned.resource_usage.get(fr[1]), fr[1])
                count = assigned.count or _count_of(w, assigned.name)
                if count and total:
                    pods.extend([total // count] * count)
    for size in sorted(pods, reverse=True):
        for name in free:
            if free[name] >= size:
                free[name] -= size
                break
    return free


def _count_of(workload: Workload, pod_set: str) -> int:
    return next((p.count for p in workload.spec.pod_sets if p.name == pod_set), 0)


def _pods_that_fit(fleet: Fleet, fr: FR, per_pod: int, count: int) -> tuple[int, int]:
    free = free_on_nodes(fleet, fr)
    if per_pod <= 0:
        return len(free), count
    return len(free), min(count, sum(f // per_pod for f in free.values()))


def _position(fleet: Fleet, workload: Workload, cq: ClusterQueue) -> QueuePosition:
    """Kueue's queue order: higher priority first, then older (creation time), then name."""
    pending = sorted(fleet.pending.get(cq.name, []), key=lambda w: _order_key(fleet, w))
    keys = [w.key for w in pending]
    index = keys.index(workload.key) if workload.key in keys else len(keys)
    ahead = pending[:index]
    gpus = sum(sum(g for r, g in _gpus(w).items()) for w in ahead)
    return QueuePosition(index + 1, len(pending), tuple(w.key for w in ahead), gpus)


def _order_key(fleet: Fleet, workload: Workload) -> tuple:
    created = workload.metadata.creation_timestamp
    return (-fleet.priority(workload), created is None, created.timestamp() if created else 0.0, workload.key)


def _gpus(workload: Workload) -> dict[str, int]:
    from .quota import workload_gpus

    return workload_gpus(workload)
