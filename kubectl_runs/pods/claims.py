"""Pods that claim their GPUs through Dynamic Resource Allocation (resource.k8s.io), named and counted: which of a
pod's claims ask for GPUs (their DeviceClass selects a GPU driver), how many devices each asks, and, per node, the
devices its ResourceSlices publish and how many of them no claim holds.

What is recomputed is the device count by driver, the question GPU placement turns on: a node passes when, after
the filters before resources (cordon, taints, selector and affinity: kubectl_runs.pods.fit), its slices have as
many devices of each driver free as the pod's claims ask for together. A DeviceClass or request that also selects
devices by attribute (a CEL expression beyond the driver, a request's own selectors) may leave fewer devices
eligible than that: the scheduler's own verdict is always shown beside this one. Pure functions over records."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .fit import NodeFit
from .model import DeviceClass, Pod, PodObjects, ResourceClaim, ResourceClaimTemplate

GPU_DRIVERS = ("gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com")
# kube-scheduler's DynamicResources filter, in its own words (Kubernetes v1.33)
CANNOT_ALLOCATE = "cannot allocate all claims"
_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")


@dataclass(frozen=True)
class ClaimAsk:
    """One request of one of the pod's claims that asks for GPUs."""

    entry: str  # the pod's name for the claim (spec.resourceClaims[].name)
    claim: str  # the ResourceClaim (namespace/name), or the template's when no claim was made from it yet
    source: str  # "ResourceClaim" or "ResourceClaimTemplate"
    request: str  # the request's name in the claim
    device_class: str
    driver: str  # the GPU driver the class selects (its name when the class says none)
    devices: int | None  # None: allocationMode All
    allocated: tuple[str, ...] = ()  # the nodes of its allocated devices (empty: not allocated)


@dataclass(frozen=True)
class Devices:
    """One driver's devices on one node: published by its ResourceSlices, and those no claim holds; the claims
    that hold the others, with the pods they are reserved for."""

    total: int = 0
    free: int = 0
    holders: tuple[str, ...] = field(default=())  # namespace/name of the claims holding devices there


def gpu_driver(name: str, device_class: DeviceClass | None) -> str | None:
    """The GPU driver a DeviceClass selects: the one its CEL selectors compare ``device.driver`` to, else the
    class's own name when it is a GPU driver's (NVIDIA's and AMD's drivers name their class after themselves),
    else the name when it says "gpu"; None: not a GPU class."""
    if device_class is not None:
        for selector in device_class.spec.selectors:
            if selector.cel is not None:
                for driver in _DRIVER.findall(selector.cel.expression):
                    if driver in GPU_DRIVERS or "gpu" in driver.lower():
                        return driver
    if name in GPU_DRIVERS or "gpu" in name.lower():
        return name
    return None


@dataclass(frozen=True)
class ClaimIndex:
    """The DRA objects of a snapshot by key, made once for many pods."""

    claims: dict[tuple[str, str], ResourceClaim]
    templates: dict[tuple[str, str], ResourceClaimTemplate]
    classes: dict[str, DeviceClass]
    slices: dict[tuple[str, str, str], str]  # (driver, pool, device) -> node

    @classmethod
    def of(cls, objects: PodObjects) -> ClaimIndex:
        return cls({(c.metadata.namespace, c.metadata.name): c for c in objects.claims},
                   {(t.metadata.namespace, t.metadata.name): t for t in objects.claim_templates},
                   {c.metadata.name: c for c in objects.device_classes}, _slice_nodes(objects))


def gpu_claims(pod: Pod, objects: PodObjects, index: ClaimIndex | None = None) -> tuple[ClaimAsk, ...]:
    """The requests of ``pod``'s claims that ask for GPUs, in the pod's order. A claim made from a template is read
    when it exists (its name is in the pod's status), else the template; a claim or template not read (not there,
    or not readable) asks for nothing known. ``index``: ``ClaimIndex.of(objects)``, when judging many pods."""
    if not pod.spec.resource_claims:
        return ()
    index = ClaimIndex.of(objects) if index is None else index
    namespace = pod.metadata.namespace
    generated = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
    out: list[ClaimAsk] = []
    for entry in pod.spec.resource_claims:
        name = entry.resource_claim_name or generated.get(entry.name, "")
        claim = index.claims.get((namespace, name)) if name else None
        template = index.templates.get((namespace, entry.resource_claim_template_name))
        if claim is not None:
            spec, where, source = claim.spec, f"{namespace}/{name}", "ResourceClaim"
        elif template is not None:
            spec = template.spec.spec
            where, source = f"{namespace}/{entry.resource_claim_template_name}", "ResourceClaimTemplate"
        else:
            continue
        nodes = _allocated_nodes(claim, index.slices) if claim is not None else {}
        for request in spec.devices.requests:
            asked = request.asked
            driver = gpu_driver(asked.device_class_name, index.classes.get(asked.device_class_name))
            if driver is not None:
                out.append(ClaimAsk(entry.name, where, source, request.name, asked.device_class_name, driver,
                                    asked.devices, tuple(sorted(nodes.get(request.name, ())))))
    return tuple(out)


