"""Why a pod that claims GPUs through DRA waits, in the reason codes of every other pending pod
(kubectl_runs.pods.reasons), and its workload's row in ``pending``: the message names the claims, their
DeviceClass and the devices they ask for, and counts devices where other pods count GPUs. Pure functions."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..model import Node
from ..timeutil import rfc3339
from .claims import ClaimAsk, Devices, claims_fit, describe, device_use, gpu_claims, needed
from .fit import NodeFit, NodeUse, Shapes, fleet_fit
from .model import Pod, PodObjects
from .owners import workload_of
from .reasons import PodReason, reason

_JUDGED_BEFORE = ("SchedulingGated", "OtherScheduler", "Cordoned", "UntoleratedTaint", "NodeSelector",
                  "InsufficientResources")


def claim_reason(pod: Pod, fits: Sequence[NodeFit], asks: Sequence[ClaimAsk],
                 devices: dict[str, dict[str, Devices]]) -> tuple[PodReason, tuple[NodeFit, ...]]:
    """(the reason, the fits with the DynamicResources filter added) of a pending pod whose claims ``asks`` for
    GPUs; ``fits``: its other filters over every node (``fit.fleet_fit``, one per node)."""
    named = f"DRA {describe(asks)}"
    base = reason(pod, fits)
    judged = claims_fit(fits, asks, devices)
    if base.code in _JUDGED_BEFORE:
        return PodReason(base.code, f"{base.message}; {named}", base.admitter), judged
    want = needed(asks)
    if not want:  # every claim allocated: the scheduler binds it where its devices are
        return PodReason("Fits", f"{named}: allocated; kube-scheduler has not bound it yet", "kube-scheduler"), judged
    driver, count = max(want.items(), key=lambda kv: (kv[1], kv[0]))
    eligible = [f for f in judged if f.fits or f.filter == "DynamicResources"]
    largest = max((f.free.get(driver, 0) for f in eligible), default=0)
    together = sum(max(f.free.get(driver, 0), 0) for f in eligible)
    fitting = sum(1 for f in judged if f.fits)
    if fitting:
        return PodReason("Fits", f"{named}: the devices are free on {fitting} node(s) it may use; kube-scheduler "
                                 "has not allocated them yet", "kube-scheduler", largest, together), judged
    biggest = max((f.allocatable.get(driver, 0) for f in eligible), default=0)
    if not biggest:
        return PodReason("InsufficientGPU", f"{named}: no node it may use publishes {driver} devices "
                                            "(ResourceSlices)", "kube-scheduler"), judged
    if count > biggest:
        return PodReason("ExceedsNodeCapacity", f"{named}: needs {count} {driver} devices on one node: the largest "
                                                f"node it may use publishes {biggest}", "kube-scheduler",
                         largest, together), judged
    if together >= count:
        return PodReason("Fragmented", f"{named}: needs {count} {driver} devices on one node: {together} are free "
                                       f"on the nodes it may use, at most {largest} on one", "kube-scheduler",
                         largest, together), judged
    return PodReason("InsufficientGPU", f"{named}: needs {count} {driver} devices on one node: {together} are free "
                                        "on all the nodes it may use together", "kube-scheduler",
                     largest, together), judged


def claiming_pods(pods: Sequence[Pod]) -> list[Pod]:
    """The pending pods that claim devices and ask for no GPUs as extended resources (those are judged as any
    other GPU pod)."""
    return [p for p in pods if p.spec.resource_claims and not p.bound and not p.terminal
            and p.metadata.deletion_timestamp is None and p.spec.gpu_request() is None]


def claim_rows(claiming: Sequence[Pod], objects: PodObjects, nodes: Sequence[Node], use: dict[str, NodeUse]):
    """The ``pending`` rows of the workloads whose pods claim GPUs through DRA (kubectl_runs.pods.pending's
    PendingRow): pods, devices asked, one reason, the DeviceClass."""
    from .pending import PendingRow

    devices = device_use(objects)
    shapes = Shapes(nodes, use)
    base: dict[bytes, tuple[NodeFit, ...]] = {}
    groups: dict[tuple[str, str, str], list[tuple[Pod, tuple[ClaimAsk, ...], PodReason]]] = {}
    for pod in claiming:
        asks = gpu_claims(pod, objects)
        if not asks:
            continue
        key = msgspec.json.encode(pod.spec)
        fits = base.get(key)
        if fits is None:
            fits = base[key] = fleet_fit(pod.spec, nodes, (), use=use, shapes=shapes)
        why, _judged = claim_reason(pod, fits, asks, devices)
        owner = workload_of(pod)
        groups.setdefault((owner.namespace, owner.kind, owner.name), []).append((pod, asks, why))
    rows = []
    for (namespace, kind, name), members in sorted(groups.items()):
        codes: dict[str, int] = {}
        for _pod, _asks, why in members:
            codes[why.code] = codes.get(why.code, 0) + 1
        code = min(codes.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        first = next(why for _p, _a, why in members if why.code == code)
        message = first.message if len(codes) == 1 else (
            f"{first.message} ({len(members) - codes[code]} of {len(members)} pods: another reason)")
        devices_asked = sum(ask.devices or 0 for _p, asks, _w in members for ask in asks if not ask.allocated)
        classes = sorted({ask.device_class for _p, asks, _w in members for ask in asks})
        created = [p.metadata.creation_timestamp for p, _a, _w in members if p.metadata.creation_timestamp]
        rows.append(PendingRow(kind, namespace, name, len(members), devices_asked, None, None,
                               rfc3339(min(created)) if created else None, first.admitter, code, message,
                               ", ".join(classes)))
    return rows
