"""``kubectl runs pending`` as a value: every pending GPU consumer in one list — Runs (jobtree's plan: their need
and the first reason of their plan) and plain pods, one row per workload (kubectl_runs.pods.owners) with the reason
code its pods wait for (kubectl_runs.pods.reasons) — and a headline of the fleet's GPUs.

A pod is pending here when it asks for GPUs (``nvidia.com/gpu`` or ``amd.com/gpu``, or a claim of a GPU
DeviceClass through DRA: kubectl_runs.pods.claim_reasons) and is neither bound to a node nor finished nor being
deleted. Replicas share a spec, so the filters are recomputed once per distinct spec and
reused: the work grows with nodes × distinct specs, not nodes × pods. Pure functions over records; ``at`` is the
report's instant."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Literal

import msgspec

from ..engine.reports import Value
from ..model import Node
from ..timeutil import rfc3339
from .claim_reasons import claim_rows, claiming_pods
from .claims import device_use, gpu_driver
from .fit import NodeUse, Shapes, fit, node_use, weighted_fit
from .model import TERMINAL_PHASES, Pod
from .owners import Workload, workload_key, workload_of
from .reasons import PodReason, reason

ReasonCode = Literal["SchedulingGated", "OtherScheduler", "Fits", "Cordoned", "UntoleratedTaint", "NodeSelector",
                     "ExceedsNodeCapacity", "Fragmented", "InsufficientGPU", "InsufficientResources",
                     "QuotaExceeded"]
GPUResource = Literal["nvidia.com/gpu", "amd.com/gpu"]


class PendingPodsRow(Value):
    """One workload's pending GPU pods."""

    kind: str  # the workload's kind: Deployment, Job, RayCluster, … or Pod
    namespace: str
    name: str
    pods: int  # its pending pods
    gpus: int  # GPUs they ask for together
    gpu_resource: GPUResource
    waiting_since: str | None  # the oldest pending pod's creation
    admitted_by: str  # kube-scheduler, Kueue, or the other scheduler's name
    reason: ReasonCode
    message: str
    largest_free_block: int  # most free GPUs of that resource on one node its pods may use
    free_gpus: int  # free GPUs of that resource on all nodes its pods may use


def is_pending_gpu_pod(pod: Pod, asked: dict[str, int] | None = None) -> bool:
    """``asked``: the pod's ``spec.requests()``, when already known."""
    return (not pod.bound and not pod.terminal and pod.metadata.deletion_timestamp is None
            and pod.spec.gpu_request(asked) is not None)


def pending_pod_rows(pods: Sequence[Pod], nodes: Sequence[Node], use: dict[str, NodeUse] | None = None
                     ) -> tuple[PendingPodsRow, ...]:
    """The rows, sorted by namespace, kind and name (``use``: ``node_use(pods)``, when already known)."""
    pass_use, pending = one_pass(pods)
    return _pod_rows(pending, nodes, pass_use if use is None else use)


def one_pass(pods: Sequence[Pod]) -> tuple[dict[str, NodeUse], list[tuple[Pod, tuple[str, int]]]]:
    """One pass over the pods, each pod's requests summed once: ``node_use`` of the pods, and the pending GPU pods
    with their (GPU resource, GPUs)."""
    requested: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    holders: dict[str, list[str]] = {}
    pending: list[tuple[Pod, tuple[str, int]]] = []
    # one container's requests as written -> (summed, its GPUs): replicas share them
    memo: dict[bytes, tuple[dict[str, int], tuple[str, int] | None]] = {}
    encode = msgspec.json.encode
    for pod in pods:
        spec = pod.spec
        if pod.status.phase in TERMINAL_PHASES:
            continue
        if len(spec.containers) == 1 and not spec.init_containers and not spec.overhead:
            key = encode(spec.containers[0].resources.requests)
            entry = memo.get(key)
            if entry is None:
                asked = spec.requests()
                entry = memo[key] = (asked, spec.gpu_request(asked))
            asked, gpus = entry
        else:
            asked = spec.requests()
            gpus = spec.gpu_request(asked)
        name = spec.node_name
        if not name:
            if gpus is not None and pod.metadata.deletion_timestamp is None:
                pending.append((pod, gpus))
            continue
        if name in counts:
            counts[name] += 1
            mine = requested[name]
            for resource, amount in asked.items():
                mine[resource] = mine.get(resource, 0) + amount
        else:
            counts[name] = 1
            requested[name] = dict(asked)
        if gpus is not None:
            holders.setdefault(name, []).append(pod.key)
    use = {name: NodeUse(requested[name], n, tuple(sorted(holders.get(name, ())))) for name, n in counts.items()}
    return use, pending


