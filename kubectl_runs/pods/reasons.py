"""One reason code per pending GPU pod, as ``squeue`` gives one reason per job, decided from the pod itself (its
scheduling gates, its scheduler) and from kube-scheduler's filters recomputed over the Nodes (``fit``):

- ``SchedulingGated``: a scheduling gate holds it (Kueue's ``kueue.x-k8s.io/admission`` gate: Kueue admits it);
- ``OtherScheduler``: its ``schedulerName`` is not kube-scheduler's: that scheduler decides, we do not judge;
- ``Fits``: some node takes it now (the scheduler has not bound it yet);
- ``Cordoned`` / ``UntoleratedTaint`` / ``NodeSelector``: no node passes the filters before resources, the code
  naming the filter that turned away the most GPU nodes;
- ``ExceedsNodeCapacity``: it asks more GPUs on one node than any node it may use has, even empty;
- ``Fragmented``: the nodes it may use have enough free GPUs together, never enough on one node;
- ``InsufficientGPU``: they do not have enough free GPUs even together;
- ``InsufficientResources``: the GPUs are there, but CPU, memory or the pod count are not.

Pure functions over records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .fit import NodeFit
from .model import Pod

KUEUE_GATE = "kueue.x-k8s.io/admission"
_BEFORE_RESOURCES = {"NodeUnschedulable": "Cordoned", "TaintToleration": "UntoleratedTaint",
                     "NodeAffinity": "NodeSelector", "NodeName": "NodeSelector"}


@dataclass(frozen=True)
class PodReason:
    code: str
    message: str
    admitter: str  # "kube-scheduler", "Kueue", or the other scheduler's name
    largest_block: int = 0  # the most free GPUs of the pod's resource on one node it may use
    free_gpus: int = 0  # free GPUs of that resource on all the nodes it may use, together


def reason(pod: Pod, fits: Sequence[NodeFit], weights: Sequence[int] | None = None) -> PodReason:
    """The reason ``pod`` (pending, asking for GPUs) waits, given its fits against every node (``weights``: each
    fit stands for that many nodes, as ``fit.weighted_fit`` gives them; else each is one node, and fits shared
    by several nodes are counted once with their number)."""
    gates = [g.name for g in pod.spec.scheduling_gates]
    if gates:
        admitter = "Kueue" if KUEUE_GATE in gates else "kube-scheduler"
        return PodReason("SchedulingGated", f"held by scheduling gate {', '.join(sorted(gates))}", admitter)
    if pod.scheduler != "default-scheduler":
        return PodReason("OtherScheduler", f"scheduled by {pod.scheduler}, not kube-scheduler", pod.scheduler)
    weighted = _collapse(fits) if weights is None else list(zip(fits, weights, strict=True))
    asked = pod.spec.gpu_request()
    resource, gpus = asked if asked is not None else ("nvidia.com/gpu", 0)
    fitting = sum(n for f, n in weighted if f.fits)
    eligible = [(f, n) for f, n in weighted if f.fits or f.filter == "NodeResourcesFit"]
    largest = max((f.free.get(resource, 0) for f, _n in eligible), default=0)
    together = sum(max(f.free.get(resource, 0), 0) * n for f, n in eligible)
    if fitting:
        return PodReason("Fits", f"fits on {fitting} node(s) now; kube-scheduler has not bound it yet",
                         "kube-scheduler", largest, together)
    if not eligible:
        turned: Counter[str] = Counter()
        for f, n in weighted:
            if f.filter in _BEFORE_RESOURCES:
                turned[_BEFORE_RESOURCES[f.filter]] += n
        if not turned:
            return PodReason("InsufficientGPU", "no node offers GPUs", "kube-scheduler")
        code = sorted(turned.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        return PodReason(code, f"no node passes the filters before resources ({_describe(turned)})",
                         "kube-scheduler")
    short_of_gpus = any(f"Insufficient {resource}" in f.reasons for f, _n in eligible)
    if not short_of_gpus:
        return PodReason("InsufficientResources", "GPUs are free on the nodes it may use, but not the CPU, memory "
                         "or pod count it asks", "kube-scheduler", largest, together)
    biggest = max((f.allocatable.get(resource, 0) for f, _n in eligible), default=0)
    if gpus > biggest:
        return PodReason("ExceedsNodeCapacity", f"needs {gpus} GPUs on one node: the largest node it may use has "
                         f"{biggest}", "kube-scheduler", largest, together)
    if together >= gpus:
        return PodReason("Fragmented", f"needs {gpus} GPUs on one node: {together} are free on the nodes it may "
                         f"use, at most {largest} on one", "kube-scheduler", largest, together)
    return PodReason("InsufficientGPU", f"needs {gpus} GPUs on one node: {together} are free on all the nodes it "
                     f"may use together", "kube-scheduler", largest, together)


def _collapse(fits: Sequence[NodeFit]) -> list[tuple[NodeFit, int]]:
    """Each distinct fit object once, with the number of nodes it stands for."""
    counts = Counter(map(id, fits))
    by_id = dict(zip(map(id, fits), fits, strict=True))
    return [(by_id[key], n) for key, n in counts.items()]


def _describe(turned: Counter) -> str:
    return ", ".join(f"{count} {code}" for code, count in sorted(turned.items(), key=lambda kv: (-kv[1], kv[0])))