def _slice_nodes(objects: PodObjects) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the node of the ResourceSlice that publishes it (node-local slices only)."""
    return {(s.spec.driver, s.spec.pool.name, d.name): s.spec.node_name
            for s in _current_slices(objects.resource_slices) if s.spec.node_name for d in s.spec.devices}


def _current_slices(slices):
    """The slices of each pool's newest generation (a driver replacing its slices leaves older ones for a while)."""
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        key = (s.spec.driver, s.spec.pool.name)
        newest[key] = max(newest.get(key, 0), s.spec.pool.generation)
    return [s for s in slices if s.spec.pool.generation == newest[(s.spec.driver, s.spec.pool.name)]]


def _allocated_nodes(claim: ResourceClaim, slices: dict[tuple[str, str, str], str]) -> dict[str, set[str]]:
    """Per request of an allocated claim, the nodes of its devices."""
    allocation = claim.status.allocation
    out: dict[str, set[str]] = {}
    if allocation is None:
        return out
    for result in allocation.devices.results:
        node = slices.get((result.driver, result.pool, result.device))
        if node:
            out.setdefault(result.request.partition("/")[0], set()).add(node)
    return out


def device_use(objects: PodObjects) -> dict[str, dict[str, Devices]]:
    """Per node, per driver: the devices its ResourceSlices publish, how many no claim holds, and the claims that
    hold the others."""
    current = _current_slices(objects.resource_slices)
    held: dict[tuple[str, str, str], str] = {}
    for claim in objects.claims:
        if claim.status.allocation is not None:
            for result in claim.status.allocation.devices.results:
                held[(result.driver, result.pool, result.device)] = f"{claim.metadata.namespace}/{claim.metadata.name}"
    out: dict[str, dict[str, list]] = {}
    for s in current:
        if not s.spec.node_name:
            continue
        mine = out.setdefault(s.spec.node_name, {}).setdefault(s.spec.driver, [0, 0, set()])
        for device in s.spec.devices:
            mine[0] += 1
            holder = held.get((s.spec.driver, s.spec.pool.name, device.name))
            if holder is None:
                mine[1] += 1
            else:
                mine[2].add(holder)
    return {node: {driver: Devices(total, free, tuple(sorted(holders))) for driver, (total, free, holders)
                   in drivers.items()} for node, drivers in out.items()}


def needed(asks: Iterable[ClaimAsk]) -> dict[str, int]:
    """Devices per driver that the pod's unallocated claims ask for on one node (``All``: at least one)."""
    out: dict[str, int] = {}
    for ask in asks:
        if not ask.allocated:
            out[ask.driver] = out.get(ask.driver, 0) + (1 if ask.devices is None else ask.devices)
    return out


def claims_fit(fits: Sequence[NodeFit], asks: Sequence[ClaimAsk], use: dict[str, dict[str, Devices]],
               names: Sequence[str] | None = None, every: bool = True) -> tuple[NodeFit, ...]:
    """``fits`` (kubectl_runs.pods.fit, the pod's other filters) with the DynamicResources filter after them: a node
    that passed them and lacks the free devices the claims ask for gets the scheduler's reason; each fit carries
    the devices free and published there per driver. ``names``: the nodes' names, in the fits' order, when the
    fits do not name them (``fleet_fit(named=False)``); ``every=False``: the fits the other filters turned away are
    kept as they are (counting needs only the others' devices)."""
    want = needed(asks)
    if not want:
        return tuple(fits)
    out = []
    none: dict[str, Devices] = {}
    for i, one in enumerate(fits):
        if not every and not one.fits:
            out.append(one)
            continue
        node = one.node if names is None else names[i]
        there = use.get(node, none)
        free = {driver: there[driver].free if driver in there else 0 for driver in want}
        total = {driver: there[driver].total if driver in there else 0 for driver in want}
        if one.fits and any(free[d] < n for d, n in want.items()):
            one = NodeFit(node, (CANNOT_ALLOCATE,), "DynamicResources", {**one.free, **free},
                          {**one.allocatable, **total})
        else:
            one = NodeFit(node, one.reasons, one.filter, {**one.free, **free}, {**one.allocatable, **total})
        out.append(one)
    return tuple(out)


def describe(asks: Sequence[ClaimAsk]) -> str:
    """``claim research/big (DeviceClass gpu.nvidia.com: 8 devices)``, each request once."""
    parts = []
    for ask in asks:
        count = "all devices" if ask.devices is None else f"{ask.devices} device{'s' if ask.devices != 1 else ''}"
        where = f" allocated on {', '.join(ask.allocated)}" if ask.allocated else ""
        kind = "claim" if ask.source == "ResourceClaim" else "claim template"
        parts.append(f"{kind} {ask.claim} (DeviceClass {ask.device_class}: {count}{where})")
    return "; ".join(parts)