def _pod_rows(pending: list[tuple[Pod, tuple[str, int]]], nodes: Sequence[Node], use: dict[str, NodeUse],
              shapes: Shapes | None = None) -> tuple[PendingPodsRow, ...]:
    """Replicas of one template have equal specs: each distinct spec is judged once against the nodes (once per
    node shape: ``weighted_fit``), and its reason reused."""
    if not pending:
        return ()
    groups: dict[tuple[str, str, str], list[tuple[Pod, tuple[str, int]]]] = {}
    for pod, gpus in pending:
        key = workload_key(pod)
        members = groups.get(key)
        if members is None:
            groups[key] = [(pod, gpus)]
        else:
            members.append((pod, gpus))
    shapes = Shapes(nodes, use) if shapes is None else shapes
    cache: dict[bytes, PodReason] = {}
    encode = msgspec.json.encode

    def why(pod: Pod) -> PodReason:
        key = encode(pod.spec)
        found = cache.get(key)
        if found is None:
            found = cache[key] = reason(pod, *weighted_fit(pod.spec, shapes, use))
        return found

    def whys(members: list[tuple[Pod, tuple[str, int]]]) -> list[PodReason]:
        out: list[PodReason] = []
        last = None
        for pod, _gpus in members:  # replicas: the same spec as the pod before, the same reason
            if last is None or pod.spec != last.spec:
                last, found = pod, why(pod)
            out.append(found)
        return out

    return tuple(_row(Workload(*key), members, whys(members)) for key, members in sorted(groups.items()))


def _row(workload: Workload, pods: list[tuple[Pod, tuple[str, int]]], reasons: list[PodReason]) -> PendingPodsRow:
    counts = Counter(r.code for r in reasons)
    code = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    first = next(r for r in reasons if r.code == code)
    resource = pods[0][1][0]
    gpus = sum(g for _p, (_r, g) in pods)
    since = _oldest(p.metadata.creation_timestamp for p, _g in pods)
    message = first.message if len(counts) == 1 else (
        f"{first.message} ({len(pods) - counts[code]} of {len(pods)} pods: another reason)")
    return PendingPodsRow(workload.kind, workload.namespace, workload.name, len(pods), gpus, resource,
                          _rfc3339(since), first.admitter, code, message, first.largest_block, first.free_gpus)


_rfc3339 = lru_cache(maxsize=4096)(rfc3339)  # replicas are made at the same few instants


def _oldest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


# --- Runs, the headline, the report ------------------------------------------------------------------------------


class GPUHeadline(Value):
    """The fleet's GPUs. A node's GPUs are held by open GPULeases or by bound pods, whichever holds more of them
    (a Run's pods run on its leases' slots: nothing is counted twice); free is what neither holds. A node that
    offers no GPU extended resource but publishes GPU devices through DRA (ResourceSlices of a GPU driver) counts
    those: held when a claim holds them (by pods outside leases), else free."""

    total: int
    held_by_leases: int
    held_by_pods_outside_leases: int
    free: int
    free_in_large_enough_blocks: int  # free GPUs on nodes with at least the smallest pending pod's request free
    smallest_pending_request: int | None


class ReasonCount(Value):
    reason: str
    rows: int
    gpus: int


class PendingRow(Value):
    """One pending GPU consumer: a Run, or a workload's pending pods."""

    kind: str  # Run, or the pods' workload: Deployment, Job, RayCluster, …, Pod
    namespace: str
    name: str
    pods: int  # pending pods (a Run: its pods labelled jobtree.dev/run; a quota refusal: 0, none was created)
    gpus: int  # GPUs still asked for: a Run's need, the pods' requests together
    gpu_resource: GPUResource | None  # the pods' GPU resource; null for a Run (its flavor says it)
    flavor: str | None  # a Run's gpuType; null for pods
    waiting_since: str | None
    admitted_by: str  # jobtree, kube-scheduler, Kueue, ResourceQuota (its pods are refused), another scheduler
    reason: str  # a Run's plan reason code, a Kueue Workload's code, or a pod ReasonCode
    message: str
    device_class: str | None = None  # pods that claim GPUs through DRA: the DeviceClass(es); gpus counts devices


class PendingReport(Value):
    at: str
    gpus: GPUHeadline
    rows: list[PendingRow]
    reasons: list[ReasonCount]  # rows and GPUs per reason, most rows first


