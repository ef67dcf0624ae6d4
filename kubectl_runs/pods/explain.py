"""``kubectl runs explain pod``: one pending GPU pod, as a value — kube-scheduler's own verdict (its message and
its nodes per reason) beside ours (its filters recomputed: kubectl_runs.pods.fit), where the two differ, the nodes
nearest to fitting, the deficit split into "not enough GPUs anywhere" and "enough, but fragmented", and remedies
that name objects: the pods holding GPUs on the nearest nodes, the taint to tolerate, the node to uncordon, the
label no node has. Pure: a snapshot and a pod in, a report out."""

from __future__ import annotations

from ..corev1 import quantity
from ..engine.reports import Value
from ..model import Snapshot
from ..timeutil import rfc3339
from .claim_reasons import claim_reason
from .claims import Devices, device_use, gpu_claims, needed
from .fit import AFFINITY, NodeFit, fit, fleet_fit, histogram, node_use, verdict
from .model import DEFAULT_SCHEDULER, Event, Pod
from .owners import workload_of
from .quota import quota_message, rejections, shortfalls
from .reasons import reason
from .verdict import scheduler_verdict

NEAREST = 5  # nodes shown, nearest to fitting first
NOT_CREATED = "NotCreated"  # the phase of a controller's pod that a ResourceQuota refused: it does not exist
_STAGE = {"NodeUnschedulable": 0, "NodeName": 0, "TaintToleration": 1, "NodeAffinity": 2, "NodeResourcesFit": 3,
          "DynamicResources": 3, "": 4}


class ReasonNodes(Value):
    reason: str
    scheduler: int | None  # nodes the scheduler counted under it (null: it gave no verdict)
    ours: int


class VerdictEntry(Value):
    message: str | None
    source: str | None  # "FailedScheduling Event", "PodScheduled condition"; null: the scheduler said nothing
    nodes: int | None


class NodeEntry(Value):
    node: str
    fits: bool
    filter: str  # the first filter that turned the pod away ("" when it fits)
    reasons: list[str]
    free_gpus: int
    gpus: int
    holders: list[str]  # the pods holding GPUs there (namespace/name)


class Deficit(Value):
    asked: int  # GPUs per pod
    free_on_eligible: int  # free on the nodes that pass every filter before resources, together
    largest_free_block: int
    largest_node: int  # the most GPUs any eligible node has, even empty
    kind: str  # None, NotEnoughAnywhere, Fragmented, ExceedsNodeCapacity, NoEligibleNode


class PodRemedy(Value):
    kind: str  # FreeGPUs, Tolerate, Uncordon, MatchSelector, ShrinkRequest, WaitForScheduler, RaiseQuota
    message: str
    object: str | None = None  # RaiseQuota: the ResourceQuota (namespace/name)
    amount: str | None = None  # RaiseQuota: how much its hard limit must grow (``requests.nvidia.com/gpu=4``)


class QuotaEntry(Value):
    """One resource of a ResourceQuota that refused the pod's controller a pod (its FailedCreate Event), as the
    quota stands now."""

    quota: str  # namespace/name
    resource: str  # as the quota names it: requests.nvidia.com/gpu, requests.cpu, pods…
    hard: str
    used: str
    requested: str  # by one pod
    raise_by: str  # "0": it has room now
    event: str  # the FailedCreate message, as the controller wrote it


class ClaimEntry(Value):
    """One request of the pod's claims that asks for GPUs through DRA."""

    claim: str  # the ResourceClaim (namespace/name), or the template's when no claim was made from it yet
    source: str  # ResourceClaim or ResourceClaimTemplate
    request: str
    device_class: str
    driver: str  # the GPU driver the DeviceClass selects
    devices: int | None  # null: allocationMode All
    allocated_on: list[str]  # the nodes of its allocated devices (empty: not allocated)


