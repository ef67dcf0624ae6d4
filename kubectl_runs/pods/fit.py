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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import msgspec

from ..corev1 import GPU_RESOURCES, PodSpec, Toleration, quantity, untolerated
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


def node_use(pods: Sequence[Pod], requests: Sequence[dict[str, int]] | None = None) -> dict[str, NodeUse]:
    """Per node name, the requests of the pods the scheduler counts there (bound, not finished); ``requests``:
    each pod's ``spec.requests()``, in the pods' order, when already known."""
    requested: dict[str, dict[str, int]] = {}
    counts: Counter[str] = Counter()
    holders: dict[str, list[str]] = {}
    for i, pod in enumerate(pods):
        if not pod.holds_node:
            continue
        name = pod.spec.node_name
        counts[name] += 1
        mine = requested.setdefault(name, {})
        asked = pod.spec.requests() if requests is None else requests[i]
        for resource, amount in asked.items():
            mine[resource] = mine.get(resource, 0) + amount
        if any(asked.get(r) for r in GPU_RESOURCES):
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


def weighted_fit(spec: PodSpec, shapes: Shapes, use: dict[str, NodeUse]) -> tuple[list[NodeFit], list[int]]:
    """For counting, not for naming nodes: the filters before resources judged once per static shape (on its first
    node); the nodes of the shapes that pass, pooled by room, NodeResourcesFit judged once per room (on its first
    node); each fit with the number of nodes it stands for. The same counts as ``fleet_fit`` (a unit test holds
    it so)."""
    if spec.node_name:  # NodeName tells nodes apart by name
        fits = fleet_fit(spec, shapes.nodes, (), use=use)
        return list(fits), [1] * len(fits)
    nodes = shapes.nodes
    fits: list[NodeFit] = []
    weights: list[int] = []
    passing = []
    for static, first in enumerate(shapes.static_first):
        turned = before_resources(spec, nodes[first])
        if turned is None:
            passing.append(static)
        else:
            fits.append(turned)
            weights.append(shapes.static_nodes[static])
    if len(passing) * 2 > len(shapes.static_first):  # most pass: every room, less the rooms of those that fail
        pooled = dict(shapes.room_nodes)
        keep = set(passing)
        for static in range(len(shapes.static_first)):
            if static not in keep:
                for room, count in shapes.static_rooms[static].items():
                    pooled[room] -= count
    else:
        pooled = {}
        for static in passing:
            for room, count in shapes.static_rooms[static].items():
                pooled[room] = pooled.get(room, 0) + count
    asked = spec.requests()
    for room, count in pooled.items():
        if count:
            node = nodes[shapes.room_first[room]]
            fits.append(resources_fit(node, use.get(node.metadata.name), asked))
            weights.append(count)
    return fits, weights


class Shapes:
    """The nodes, each with its static shape (a number for its labels, taints and cordon: what the filters before
    resources read) and its room (a number for what each resource offers and has left, and whether one more pod
    may run: what NodeResourcesFit reads); per static shape its first node, its number of nodes and its nodes per
    room; per room its first node and its number of nodes."""

    def __init__(self, nodes: Iterable[Node], use: dict[str, NodeUse]):
        self.nodes = tuple(nodes)
        encode = msgspec.json.encode
        outside: dict[tuple, int] = {}
        inside: dict[tuple, int] = {}
        statics, rooms = [], []
        self.static_first: list[int] = []
        self.static_nodes: list[int] = []
        self.static_rooms: list[dict[int, int]] = []
        self.room_first: list[int] = []
        self.room_nodes: dict[int, int] = {}
        empty = NodeUse()
        for i, node in enumerate(self.nodes):
            held = use.get(node.metadata.name) or empty
            # equal keys mean equal inputs to the filters (two orders of the same labels only judge twice)
            static_key = (encode(node.metadata.labels), node.spec.taints, node.spec.unschedulable)
            static = outside.get(static_key)
            if static is None:
                static = outside[static_key] = len(self.static_first)
                self.static_first.append(i)
                self.static_nodes.append(0)
                self.static_rooms.append({})
            allocatable = node.status.allocatable
            room_key = (encode(allocatable), encode(held.requested),
                        "pods" not in allocatable or held.pods + 1 <= quantity(allocatable["pods"], "pods"))
            room = inside.get(room_key)
            if room is None:
                room = inside[room_key] = len(self.room_first)
                self.room_first.append(i)
                self.room_nodes[room] = 0
            statics.append(static)
            rooms.append(room)
            self.static_nodes[static] += 1
            by_room = self.static_rooms[static]
            by_room[room] = by_room.get(room, 0) + 1
            self.room_nodes[room] += 1
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
