"""The core/v1 pieces that decide where a pod may run, shared by every slice that places pods: the Kueue slice
(a Workload's pod templates, a ResourceFlavor's taints and tolerations) and the pod explainer (a Pod against the
Nodes, as kube-scheduler's filters see them). Typed, frozen records of only the fields placement reads, the
matching rules of ``k8s.io/api/core/v1`` (Toleration.ToleratesTaint, NodeSelectorRequirement) and quantities as
the scheduler and Kueue count them. Imports nothing of kubectl-runs."""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

import msgspec

Quantity = str | int | float
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
TAINT_EFFECTS_THAT_FILTER = ("NoSchedule", "NoExecute")  # PreferNoSchedule only scores


class CoreRecord(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """Base of the core/v1 records: frozen, untracked by the GC, camelCase on the wire."""


class KTaint(CoreRecord):
    key: str
    effect: str = ""
    value: str = ""

    def __str__(self) -> str:  # corev1.Taint.ToString
        if self.value:
            return f"{self.key}={self.value}:{self.effect}"
        return f"{self.key}:{self.effect}"


class Toleration(CoreRecord):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: KTaint) -> bool:
        """corev1.Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("Equal", ""):
            return self.value == taint.value
        return False


class Requirement(CoreRecord):
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.key)
        if self.operator == "In":
            return have is not None and have in self.values
        if self.operator == "NotIn":
            return have is None or have not in self.values
        if self.operator == "Exists":
            return have is not None
        if self.operator == "DoesNotExist":
            return have is None
        if self.operator in ("Gt", "Lt") and have is not None and self.values:
            try:
                mine, bound = int(have), int(self.values[0])
            except ValueError:
                return False
            return mine > bound if self.operator == "Gt" else mine < bound
        return False


class NodeSelectorTerm(CoreRecord):
    match_expressions: tuple[Requirement, ...] = ()


class NodeSelector(CoreRecord):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class NodeAffinity(CoreRecord):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(CoreRecord):
    node_affinity: NodeAffinity | None = None


class ResourceRequirements(CoreRecord):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}


class Container(CoreRecord):
    name: str = ""
    resources: ResourceRequirements = ResourceRequirements()
    restart_policy: str = ""  # "Always" on an init container: a sidecar, running beside the main containers


class PodSpec(CoreRecord):
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    node_selector: dict[str, str] = {}
    tolerations: tuple[Toleration, ...] = ()
    affinity: Affinity | None = None
    overhead: dict[str, Quantity] = {}
    node_name: str = ""
    scheduler_name: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    scheduling_gates: tuple[SchedulingGate, ...] = ()
    resource_claims: tuple[PodResourceClaim, ...] = ()

    def requests(self) -> dict[str, int]:
        """What the pod asks of a node, as kube-scheduler sums it (``resource.PodRequests``): the containers'
        requests added, each init container's taken as a peak (a sidecar's stays requested after it starts), the
        larger of the two, plus the overhead; cpu in millicores, memory in bytes, the rest in whole units."""
        if not self.init_containers and not self.overhead and len(self.containers) == 1:  # the common case
            return {r: quantity(v, r) for r, v in self.containers[0].resources.requests.items()}
        total: dict[str, int] = {}
        for container in self.containers:
            _add(total, container.resources.requests)
        sidecars: dict[str, int] = {}
        peak: dict[str, int] = {}
        for container in self.init_containers:
            if container.restart_policy == "Always":
                _add(sidecars, container.resources.requests)
                _max(peak, sidecars)
            else:
                step = dict(sidecars)
                _add(step, container.resources.requests)
                _max(peak, step)
        _add(total, sidecars, values=True)
        _max(total, peak)
        _add(total, self.overhead)
        return total

    def gpu_request(self, asked: dict[str, int] | None = None) -> tuple[str, int] | None:
        """(resource, count) of the GPUs the pod asks for, or None (``asked``: ``requests()``, when known)."""
        if asked is None:
            asked = self.requests()
        for resource in GPU_RESOURCES:
            if asked.get(resource):
                return resource, asked[resource]
        return None

    def required_terms(self) -> tuple[NodeSelectorTerm, ...]:
        affinity = self.affinity
        if affinity is None or affinity.node_affinity is None:
            return ()
        required = affinity.node_affinity.required_during_scheduling_ignored_during_execution
        return () if required is None else required.node_selector_terms

    def matches_node(self, labels: dict[str, str]) -> bool:
        """kube-scheduler's NodeAffinity filter: every nodeSelector pair, and (when there are required terms)
        at least one term whose expressions all match. A term with no expressions matches nothing."""
        if any(labels.get(key) != want for key, want in self.node_selector.items()):
            return False
        terms = self.required_terms()
        if not terms:
            return True
        return any(term.match_expressions and all(e.matches(labels) for e in term.match_expressions)
                   for term in terms)


class SchedulingGate(CoreRecord):
    name: str = ""


class PodResourceClaim(CoreRecord):
    name: str = ""
    resource_claim_name: str = ""
    resource_claim_template_name: str = ""


def _add(total: dict[str, int], quantities: dict, values: bool = False) -> None:
    for resource, value in quantities.items():
        total[resource] = total.get(resource, 0) + (value if values else quantity(value, resource))


def _max(total: dict[str, int], other: dict[str, int]) -> None:
    for resource, value in other.items():
        if value > total.get(resource, 0):
            total[resource] = value


class OwnerReference(CoreRecord):
    kind: str = ""
    name: str = ""
    api_version: str = ""
    uid: str = ""
    controller: bool = False


def untolerated(taints, tolerations) -> object | None:
    """The first taint that filters (NoSchedule, NoExecute) and no toleration tolerates, else None."""
    for taint in taints:
        if taint.effect not in TAINT_EFFECTS_THAT_FILTER:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


# --- quantities ------------------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(1000),
    "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def quantity(value: Quantity | None, resource: str) -> int:
    """A Kubernetes quantity as Kueue counts it (``resources.ResourceValue``): millicores for ``cpu``, whole
    units rounded up for everything else (GPUs: ``"8"`` -> 8). A value that is not a quantity counts 0."""
    if value.__class__ is str and value.isdigit():  # the common case: "8"
        return int(value) * 1000 if resource == "cpu" else int(value)
    if value is None:
        return 0
    if isinstance(value, int):
        return value * 1000 if resource == "cpu" else value
    return _parse(str(value), resource == "cpu")


@lru_cache(maxsize=4096)
def _parse(text: str, milli: bool) -> int:
    match = _QUANTITY.match(text.strip())
    if not match:
        return 0
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        return 0
    if milli:
        number *= 1000
    return int(number.to_integral_value(rounding=ROUND_CEILING))


def show_quantity(value: int, resource: str) -> str:
    """Kueue's ``ResourceQuantityString``: cpu in cores (``500m``), the rest as whole units."""
    if resource == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    return str(value)