class ExplainPodReport(Value):
    pod: str
    workload: str  # Kind/name
    phase: str
    scheduler_name: str
    gpu_resource: str | None
    gpus: int
    waiting_since: str | None
    reason: str
    message: str
    scheduler: VerdictEntry
    ours: VerdictEntry
    agrees: bool | None  # null: the scheduler gave no verdict to compare
    reasons: list[ReasonNodes]
    deficit: Deficit
    nodes: list[NodeEntry]
    remedies: list[PodRemedy]
    quota: list[QuotaEntry]  # the ResourceQuota refusals of its controller's pods (FailedCreate Events)
    claims: list[ClaimEntry]  # its claims that ask for GPUs through DRA (gpus then counts their devices)


def explain_pod(snapshot: Snapshot, pod: Pod, events: tuple[Event, ...] = ()) -> ExplainPodReport:
    """``events``: the pod's Events read live (a snapshot's own are used too)."""
    others = [p for p in snapshot.pods.pods if p is not pod]  # bound, it must not count against its node
    use = node_use(others)
    fits = fleet_fit(pod.spec, snapshot.nodes, (), use=use)
    asks = gpu_claims(pod, snapshot.pods) if pod.spec.gpu_request() is None else ()
    if asks:  # GPUs claimed through DRA: devices per node, from its ResourceSlices
        devices = device_use(snapshot.pods)
        why, fits = claim_reason(pod, fits, asks, devices)
        resource = max(needed(asks).items(), key=lambda kv: (kv[1], kv[0]), default=(asks[0].driver, 0))[0]
        gpus = sum(ask.devices or 0 for ask in asks)
        capacity = {n.metadata.name: devices.get(n.metadata.name, {}).get(resource, Devices()).total
                    for n in snapshot.nodes}
        left = {n.metadata.name: devices.get(n.metadata.name, {}).get(resource, Devices()).free
                for n in snapshot.nodes}
        holders = {name: list(there[resource].holders) for name, there in devices.items() if resource in there}
    else:
        why = reason(pod, fits)
        resource, gpus = pod.spec.gpu_request() or (None, 0)
        capacity = {n.metadata.name: quantity(n.status.allocatable.get(resource or ""), resource or "")
                    for n in snapshot.nodes}
        left = {name: gpus_there - (use[name].requested.get(resource or "", 0) if name in use else 0)
                for name, gpus_there in capacity.items()}
        holders = {name: list(there.holders) for name, there in use.items()}
    theirs = scheduler_verdict(pod, (*snapshot.pods.events, *events))
    owner = workload_of(pod)
    quota, raises = _quota_of(snapshot, refusal_of(snapshot, owner.namespace, owner.kind, owner.name)
                              if pod.controller is not None else None)
    ours_text = verdict(fits)
    ours = histogram(fits)
    reasons = sorted(set(ours) | set(theirs.counts if theirs else {}))
    rows = [ReasonNodes(r, theirs.counts.get(r, 0) if theirs and theirs.nodes is not None else None, ours.get(r, 0))
            for r in reasons]
    agrees = None
    if theirs is not None and theirs.nodes is not None:
        agrees = theirs.nodes == len(fits) and theirs.counts == ours
    eligible = [f for f in fits if f.filter in ("", "NodeResourcesFit", "DynamicResources")]
    free = sum(max(0, f.free.get(resource or "", 0)) for f in eligible)
    block = max((f.free.get(resource or "", 0) for f in eligible), default=0)
    biggest = max((f.allocatable.get(resource or "", 0) for f in eligible), default=0)
    deficit = Deficit(gpus, free, block, biggest, _deficit_kind(fits, eligible, gpus, free, block, biggest))
    nearest = sorted(fits, key=lambda f: (-_STAGE.get(f.filter, 0), -left[f.node], f.node))
    nodes = [NodeEntry(f.node, f.fits, f.filter, list(f.reasons), left[f.node], capacity[f.node],
                       holders.get(f.node, [])) for f in nearest[:NEAREST]]
    claims = [ClaimEntry(a.claim, a.source, a.request, a.device_class, a.driver, a.devices, list(a.allocated))
              for a in asks]
    return ExplainPodReport(
        pod.key, f"{owner.kind}/{owner.name}", pod.status.phase, pod.scheduler, resource, gpus,
        rfc3339(pod.metadata.creation_timestamp), why.code, why.message,
        VerdictEntry(theirs.message, theirs.source, theirs.nodes) if theirs else VerdictEntry(None, None, None),
        VerdictEntry(ours_text, "recomputed", len(fits)), agrees, rows, deficit, nodes,
        _remedies(snapshot, pod, fits, eligible, use, holders, resource, gpus, deficit, bool(asks)) + raises, quota,
        claims)


