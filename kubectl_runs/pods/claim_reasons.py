"""Why a pod that claims GPUs through DRA waits, in the reason codes of every other pending pod
(kubectl_runs.pods.reasons), and its workload's row in ``pending``: the message names the claims, their
DeviceClass and the devices they ask for, and counts devices where other pods count GPUs. Pure functions."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..model import Node
from ..timeutil import rfc3339
from .claims import ClaimAsk, ClaimIndex, Devices, claims_fit, describe, device_use, gpu_claims, needed
from .fit import NodeFit, NodeUse, Shapes, fleet_fit
from .model import Pod, PodObjects
from .owners import workload_of
from .reasons import PodReason, reason

_JUDGED_BEFORE = ("SchedulingGated", "OtherScheduler", "Cordoned", "UntoleratedTaint", "NodeSelector",
                  "InsufficientResources")


def claim_reason(pod: Pod, fits: Sequence[NodeFit], asks: Sequence[ClaimAsk],
                 devices: dict[str, dict[str, Devices]], judged: tuple[NodeFit, ...] | None = None,
                 core: PodReason | None = None) -> tuple[PodReason, tuple[NodeFit, ...]]:
    """(the reason, the fits with the DynamicResources filter added) of a pending pod whose claims ``asks`` for
    GPUs; ``fits``: its other filters over every node (``fit.fleet_fit``, one per node). Replicas ask alike:
    ``judged`` (``claims_fit(fits, asks, devices)``) and ``core`` (``reason_core``) when already known."""
    if judged is None:
        judged = claims_fit(fits, asks, devices)
    if core is None:
        core = reason_core(pod, fits, asks, judged)
    named = f"DRA {describe(asks)}"
    if core.code in _JUDGED_BEFORE:
        return PodReason(core.code, f"{core.message}; {named}", core.admitter), judged
    return PodReason(core.code, f"{named}: {core.message}", core.admitter, core.largest_block,
                     core.free_gpus), judged


def reason_core(pod: Pod, fits: Sequence[NodeFit], asks: Sequence[ClaimAsk], judged: Sequence[NodeFit]
                ) -> PodReason:
    """``claim_reason`` without the claims named: the same for every replica of a spec that asks the same
    devices."""
    base = reason(pod, fits)
    if base.code in _JUDGED_BEFORE:
        return base
    want = needed(asks)
    if not want:  # every claim allocated: the scheduler binds it where its devices are
        return PodReason("Fits", "allocated; kube-scheduler has not bound it yet", "kube-scheduler")
    driver, count = max(want.items(), key=lambda kv: (kv[1], kv[0]))
    eligible = [f for f in judged if f.fits or f.filter == "DynamicResources"]
    free = [f.free.get(driver, 0) for f in eligible]
    largest = max(free, default=0)
    together = sum(n for n in free if n > 0)
    fitting = sum(1 for f in eligible if f.fits)
    if fitting:
        return PodReason("Fits", f"the devices are free on {fitting} node(s) it may use; kube-scheduler has not "
                                 "allocated them yet", "kube-scheduler", largest, together)
    biggest = max((f.allocatable.get(driver, 0) for f in eligible), default=0)
    if not biggest:
        return PodReason("InsufficientGPU", f"no node it may use publishes {driver} devices (ResourceSlices)",
                         "kube-scheduler")
    if count > biggest:
        return PodReason("ExceedsNodeCapacity", f"needs {count} {driver} devices on one node: the largest node it "
                                                f"may use publishes {biggest}", "kube-scheduler", largest, together)
    if together >= count:
        return PodReason("Fragmented", f"needs {count} {driver} devices on one node: {together} are free on the "
                                       f"nodes it may use, at most {largest} on one", "kube-scheduler",
                         largest, together)
    return PodReason("InsufficientGPU", f"needs {count} {driver} devices on one node: {together} are free on all "
                                        "the nodes it may use together", "kube-scheduler", largest, together)


def claiming_pods(pods: Sequence[Pod]) -> list[Pod]:
    """The pending pods that claim devices and ask for no GPUs as extended resources (those are judged as any
    other GPU pod)."""
    return [p for p in pods if p.spec.resource_claims and not p.bound and not p.terminal
            and p.metadata.deletion_timestamp is None and p.spec.gpu_request() is None]


def claim_rows(claiming: Sequence[Pod], objects: PodObjects, nodes: Sequence[Node], use: dict[str, NodeUse],
               shapes: Shapes | None = None, devices: dict[str, dict[str, Devices]] | None = None):
    """The ``pending`` rows of the workloads whose pods claim GPUs through DRA (kubectl_runs.pods.pending's
    PendingRow): pods, devices asked, one reason, the DeviceClass. ``shapes``/``devices``: ``Shapes(nodes, use)``
    and ``device_use(objects)``, when already known."""
    from .pending import PendingRow

    devices = device_use(objects) if devices is None else devices
    index = ClaimIndex.of(objects)
    shapes = Shapes(nodes, use) if shapes is None else shapes
    names = [n.metadata.name for n in shapes.nodes]
    base: dict[bytes, tuple[NodeFit, ...]] = {}
    judged: dict[tuple[bytes, tuple], tuple[tuple[NodeFit, ...], PodReason]] = {}  # replicas: the same spec and
    # devices asked, the same fits and reason (but for the claims' names)
    groups: dict[tuple[str, str, str], list[tuple[Pod, tuple[ClaimAsk, ...], PodReason]]] = {}
    for pod in claiming:
        asks = gpu_claims(pod, objects, index)
        if not asks:
            continue
        key = msgspec.json.encode(pod.spec)
        fits = base.get(key)
        if fits is None:
            fits = base[key] = fleet_fit(pod.spec, nodes, (), use=use, shapes=shapes, named=False)
        wanted = (key, tuple(sorted(needed(asks).items())))
        if wanted not in judged:
            with_claims = claims_fit(fits, asks, devices, names, every=False)
            judged[wanted] = (with_claims, reason_core(pod, fits, asks, with_claims))
        why, _judged = claim_reason(pod, fits, asks, devices, *judged[wanted])
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
