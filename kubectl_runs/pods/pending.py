"""The plain pods among the pending GPU consumers, one row per workload (kubectl_runs.pods.owners), with the reason
code its pods wait for (kubectl_runs.pods.reasons) — the pod part of ``kubectl runs pending``.

A pod is pending here when it asks for GPUs (``nvidia.com/gpu`` or ``amd.com/gpu``) and is neither bound to a node
nor finished nor being deleted. Replicas share a spec, so the filters are recomputed once per distinct spec and
reused: the work grows with nodes × distinct specs, not nodes × pods. Pure functions over records; ``at`` is the
report's instant."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Literal

import msgspec

from ..engine.reports import Value
from ..model import Node
from ..timeutil import rfc3339
from .fit import fleet_fit, node_use
from .model import Pod
from .owners import Workload, workload_of
from .reasons import PodReason, reason

ReasonCode = Literal["SchedulingGated", "OtherScheduler", "Fits", "Cordoned", "UntoleratedTaint", "NodeSelector",
                     "ExceedsNodeCapacity", "Fragmented", "InsufficientGPU", "InsufficientResources"]
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


def is_pending_gpu_pod(pod: Pod) -> bool:
    return (pod.spec.gpu_request() is not None and not pod.bound and not pod.terminal
            and pod.metadata.deletion_timestamp is None)


def pending_pod_rows(pods: Sequence[Pod], nodes: Sequence[Node]) -> tuple[PendingPodsRow, ...]:
    """The rows, sorted by namespace, kind and name."""
    use = node_use(pods)
    cache: dict[bytes, PodReason] = {}

    def why(pod: Pod) -> PodReason:
        key = msgspec.json.encode(pod.spec)
        if key not in cache:
            fits = fleet_fit(pod.spec, nodes, (), use=use)
            cache[key] = reason(pod, fits)
        return cache[key]

    groups: dict[Workload, list[Pod]] = {}
    for pod in pods:
        if is_pending_gpu_pod(pod):
            groups.setdefault(workload_of(pod), []).append(pod)
    return tuple(_row(workload, members, [why(p) for p in members]) for workload, members in sorted(groups.items()))


def _row(workload: Workload, pods: list[Pod], reasons: list[PodReason]) -> PendingPodsRow:
    commonest = Counter(r.code for r in reasons).most_common()
    code = sorted(commonest, key=lambda kv: (-kv[1], kv[0]))[0][0]
    first = next(r for r in reasons if r.code == code)
    resource, _gpus = pods[0].spec.gpu_request() or ("nvidia.com/gpu", 0)
    gpus = sum((p.spec.gpu_request() or ("", 0))[1] for p in pods)
    since = _oldest(p.metadata.creation_timestamp for p in pods)
    message = first.message if len(commonest) == 1 else (
        f"{first.message} ({len(pods) - sum(1 for r in reasons if r.code == code)} of {len(pods)} pods: another "
        f"reason)")
    return PendingPodsRow(workload.kind, workload.namespace, workload.name, len(pods), gpus, resource,
                          rfc3339(since), first.admitter, code, message, first.largest_block, first.free_gpus)


def _oldest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None
