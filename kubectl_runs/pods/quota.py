"""ResourceQuota rejections: pods that were never created. The API server's quota admission refuses a pod whose
requests would take a namespace's ResourceQuota past its ``hard`` limits; for a pod made by a controller (Job,
ReplicaSet, StatefulSet…) the refusal lands only as a ``FailedCreate`` Event on that controller, in the API
server's words, as the controller records it::

    Error creating: pods "train-x7k2p" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8,
    used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=8

The message names only the resources that were exceeded. Here it is read back (``rejections``) and judged against
the ResourceQuota as it is now (``shortfalls``): how much of each resource the quota must grow by for one more such
pod (``used + requested - hard``). Where the quota's status has no ``used`` for a resource (no quota controller has
counted it yet), the namespace's live pods are counted instead, each container's requests defaulted as the API
server and the LimitRanger admission do (``effective_requests``: a limit stands for a missing request, else the
namespace's LimitRange ``defaultRequest``, else its ``default``). Pure functions over records."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..corev1 import GPU_RESOURCES, PodSpec, quantity, show_quantity
from .model import Event, LimitRange, Pod, ResourceQuota

_QUOTA = re.compile(r"exceeded quota: (?P<quota>[^,\s]+), requested: (?P<requested>\S+), used: (?P<used>\S+), "
                    r"limited: (?P<limited>\S+)")
_POD = re.compile(r'pods "(?P<name>[^"]*)" is forbidden')
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class QuotaRejection:
    """The newest FailedCreate Event of one controller whose message is a quota refusal, read back."""

    namespace: str
    owner_kind: str  # Job, ReplicaSet, StatefulSet, … as the Event's involvedObject names it
    owner_name: str
    owner_uid: str
    pod: str  # the name the refused pod would have had ("" when the message does not say)
    quota: str  # the ResourceQuota's name
    requested: dict[str, str]  # quota resource name (requests.nvidia.com/gpu, requests.cpu, pods…) -> quantity
    used: dict[str, str]
    limited: dict[str, str]
    message: str  # as the controller wrote it
    count: int
    when: datetime | None

    @property
    def gpus(self) -> tuple[str, int] | None:
        """(GPU resource, GPUs) the refused pod asks for, when the message names them."""
        for resource in GPU_RESOURCES:
            for name in (f"requests.{resource}", resource):
                if name in self.requested:
                    return resource, quantity(self.requested[name], resource)
        return None


@dataclass(frozen=True)
class Shortfall:
    """One exceeded resource of one ResourceQuota, as it stands now (``found``: the quota is in the snapshot;
    else the figures are the Event's). Quantities in the resource's unit (cpu in millicores)."""

    quota: str  # namespace/name
    resource: str  # as the quota names it
    hard: int
    used: int
    requested: int
    found: bool

    @property
    def raise_by(self) -> int:
        """How much ``hard`` must grow for one more such pod to be admitted (0: it has room now)."""
        return max(0, self.used + self.requested - self.hard)

    def show(self, value: int) -> str:
        return show_quantity(value, _unit(self.resource))


def parse(message: str) -> tuple[str, str, dict[str, str], dict[str, str], dict[str, str]] | None:
    """(pod name, quota, requested, used, limited) of a quota refusal, or None for another message."""
    found = _QUOTA.search(message)
    if not found:
        return None
    pod = _POD.search(message)
    return (pod["name"] if pod else "", found["quota"], _pairs(found["requested"]), _pairs(found["used"]),
            _pairs(found["limited"]))


def _pairs(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def rejections(events: tuple[Event, ...], pods: tuple[Pod, ...] = ()) -> tuple[QuotaRejection, ...]:
    """The newest quota refusal per controller, sorted by namespace, kind and name; a refusal is left out once a
    pod of that controller was created after it (the controller got its pod since: the refusal is history)."""
    newest: dict[tuple[str, str, str], tuple[Event, tuple]] = {}
    for event in events:
        if event.reason != "FailedCreate":
            continue
        parsed = parse(event.message)
        if parsed is None:
            continue
        ref = event.involved_object
        key = (event.metadata.namespace, ref.kind, ref.name)
        if key not in newest or _order(event) >= _order(newest[key][0]):
            newest[key] = (event, parsed)
    if not newest:
        return ()
    created: dict[tuple[str, str, str], datetime] = {}
    for pod in pods:
        owner = pod.controller
        made = pod.metadata.creation_timestamp
        if owner is None or made is None:
            continue
        key = (pod.metadata.namespace, owner.kind, owner.name)
        if key in newest and (key not in created or made > created[key]):
            created[key] = made
    out = []
    for key, (event, (pod, quota, requested, used, limited)) in sorted(newest.items()):
        if key in created and event.when is not None and created[key] > event.when:
            continue
        out.append(QuotaRejection(key[0], key[1], key[2], event.involved_object.uid, pod, quota, requested, used,
                                  limited, " ".join(event.message.split()), event.count or 1, event.when))
    return tuple(out)


def _order(event: Event) -> tuple:
    return (event.when is not None, event.when or datetime.min, event.count)


def shortfalls(rejection: QuotaRejection, quotas: tuple[ResourceQuota, ...], pods: tuple[Pod, ...] = (),
               limit_ranges: tuple[LimitRange, ...] = ()) -> tuple[Shortfall, ...]:
    """Each resource the refusal names, against the ResourceQuota as it is now: its ``status.hard`` (else
    ``spec.hard``), its ``status.used`` (else the namespace's live pods counted, ``quota_usage``), the request
    from the Event."""
    ns = rejection.namespace
    quota = next((q for q in quotas if q.metadata.namespace == ns and q.metadata.name == rejection.quota), None)
    counted: dict[str, int] | None = None
    out = []
    for resource in sorted(rejection.limited):
        unit = _unit(resource)
        requested = quantity(rejection.requested.get(resource), unit)
        if quota is None:
            out.append(Shortfall(f"{ns}/{rejection.quota}", resource, quantity(rejection.limited[resource], unit),
                                 quantity(rejection.used.get(resource), unit), requested, False))
            continue
        hard_map = quota.status.hard or quota.spec.hard
        hard = quantity(hard_map.get(resource, rejection.limited[resource]), unit)
        if resource in quota.status.used:
            used = quantity(quota.status.used[resource], unit)
        else:
            if counted is None:
                counted = quota_usage(ns, pods, limit_ranges)
            used = counted.get(resource, 0)
        out.append(Shortfall(f"{ns}/{rejection.quota}", resource, hard, used, requested, True))
    return tuple(out)


def quota_message(rejection: QuotaRejection, short: tuple[Shortfall, ...]) -> str:
    """``ResourceQuota research/gpu: requests.nvidia.com/gpu 4 of 8 used, 8 asked: raise it by 4``."""
    parts = [f"{s.resource} {s.show(s.used)} of {s.show(s.hard)} used, {s.show(s.requested)} asked" for s in short]
    raise_by = [f"{s.resource} by {s.show(s.raise_by)}" for s in short if s.raise_by > 0]
    then = f"raise {', '.join(raise_by)}" if raise_by else (
        f"it has room now: the {rejection.owner_kind} controller retries")
    return (f"ResourceQuota {rejection.namespace}/{rejection.quota} refuses its pods "
            f"({'; '.join(parts) or 'exceeded'}): {then}")


def gpus_of_owner(pods: tuple[Pod, ...], rejection: QuotaRejection) -> tuple[str, int] | None:
    """The GPUs asked by the controller's pods that exist, when the refusal does not name GPUs."""
    for pod in pods:
        owner = pod.controller
        if owner is not None and pod.metadata.namespace == rejection.namespace and owner.name == \
                rejection.owner_name and owner.kind == rejection.owner_kind:
            asked = pod.spec.gpu_request()
            if asked is not None:
                return asked
    return None


def _unit(resource: str) -> str:
    """The resource a quota name counts (``requests.cpu``, ``limits.cpu`` and ``cpu`` count cpu)."""
    for prefix in ("requests.", "limits."):
        if resource.startswith(prefix):
            return resource[len(prefix):]
    return resource


def quota_usage(namespace: str, pods: tuple[Pod, ...], limit_ranges: tuple[LimitRange, ...] = ()) -> dict[str, int]:
    """What the namespace's pods that are not finished charge a ResourceQuota, per quota resource name:
    ``requests.<r>`` (and ``<r>`` for cpu and memory) and ``limits.<r>`` of their effective requests and limits,
    and ``pods``."""
    defaults = container_defaults(namespace, limit_ranges)
    usage: dict[str, int] = {}
    for pod in pods:
        if pod.metadata.namespace != namespace or pod.status.phase in _TERMINAL:
            continue
        usage["pods"] = usage.get("pods", 0) + 1
        requests, limits = effective_requests(pod.spec, defaults)
        for resource, amount in requests.items():
            for name in (f"requests.{resource}", *((resource,) if resource in ("cpu", "memory") else ())):
                usage[name] = usage.get(name, 0) + amount
        for resource, amount in limits.items():
            usage[f"limits.{resource}"] = usage.get(f"limits.{resource}", 0) + amount
    return usage


def container_defaults(namespace: str, limit_ranges: tuple[LimitRange, ...]) -> tuple[dict, dict]:
    """(defaultRequest, default) of the namespace's LimitRanges' Container items, as LimitRanger applies them."""
    request: dict = {}
    limit: dict = {}
    for lr in limit_ranges:
        if lr.metadata.namespace != namespace:
            continue
        for item in lr.spec.limits:
            if item.type == "Container":
                for resource, value in item.default.items():
                    limit.setdefault(resource, value)
                for resource, value in item.default_request.items():
                    request.setdefault(resource, value)
    return request, limit


def effective_requests(spec: PodSpec, defaults: tuple[dict, dict] = ({}, {})) -> tuple[dict[str, int], dict[str, int]]:
    """A pod's requests and limits as quota admission counts them, summed over its containers: a container's
    missing limit is the LimitRange ``default``; its missing request is its limit, else the LimitRange
    ``defaultRequest``, else its ``default`` (LimitRanger, then the API server's defaulting)."""
    default_request, default_limit = defaults
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    peak_requests: dict[str, int] = {}
    peak_limits: dict[str, int] = {}
    for container in spec.containers:
        _charge(container, default_request, default_limit, requests, limits, _plus)
    for container in spec.init_containers:  # one init container at a time: the largest counts
        _charge(container, default_request, default_limit, peak_requests, peak_limits, max)
    for total, peak in ((requests, peak_requests), (limits, peak_limits)):
        for resource, amount in peak.items():
            total[resource] = max(total.get(resource, 0), amount)
    return requests, limits


def _plus(a: int, b: int) -> int:
    return a + b


def _charge(container, default_request: dict, default_limit: dict, requests: dict, limits: dict, combine) -> None:
    own = container.resources
    for resource, value in {**default_limit, **default_request, **own.limits, **own.requests}.items():
        requests[resource] = combine(requests.get(resource, 0), quantity(value, resource))
    for resource, value in {**default_limit, **own.limits}.items():
        limits[resource] = combine(limits.get(resource, 0), quantity(value, resource))