def _quota_of(snapshot: Snapshot, rejection) -> tuple[list[QuotaEntry], list[PodRemedy]]:
    """The quota entries and the RaiseQuota remedies of one refusal (None: none)."""
    if rejection is None:
        return [], []
    objects = snapshot.pods
    short = shortfalls(rejection, objects.quotas, objects.pods, objects.limit_ranges)
    entries = [QuotaEntry(s.quota, s.resource, s.show(s.hard), s.show(s.used), s.show(s.requested),
                          s.show(s.raise_by), rejection.message) for s in short]
    grow = [s for s in short if s.raise_by > 0]
    if not grow:
        return entries, [PodRemedy("WaitForController", f"ResourceQuota {rejection.namespace}/{rejection.quota} has "
                                                        f"room now: the {rejection.owner_kind} controller retries "
                                                        f"creating the pod", f"{rejection.namespace}/{rejection.quota}")]
    amount = ",".join(f"{s.resource}={s.show(s.raise_by)}" for s in grow)
    detail = "; ".join(f"{s.resource} from {s.show(s.hard)} to {s.show(s.used + s.requested)} ({s.show(s.used)} "
                       f"used, {s.show(s.requested)} asked by one pod)" for s in grow)
    return entries, [PodRemedy("RaiseQuota", f"raise ResourceQuota {rejection.namespace}/{rejection.quota}: {detail}",
                               f"{rejection.namespace}/{rejection.quota}", amount)]


def refusal_of(snapshot: Snapshot, namespace: str, kind: str, name: str):
    """The current quota refusal of the controller ``kind``/``name`` (a Deployment: of its ReplicaSets), or None."""
    for rejection in rejections(snapshot.pods.events, snapshot.pods.pods):
        if rejection.namespace != namespace:
            continue
        if rejection.owner_kind == kind and rejection.owner_name == name:
            return rejection
        if kind == "Deployment" and rejection.owner_kind == "ReplicaSet" and \
                rejection.owner_name.startswith(f"{name}-"):
            return rejection
    return None


def explain_refused(snapshot: Snapshot, rejection) -> ExplainPodReport:
    """A controller's pod that a ResourceQuota refused: no pod exists, so no scheduler has judged it; the report
    names the quota and by how much to raise it."""
    quota, raises = _quota_of(snapshot, rejection)
    resource, gpus = rejection.gpus or (None, 0)
    message = quota_message(rejection, shortfalls(rejection, snapshot.pods.quotas, snapshot.pods.pods,
                                                  snapshot.pods.limit_ranges))
    none = VerdictEntry(None, None, None)
    return ExplainPodReport(
        f"{rejection.namespace}/{rejection.pod or rejection.owner_name}",
        f"{rejection.owner_kind}/{rejection.owner_name}", NOT_CREATED, DEFAULT_SCHEDULER, resource, gpus,
        rfc3339(rejection.when), "QuotaExceeded", message, none, none, None, [],
        Deficit(gpus, 0, 0, 0, NOT_CREATED), [], raises, quota, [])


