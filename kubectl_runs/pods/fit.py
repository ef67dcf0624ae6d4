"""kube-scheduler's filters that decide where a GPU pod may go, recomputed (Kubernetes v1.33's default profile, in
its order): NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit. For each node the first
filter that rejects the pod gives the node's reasons, in the scheduler's own words, so that the histogram of
``verdict`` is the one its FailedScheduling message carries (``0/N nodes are available: …``, reasons sorted as
strings). What the scheduler also checks and GPU placement rarely meets (host ports, volumes, topology spread,
inter-pod affinity, DRA) is not recomputed: ``explain pod`` shows the scheduler's message beside ours and says
where they differ.

Pure functions over records: a pod's spec, the Nodes, and the pods bound to them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ..corev1 import PodSpec, Toleration, quantity, untolerated
from ..model import Node
from .model import Pod

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
UNSCHEDULABLE = "node(s) were unschedulable"
NODE_NAME = "node(s) didn't match the requested node name"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"


def taint_reason(taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


@dataclass(frozen=True)
class NodeUse:
    """What the pods bound to a node request (cpu in millicores, memory in bytes, the rest in units), and how
    many pods it runs."""

    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    holders: tuple[str, ...] = ()  # namespace/name of the pods on it that request GPUs


@dataclass(frozen=True)
class NodeFit:
    """One node against one pod: the scheduler's reasons (empty when the pod fits), the filter that gave them,
    and for each resource the pod asks, what the node has left."""

    node: str
    reasons: tuple[str, ...]
    filter: str = ""
    free: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)  # of the resources the pod asks

    @property
    def fits(self) -> bool:
        return not self.reasons


def node_use(pods: Iterable[Pod]) -> dict[str, NodeUse]:
    """Per node name, the requests of the pods the scheduler counts there (bound, not finished)."""
    requested: dict[str, dict[str, int]] = {}
    counts: Counter[str] = Counter()
    holders: dict[str, list[str]] = {}
    for pod in pods:
        if not pod.holds_node:
            continue
        name = pod.spec.node_name
        counts[name] += 1
        mine = requested.setdefault(name, {})
        for resource, amount in pod.spec.requests().items():
            mine[resource] = mine.get(resource, 0) + amount
        if pod.spec.gpu_request() is not None:
            holders.setdefault(name, []).append(pod.key)
    return {name: NodeUse(requested.get(name, {}), counts[name], tuple(sorted(holders.get(name, ()))))
            for name in counts}


def _tolerates_cordon(tolerations: tuple[Toleration, ...]) -> bool:
    cordon = _Taint(UNSCHEDULABLE_TAINT, "NoSchedule")
    return any(t.tolerates(cordon) for t in tolerations)


@dataclass(frozen=True)
class _Taint:
    key: str
    effect: str
    value: str = ""


def fit(spec: PodSpec, node: Node, use: NodeUse | None = None, asked: dict[str, int] | None = None) -> NodeFit:
    """The first of the scheduler's filters that rejects ``spec`` on ``node``, with its reasons."""
    before = before_resources(spec, node)
    if before is not None:
        return before
    return resources_fit(node, use, spec.requests() if asked is None else asked)


def before_resources(spec: PodSpec, node: Node) -> NodeFit | None:
    """The filters before NodeResourcesFit (cordon, node name, taints, selector and affinity): the first that
    rejects, or None."""
    name = node.metadata.name
    if node.spec.unschedulable and not _tolerates_cordon(spec.tolerations):
        return NodeFit(name, (UNSCHEDULABLE,), "NodeUnschedulable")
    if spec.node_name and spec.node_name != name:
        return NodeFit(name, (NODE_NAME,), "NodeName")
    taint = untolerated(node.spec.taints, spec.tolerations)
    if taint is not None:
        return NodeFit(name, (taint_reason(taint),), "TaintToleration")
    if not spec.matches_node(node.metadata.labels):
        return NodeFit(name, (AFFINITY,), "NodeAffinity")
    return None