def pending_report(snapshot, at: datetime, *, namespace: str | None = None,
                   flavor: str | None = None) -> PendingReport:
    """Every pending GPU consumer of ``snapshot`` at ``at`` (``namespace``/``flavor`` narrow the rows, never the
    arithmetic)."""
    from ..engine.evaluation import Evaluation
    from ..engine.plan import plan_run
    from .workload_rows import in_kueue_row, kueue_row_pods, workload_rows

    pods = snapshot.pods.pods
    rows: list[PendingRow] = []
    ev = Evaluation(snapshot, at)
    for run in snapshot.runs:
        if run.finished:
            continue
        plan = plan_run(snapshot, run, at, evaluation=ev)
        if plan.need <= 0:
            continue
        first = plan.reasons[0] if plan.reasons else None
        rows.append(PendingRow("Run", run.metadata.namespace, run.metadata.name, 0, plan.need, None, plan.flavor,
                               rfc3339(run.metadata.creation_timestamp), "jobtree",
                               first.code if first else "Startable",
                               first.message if first else "can start now: the reconciler starts it on its next pass"))
    kueue_rows = workload_rows(snapshot)  # Kueue's pending Workloads (pods/workload_rows.py)
    rows += kueue_rows
    use, pending = one_pass(pods)  # each pod's requests summed once, for everything below
    smallest = min((g for _p, (_r, g) in pending), default=None)
    claiming = claiming_pods(pods)  # GPUs claimed through DRA
    if kueue_rows:  # a pod of a Workload that has a row is counted there
        in_row = kueue_row_pods(snapshot.queues.workloads, kueue_rows)
        pending = [(p, g) for p, g in pending if not in_kueue_row(p, in_row)]
        claiming = [p for p in claiming if not in_kueue_row(p, in_row)]
    runs = {(r.namespace, r.name): i for i, r in enumerate(rows) if r.kind == "Run"}
    shapes = Shapes(snapshot.nodes, use) if pending or claiming else None
    devices = device_use(snapshot.pods) if snapshot.pods.resource_slices else {}
    pod_rows = [PendingRow(row.kind, row.namespace, row.name, row.pods, row.gpus, row.gpu_resource, None,
                           row.waiting_since, row.admitted_by, row.reason, row.message)
                for row in _pod_rows(pending, snapshot.nodes, use, shapes)]
    if claiming:
        pod_rows += claim_rows(claiming, snapshot.pods, snapshot.nodes, use, shapes, devices)
    for row in pod_rows:
        if row.kind == "Run" and (row.namespace, row.name) in runs:  # the Run's own row counts its pods
            i = runs[(row.namespace, row.name)]
            rows[i] = msgspec.structs.replace(rows[i], pods=rows[i].pods + row.pods)
            continue
        rows.append(row)
    rows = quota_rows(snapshot, rows)
    if namespace is not None:
        rows = [r for r in rows if r.namespace == namespace]
    if flavor is not None:
        flavored = {n.metadata.name for n in snapshot.nodes if n.flavor == flavor}
        keep = {(r.namespace, r.kind, r.name) for r in rows if r.flavor == flavor}
        keep |= {(w.namespace, w.kind, w.name) for p in pods if is_pending_gpu_pod(p)
                 for w in [workload_of(p)] if _may_use(p, flavored, snapshot.nodes)}
        rows = [r for r in rows if (r.namespace, r.kind, r.name) in keep]
    rows.sort(key=lambda r: (r.namespace, r.kind != "Run", r.kind, r.name))
    return PendingReport(rfc3339(at), headline(snapshot, ev.open, use, smallest, devices), rows,
                         _reason_counts(rows))