def _deficit_kind(fits, eligible, gpus, free, block, biggest) -> str:
    if any(f.fits for f in fits):
        return "None"
    if not eligible:
        return "NoEligibleNode"
    if gpus > biggest:
        return "ExceedsNodeCapacity"
    if block >= gpus:
        return "None"  # the GPUs are there: another resource is short
    return "Fragmented" if free >= gpus else "NotEnoughAnywhere"


def _remedies(snapshot: Snapshot, pod: Pod, fits: tuple[NodeFit, ...], eligible: list[NodeFit], use,
              holders: dict[str, list[str]], resource, gpus: int, deficit: Deficit, claimed: bool
              ) -> list[PodRemedy]:
    """``holders``: per node, what holds its GPUs (pods; for a pod that claims GPUs through DRA, the claims that
    hold its devices); ``claimed``: such a pod (the filters lifted below are judged on devices too)."""
    out: list[PodRemedy] = []
    unit = "devices" if claimed else "GPUs"
    if any(f.fits for f in fits):
        out.append(PodRemedy("WaitForScheduler", f"it fits on {', '.join(f.node for f in fits if f.fits)} now: "
                                                 f"kube-scheduler binds it on its next attempt"))
        return out
    if deficit.kind == "ExceedsNodeCapacity":
        out.append(PodRemedy("ShrinkRequest", f"ask for at most {deficit.largest_node} {unit} per pod (the largest "
                                              f"node it may use has {deficit.largest_node}), or add larger nodes"))
    if deficit.kind in ("Fragmented", "NotEnoughAnywhere"):
        for f in sorted(eligible, key=lambda f: (-f.free.get(resource, 0), f.node)):
            there = holders.get(f.node, [])
            missing = gpus - f.free.get(resource, 0)
            if there and 0 < missing <= f.allocatable.get(resource, 0):
                out.append(PodRemedy("FreeGPUs", f"{f.node} has {f.free.get(resource, 0)} of {gpus} {unit} free: "
                                                 f"{missing} more held by {', '.join(there)}"))
                break
    by_node = {n.metadata.name: n for n in snapshot.nodes}
    for f in fits:
        node = by_node[f.node]
        if claimed and f.free.get(resource, 0) < gpus:
            continue  # lifting a filter there would not give it the devices
        if f.filter == "NodeUnschedulable" and _fits_if(pod, node, use, cordon=True):
            out.append(PodRemedy("Uncordon", f"node {f.node} is cordoned; uncordoned it would take the pod "
                                             f"(kubectl uncordon {f.node})"))
        elif f.filter == "TaintToleration" and _fits_if(pod, node, use, taints=True):
            taint = f.reasons[0].removeprefix("node(s) had untolerated taint ")
            out.append(PodRemedy("Tolerate", f"node {f.node} would take the pod if it tolerated taint {taint}"))
    roomy = [f.node for f in fits if f.filter == "NodeAffinity" and _fits_if(pod, by_node[f.node], use, selector=True)
             and not (claimed and f.free.get(resource, 0) < gpus)]
    if roomy:
        asked = ", ".join(f"{k}={v}" for k, v in sorted(pod.spec.node_selector.items())) or "its node affinity"
        out.append(PodRemedy("MatchSelector", f"{len(roomy)} node(s) have room ({', '.join(roomy[:3])}) but "
                                              f"{AFFINITY.removeprefix('node(s) ')} ({asked})"))
    return out


def _fits_if(pod: Pod, node, use, *, cordon: bool = False, taints: bool = False, selector: bool = False) -> bool:
    """Would ``pod`` fit on ``node`` with that one filter lifted?"""
    import msgspec

    spec = pod.spec
    if selector:
        spec = msgspec.structs.replace(spec, node_selector={}, affinity=None)
    if cordon or taints:
        changed = msgspec.structs.replace(node.spec, unschedulable=False if cordon else node.spec.unschedulable,
                                          taints=() if taints else node.spec.taints)
        node = msgspec.structs.replace(node, spec=changed)
    return fit(spec, node, use.get(node.metadata.name)).fits