def resources_fit(node: Node, use: NodeUse | None, asked: dict[str, int]) -> NodeFit:
    """NodeResourcesFit: the pod count, then each resource asked against what the node has left."""
    use = use or NodeUse()
    allocatable = node.status.allocatable
    reasons = []
    if "pods" in allocatable and use.pods + 1 > quantity(allocatable["pods"], "pods"):
        reasons.append(TOO_MANY_PODS)
    free, offered = {}, {}
    for resource, amount in sorted(asked.items()):
        if amount <= 0:
            continue
        offered[resource] = quantity(allocatable.get(resource), resource)
        left = offered[resource] - use.requested.get(resource, 0)
        free[resource] = left
        if amount > left:
            reasons.append(insufficient(resource))
    return NodeFit(node.metadata.name, tuple(reasons), "NodeResourcesFit" if reasons else "", free, offered)


def fleet_fit(spec: PodSpec, nodes: Iterable[Node], pods: Iterable[Pod],
              use: dict[str, NodeUse] | None = None, shapes: Shapes | None = None, named: bool = True
              ) -> tuple[NodeFit, ...]:
    """Every node against the pod, in the nodes' order (``use``: ``node_use`` of the pods, when already known;
    ``shapes``: ``Shapes`` of the nodes, to judge many pods: the filters before resources are judged once per
    set of labels, taints and cordon, NodeResourcesFit once per node shape; ``named=False``: a node of a shape
    judged before gets that node's fit, name and all — for counting, not for naming nodes)."""
    use = node_use(pods) if use is None else use
    asked = spec.requests()
    if shapes is None or spec.node_name:  # NodeName tells nodes apart by name
        return tuple(fit(spec, node, use.get(node.metadata.name), asked) for node in nodes)
    static: dict[int, NodeFit | None] = {}
    judged: dict[int, NodeFit] = {}
    out = []
    for node, outside, room in zip(shapes.nodes, shapes.statics, shapes.rooms, strict=True):
        name = node.metadata.name
        if outside not in static:
            static[outside] = before_resources(spec, node)
        got = static[outside]
        if got is None:
            got = judged.get(room)
            if got is None:
                got = judged[room] = resources_fit(node, use.get(name), asked)
        out.append(got if not named or got.node == name else replace(got, node=name))
    return tuple(out)


class Shapes:
    """The nodes, each with its static shape (a number for its labels, taints and cordon: what the filters before
    resources read) and its room (a number for what each resource offers and has left, and whether one more pod
    may run: what NodeResourcesFit reads)."""

    def __init__(self, nodes: Iterable[Node], use: dict[str, NodeUse]):
        self.nodes = tuple(nodes)
        outside: dict[tuple, int] = {}
        inside: dict[tuple, int] = {}
        statics, rooms = [], []
        for node in self.nodes:
            held = use.get(node.metadata.name) or NodeUse()
            static = (tuple(sorted(node.metadata.labels.items())), node.spec.taints, node.spec.unschedulable)
            statics.append(outside.setdefault(static, len(outside)))
            offered = {r: quantity(v, r) for r, v in node.status.allocatable.items()}
            left = tuple(sorted((r, offered.get(r, 0), offered.get(r, 0) - held.requested.get(r, 0))
                                for r in {*offered, *held.requested}))
            pods_ok = "pods" not in offered or held.pods + 1 <= offered["pods"]
            rooms.append(inside.setdefault((left, "pods" in offered, pods_ok), len(inside)))
        self.statics = tuple(statics)
        self.rooms = tuple(rooms)


def histogram(fits: Iterable[NodeFit]) -> dict[str, int]:
    """Nodes per reason, as the scheduler counts them (a node short of two resources counts under both)."""
    counts: Counter[str] = Counter()
    for one in fits:
        counts.update(one.reasons)
    return dict(counts)


def verdict(fits: tuple[NodeFit, ...]) -> str | None:
    """The scheduler's ``0/N nodes are available: …`` for these fits (its FitError text without the preemption
    part), or None when some node fits."""
    if any(one.fits for one in fits):
        return None
    parts = sorted(f"{count} {reason}" for reason, count in histogram(fits).items())
    return f"0/{len(fits)} nodes are available: {', '.join(parts)}."