def quota_rows(snapshot, rows: list[PendingRow]) -> list[PendingRow]:
    """``rows`` with the controllers whose pods a ResourceQuota refuses (FailedCreate Events): a row of their own
    (``QuotaExceeded``, no pod created), or, when the controller has pending pods already, a word in their row."""
    from .quota import gpus_of_owner, quota_message, rejections, shortfalls

    objects = snapshot.pods
    refused = rejections(objects.events, objects.pods)
    if not refused:
        return rows
    by_key = {(r.namespace, r.kind, r.name): i for i, r in enumerate(rows)}
    rs_owner = {(p.metadata.namespace, owner.name): workload_of(p) for p in objects.pods
                for owner in [p.controller] if owner is not None and owner.kind == "ReplicaSet"}
    for rejection in refused:
        workload = rs_owner.get((rejection.namespace, rejection.owner_name)) if rejection.owner_kind == "ReplicaSet" \
            else None
        kind, name = (workload.kind, workload.name) if workload else (rejection.owner_kind, rejection.owner_name)
        asked = rejection.gpus or gpus_of_owner(objects.pods, rejection)
        if asked is None:
            continue  # not known to ask for GPUs
        short = shortfalls(rejection, objects.quotas, objects.pods, objects.limit_ranges)
        message = quota_message(rejection, short)
        key = (rejection.namespace, kind, name)
        if key in by_key:
            i = by_key[key]
            rows[i] = msgspec.structs.replace(rows[i], message=f"{rows[i].message}; more pods: {message}")
            continue
        rows.append(PendingRow(kind, rejection.namespace, name, 0, asked[1], asked[0], None,
                               rfc3339(rejection.when), "ResourceQuota", "QuotaExceeded", message))
    return rows


def _may_use(pod: Pod, flavored: set[str], nodes: Sequence[Node]) -> bool:
    """A node of the flavor offers the pod's GPU resource and passes the filters before resources (cordon,
    taints, selector and affinity)."""
    resource = (pod.spec.gpu_request() or ("", 0))[0]
    for node in nodes:
        if node.metadata.name in flavored:
            one = fit(pod.spec, node)
            if one.filter in ("", "NodeResourcesFit") and one.allocatable.get(resource, 0) > 0:
                return True
    return False


def headline(snapshot, open_leases, use: dict[str, NodeUse] | None = None, smallest: int | None = -1,
             devices: dict | None = None) -> GPUHeadline:
    """``use``: ``node_use`` of the snapshot's pods; ``smallest``: the smallest pending pod's GPUs (None: no pod
    is pending) — when already known."""
    leased: Counter[str] = Counter()
    for lease in open_leases:
        for slot in lease.spec.slice.slots:
            leased[slot.partition("#")[0]] += 1
    use = node_use(snapshot.pods.pods) if use is None else use
    if smallest == -1:
        smallest = min((p.spec.gpu_request()[1] for p in snapshot.pods.pods if is_pending_gpu_pod(p)), default=None)
    devices = _dra_gpus(snapshot.pods, devices)
    total = by_leases = by_pods = free = large = 0
    counted: dict[tuple, int] = {}  # (nvidia.com/gpu, amd.com/gpu) as written -> GPUs
    for node in snapshot.nodes:
        name = node.metadata.name
        allocatable = node.status.allocatable
        written = (allocatable.get("nvidia.com/gpu"), allocatable.get("amd.com/gpu"))
        gpus = counted.get(written)
        if gpus is None:
            gpus = counted[written] = node.gpus
        held_there = use.get(name)
        pod_gpus = 0 if held_there is None else (held_there.requested.get("nvidia.com/gpu", 0)
                                                 + held_there.requested.get("amd.com/gpu", 0))
        on_leases = leased.get(name, 0)
        held = max(on_leases, pod_gpus)
        total += gpus
        by_leases += min(on_leases, gpus)
        by_pods += max(0, min(held, gpus) - min(on_leases, gpus))
        left = max(0, gpus - held)
        if not gpus and name in devices:  # GPUs published through DRA
            total += devices[name][0]
            by_pods += devices[name][0] - devices[name][1]
            left = devices[name][1]
        free += left
        if smallest is not None and left >= smallest:
            large += left
    return GPUHeadline(total, by_leases, by_pods, free, large, smallest)


def _dra_gpus(objects, devices: dict | None = None) -> dict[str, tuple[int, int]]:
    """Per node, (GPU devices its ResourceSlices publish, those no claim holds), over the GPU drivers
    (``devices``: ``claims.device_use(objects)``, when already known)."""
    if not objects.resource_slices:
        return {}
    out: dict[str, tuple[int, int]] = {}
    for node, drivers in (device_use(objects) if devices is None else devices).items():
        gpus = [d for driver, d in drivers.items() if gpu_driver(driver, None) is not None]
        if gpus:
            out[node] = (sum(d.total for d in gpus), sum(d.free for d in gpus))
    return out


def _reason_counts(rows: list[PendingRow]) -> list[ReasonCount]:
    counts: dict[str, list[int]] = {}
    for row in rows:
        entry = counts.setdefault(row.reason, [0, 0])
        entry[0] += 1
        entry[1] += row.gpus
    return [ReasonCount(reason, n, gpus) for reason, (n, gpus) in
            sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))]
