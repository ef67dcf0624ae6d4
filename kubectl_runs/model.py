"""Typed, frozen records of the objects kubectl-runs reads (API.md §1).

The records keep only the fields the engine reads; everything else in a Kubernetes object is skipped while
decoding, which is what makes loading 200,000 leases cheap (NOTES.md, "Loading big snapshots fast").
Python attribute names are snake_case; on the wire they are the API's camelCase, with ``gpus``/``gpu``
written ``GPUs``/``GPU`` as API.md spells them (``total_gpus`` <-> ``totalGPUs``).

Structs are declared ``gc=False``: they never form reference cycles, so the cyclic garbage collector need
not track millions of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from functools import cached_property
from typing import Annotated, Literal, Union

import msgspec

from .kueue.model import QUEUE_CLUSTER_SCOPED, QUEUE_KINDS, QueueObjects
from .pods.model import POD_CLUSTER_SCOPED, POD_KINDS, PodObjects

GROUP = "jobtree.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SNAPSHOT_TIME_ANNOTATION = "jobtree.dev/snapshot-time"
SNAPSHOT_ABSENT_ANNOTATION = "jobtree.dev/snapshot-absent-kinds"  # kinds whose CRD a live save found not installed
SNAPSHOT_CONTEXT_ANNOTATION = "jobtree.dev/snapshot-context"  # the kubeconfig context a live save read
SNAPSHOT_SERVER_ANNOTATION = "jobtree.dev/snapshot-server"  # the API server it read
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")

_WIRE_WORDS = {"gpus": "GPUs", "gpu": "GPU"}


def wire_name(python_name: str) -> str:
    """``max_gpu_hours`` -> ``maxGPUHours``: the API's camelCase with GPU(s) upper-cased."""
    first, *rest = python_name.split("_")
    return first + "".join(_WIRE_WORDS.get(word, word.capitalize()) for word in rest)


class Record(msgspec.Struct, frozen=True, gc=False, rename=wire_name, omit_defaults=True):
    """Base of every record: frozen, untracked by the GC, camelCase on the wire."""


Time = Annotated[datetime, msgspec.Meta(tz=True)]
# Every integer field is an int64, as in the CRDs' OpenAPI schemas (format: int64) and the API server's JSON:
# 1e30 or 2**63 is refused with the field named, not carried into the arithmetic.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
Positive = Annotated[int, msgspec.Meta(gt=0, le=INT64_MAX)]
NonNegative = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]

# The CRDs' bounds (crds/*.yaml: maxLength, minLength, maxItems, minItems), held by snapshots as by the API server:
# tests/unit/test_crd_bounds.py walks the CRDs and fails when a bound there is not the model's.
def Text(most: int, least: int = 0) -> msgspec.Meta:
    return msgspec.Meta(min_length=least, max_length=most) if least else msgspec.Meta(max_length=most)


def Items(most: int, least: int = 0) -> msgspec.Meta:
    return Text(most, least)


# Times the CRDs' CEL rules admit (lease start, envelope window, earliest start): 1970 to 9000, as --at takes.
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(9000, 1, 1, tzinfo=UTC)


def check_time(field: str, value: datetime, *, end: bool = False) -> None:
    if not (EARLIEST_TIME <= value <= LATEST_TIME if end else EARLIEST_TIME <= value < LATEST_TIME):
        raise ValueError(f"{field}: {value.isoformat()} is out of range: a time between 1970 and 9000 (the CRD's rule)")


OwnerPath = Annotated[str, Text(253, 1)]
NamespaceName = Annotated[str, Text(63, 1)]
ObjectName = Annotated[str, Text(253, 1)]
FlavorName = Annotated[str, Text(63, 1)]


class ObjectMeta(Record):
    name: str
    namespace: str = "default"
    uid: str = ""
    generation: Int64 = 0
    resource_version: str = ""
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class Namespaced(Record):
    """A namespaced object: ``namespace``, ``name`` and ``key`` (``namespace/name``) from its metadata."""

    metadata: ObjectMeta

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class ClusterObjectMeta(Record):
    """Metadata of a cluster-scoped object (a Node): no namespace."""

    name: str
    labels: dict[str, str] = {}
    creation_timestamp: Time | None = None


class ObjectRef(Record):
    namespace: NamespaceName
    name: ObjectName

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Condition(Record):
    type: str
    status: str
    reason: str = ""
    message: str = ""


# --- Node (core/v1, read only) ----------------------------------------------------------------------------


class Taint(Record):
    key: str
    effect: str = ""
    value: str = ""


class NodeSpec(Record):
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


class NodeStatus(Record):
    allocatable: dict[str, str | Int64] = {}

    def __post_init__(self) -> None:
        for resource in GPU_RESOURCES:
            value = self.allocatable.get(resource)
            if value is not None:
                gpu_count(value, resource)  # raises ValueError naming the resource and the value


OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


class Node(Record, tag_field="kind", tag="Node"):
    metadata: ClusterObjectMeta
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()
    api_version: Literal["v1"] = "v1"  # any other is refused; absent (list items) is v1

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def flavor(self) -> str | None:
        return self.metadata.labels.get("gpu.flavor")

    @property
    def domain(self) -> str | None:
        return self.metadata.labels.get("fabric.domain")

    @property
    def gpus(self) -> int:
        """GPUs the node offers: ``allocatable`` of nvidia.com/gpu or amd.com/gpu (both vendors count)."""
        total = 0
        for resource in GPU_RESOURCES:
            value = self.status.allocatable.get(resource)
            if value is not None:
                total += gpu_count(value, resource)
        return total

    @property
    def out_of_service(self) -> bool:
        return any(t.key == OUT_OF_SERVICE_TAINT for t in self.spec.taints)

    @property
    def schedulable(self) -> bool:
        """Takes new placement: not cordoned and not out of service."""
        return not self.spec.unschedulable and not self.out_of_service

    @property
    def slots(self) -> tuple[str, ...]:
        """``<node>#0 … <node>#(n-1)``; an out-of-service node holds no usable slots."""
        if self.out_of_service:
            return ()
        return tuple(f"{self.name}#{i}" for i in range(self.gpus))


_QUANTITY = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|m|k|M|G|T|P|E|)$")
# A node's slots are made one string per GPU: a count past this is a typo or an attack, not a node.
MAX_NODE_GPUS = 65_536
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str) -> Fraction | None:
    """A Kubernetes resource quantity (``8``, ``8k``, ``1Ki``, ``8e0``, ``500m``, ``1.5``) as an exact fraction,
    None when it is not one (apimachinery's resource.Quantity grammar)."""
    match = _QUANTITY.match(text)
    if match is None:
        return None
    sign, number, suffix = match.groups()
    value = Fraction(number)
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    else:
        exponent = int(suffix[1:]) if suffix[:1] in ("e", "E") and len(suffix) > 1 else _DECIMAL[suffix]
        if value and abs(exponent) > 40:  # beyond any count (and 10**huge would take forever to compute)
            return None
        value *= Fraction(10) ** exponent
    return -value if sign == "-" else value


def gpu_count(value: str | int, resource: str = "nvidia.com/gpu") -> int:
    """The GPUs a node's allocatable quantity stands for: a whole non-negative number (an extended resource
    cannot be fractional). ``"8"`` is by far the common case, and is read without the quantity grammar."""
    if isinstance(value, int):
        quantity: Fraction | int | None = value
    elif value.isdigit() and value.isascii() and len(value) < 5:  # "8": below the cap, no grammar needed
        return int(value)
    else:
        quantity = parse_quantity(value)
    if quantity is None or quantity < 0 or quantity != int(quantity):
        raise ValueError(f"allocatable {resource}: {value!r} is not a whole non-negative number of GPUs")
    if quantity > MAX_NODE_GPUS:
        raise ValueError(f"allocatable {resource}: {value!r} is {int(quantity):,} GPUs, more than one node can hold "
                         f"(kubectl-runs reads at most {MAX_NODE_GPUS:,})")
    return int(quantity)


# --- Budget -------------------------------------------------------------------------------------------------


class Lending(Record):
    allow: bool = False
    to: Annotated[tuple[Annotated[str, Text(255)], ...], Items(64)] = ()
    max_concurrency: NonNegative | None = None


class Envelope(Record):
    name: ObjectName
    flavor: FlavorName
    concurrency: Positive
    start: Time
    end: Time
    selector: dict[str, Annotated[str, Text(63)]] = {}
    max_gpu_hours: NonNegativeFloat | None = None
    lending: Lending | None = None

    def __post_init__(self) -> None:
        # The CRD's CEL rules, checked for snapshots too: a file never saw the API server.
        check_time(f"envelope {self.name}: start", self.start)
        check_time(f"envelope {self.name}: end", self.end, end=True)
        if self.end <= self.start:
            raise ValueError(f"envelope {self.name}: end must be after start")
        if self.max_gpu_hours is not None:
            window_hours = (self.end - self.start).total_seconds() / 3600.0
            if self.max_gpu_hours > self.concurrency * window_hours:
                raise ValueError(
                    f"envelope {self.name}: maxGPUHours {self.max_gpu_hours:g} is more than concurrency × window "
                    f"({self.concurrency} × {window_hours:g} h)"
                )

    def window_contains(self, at: datetime) -> bool:
        return self.start <= at < self.end

    def selects(self, labels: dict[str, str]) -> bool:
        """The envelope may pay for a node with these labels (``*`` = any value, ``{}`` = every node)."""
        for key, want in self.selector.items():
            have = labels.get(key)
            if have is None or (want != "*" and have != want):
                return False
        return True


class AggregateCap(Record):
    name: ObjectName
    envelopes: Annotated[tuple[Annotated[str, Text(253)], ...], Items(256)]
    max_concurrency: NonNegative


class BudgetSpec(Record):
    owner: OwnerPath
    envelopes: Annotated[tuple[Envelope, ...], Items(256)]
    aggregate_caps: Annotated[tuple[AggregateCap, ...], Items(64)] = ()

    def __post_init__(self) -> None:
        names = [e.name for e in self.envelopes]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"envelope names must be unique within a Budget: {', '.join(twice)} given twice")


class Budget(Namespaced, tag_field="kind", tag="Budget"):
    spec: BudgetSpec
    api_version: Literal["jobtree.dev/v1alpha1"] = "jobtree.dev/v1alpha1"  # any other is refused


# --- Run ----------------------------------------------------------------------------------------------------


class Resources(Record):
    gpu_type: FlavorName
    total_gpus: Positive


class Locality(Record):
    group_gpus: Positive | None = None
    allow_cross_group_spread: bool = True


class Malleable(Record):
    min_total_gpus: Positive
    max_total_gpus: Positive
    step_gpus: Positive = 1
    desired_total_gpus: Positive | None = None


class Funding(Record):
    allow_borrow: bool = False
    max_borrow_gpus: NonNegative | None = None
    sponsors: Annotated[tuple[Annotated[str, Text(253)], ...], Items(64)] = ()


class RunSpec(Record):
    resources: Resources
    locality: Locality | None = None
    spares_per_group: NonNegative = 0
    malleable: Malleable | None = None
    funding: Funding | None = None


class Eta(Record):
    estimated_completion: Time | None = None
    source: str = ""


class PreemptionRecord(Record):
    reservation: str
    seed: str = ""
    at: Time | None = None
    gpus: Int64 = 0


RunPhase = Literal["Pending", "Reserved", "Running", "Succeeded", "Failed"]


class RunStatus(Record):
    phase: RunPhase | None = None
    reason: str = ""
    message: str = ""
    pending_reservation: str = ""
    eta: Eta | None = None
    preemptions: tuple[PreemptionRecord, ...] = ()


class Run(Namespaced, tag_field="kind", tag="Run"):
    spec: RunSpec
    status: RunStatus = RunStatus()
    api_version: Literal["jobtree.dev/v1alpha1"] = "jobtree.dev/v1alpha1"

    @property
    def finished(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")


# --- Reservation ---------------------------------------------------------------------------------------------


class Scope(Record):
    flavor: FlavorName
    domain: Annotated[str, Text(63)] | None = None


class EnvelopeRef(Record):
    budget: Annotated[str, Text(253)]
    envelope: Annotated[str, Text(253)]


class ReservationSpec(Record):
    run_ref: ObjectRef
    scope: Scope
    earliest_start: Time
    paying_envelope: EnvelopeRef | None = None

    def __post_init__(self) -> None:
        check_time("earliestStart", self.earliest_start)


class ConflictEntry(Record):
    run: str
    group: Int64
    owner: str = ""
    class_: str = msgspec.field(default="", name="class")
    gpus: Int64 = 0
    ticket: str = ""


class Action(Record):
    kind: str
    run: str = ""
    group: Int64 | None = None
    lease: str = ""
    gpus: Int64 = 0


class ProtectedEntry(Record):
    """A Run a lottery could not draw (engine/protection.py): why, and until when."""

    run: str
    reason: str = ""
    until: Time | None = None
    detail: str = ""


class DrawRef(Record):
    """A group of the conflict set, by name (``run`` = namespace/name)."""

    run: str
    group: Int64 = 0


class Activation(Record):
    at: Time | None = None
    seed: str = ""
    deficit_gpus: Int64 = 0
    conflict_set: tuple[ConflictEntry, ...] = ()
    actions: tuple[Action, ...] = ()
    freed_gpus: Int64 = 0
    # Round 3 (docs/reconciler.md): "placement" = the victims are the shortest prefix of the draw after which the
    # Run places; "" (older records) = victims until their GPUs cover deficitGPUs.
    rule: str = ""
    protected: tuple[ProtectedEntry, ...] = ()
    passed_over: tuple[DrawRef, ...] = ()  # groups of the draw before the last victim whose GPUs were not needed
    decided_at: Time | None = None  # when the reconciler took the decision (at = the seed's instant)


ReservationState = Literal["Pending", "Activated", "Released", "Failed"]


class ReservationStatus(Record):
    state: ReservationState | None = None
    reason: str = ""
    activation: Activation | None = None


class Reservation(Namespaced, tag_field="kind", tag="Reservation"):
    spec: ReservationSpec
    status: ReservationStatus = ReservationStatus()
    api_version: Literal["jobtree.dev/v1alpha1"] = "jobtree.dev/v1alpha1"


# --- GPULease ------------------------------------------------------------------------------------------------


class Slice(Record):
    slots: Annotated[tuple[Annotated[str, Text(264)], ...], Items(4096, 1)]
    role: Literal["Active", "Spare"]


class PaidBy(Record):
    budget: Annotated[str, Text(253)]
    envelope: Annotated[str, Text(253)]
    namespace: Annotated[str, Text(63)] = ""


class LeasePreemption(Record):
    reservation: str = ""
    seed: str = ""


class GPULeaseSpec(Record):
    owner: OwnerPath
    run_ref: ObjectRef
    group: NonNegative
    flavor: FlavorName
    slice: Slice
    start: Time
    reason: Literal["Start", "Grow", "Swap"]
    paid_by: PaidBy | None = None


ClosureReason = Literal[
    "Completed", "Shrink", "DropSpare", "ReclaimUnfunded", "RandomPreempt", "NodeFailure", "RunDeleted", "Orphaned"
]


class GPULeaseStatus(Record):
    closed: bool = False
    ended: Time | None = None
    closure_reason: ClosureReason | None = None
    preemption: LeasePreemption | None = None


class GPULease(Namespaced, tag_field="kind", tag="GPULease"):
    spec: GPULeaseSpec
    status: GPULeaseStatus = GPULeaseStatus()
    api_version: Literal["jobtree.dev/v1alpha1"] = "jobtree.dev/v1alpha1"

    @property
    def gpus(self) -> int:
        return len(self.spec.slice.slots)

    @property
    def archive_key(self) -> tuple[str, str, str]:
        """(namespace, name, uid): what keys a lease in the lease archive (a lease re-created under the same name
        is another lease)."""
        meta = self.metadata
        return (meta.namespace, meta.name, meta.uid)

    @property
    def run_key(self) -> str:
        ref = self.spec.run_ref
        return f"{ref.namespace}/{ref.name}"

    @property
    def payer(self) -> tuple[str, str, str] | None:
        """(namespace, budget, envelope) this lease is charged to; the namespace defaults to the run's."""
        paid = self.spec.paid_by
        if paid is None:
            return None
        return (paid.namespace or self.spec.run_ref.namespace, paid.budget, paid.envelope)

    def open_at(self, at: datetime) -> bool:
        """Open on ``[start, ended)``; a closed lease with no recorded end is not open."""
        if self.spec.start > at:
            return False
        if not self.status.closed:
            return True
        ended = self.status.ended
        return ended is not None and at < ended

    def end_or(self, at: datetime) -> datetime:
        """When the lease stopped holding GPUs, or ``at`` when it is still open."""
        if self.status.closed:
            return self.status.ended or self.spec.start
        return at


class NameMeta(Record, order=True, kw_only=True):
    """An object's name and namespace: the metadata a lean record keeps (``GPULeaseHead``). Ordered as
    (namespace, name), compared in C: the loader checks that a List of them is sorted with one comparison per
    object (sources/files.py)."""

    namespace: str = "default"
    name: str


class GPULeaseHead(GPULease, tag_field="kind", tag="GPULease"):
    """A GPULease as ``leases audit`` reads it from a JSON snapshot: every field of ``GPULease`` that the audit
    reads, with the type ``GPULease`` gives it, and of its metadata only the name and namespace. The rest of the
    metadata (uid, labels, timestamps, resourceVersion) is skipped, as a field the model does not declare is:
    the audit never reads it, and allocating it is a fifth of the decode of a lease (bench/bench_doublebooked.py).
    A subclass of ``GPULease``: everything that reads a lease reads it the same way."""

    metadata: NameMeta  # type: ignore[assignment]


KINDS = {"Node": Node, "Budget": Budget, "Run": Run, "Reservation": Reservation, "GPULease": GPULease}
KIND_API_VERSIONS = {"Node": "v1", **dict.fromkeys(("Budget", "Run", "Reservation", "GPULease"), API_VERSION)}
# What a snapshot may hold: ours, the Kueue/Kaiwo objects the queue reports read (kubectl_runs.kueue), and the
# pods, verdict Events, ResourceQuotas and LimitRanges the pod reports read (kubectl_runs.pods).
SNAPSHOT_KINDS = {**KINDS, **QUEUE_KINDS, **POD_KINDS}
AnyObject = Union[(*SNAPSHOT_KINDS.values(),)]  # a union built from the registry
CLUSTER_SCOPED = frozenset({"Node"}) | QUEUE_CLUSTER_SCOPED | POD_CLUSTER_SCOPED
# ``leases audit`` reads GPULeases from JSON snapshots as GPULeaseHead (sources/files.py, ``lean``).
LEAN_LEASE_KINDS: dict[str, type] = {"GPULease": GPULeaseHead}


def snapshot_document(items: list[dict], taken_at: str | None, *, absent: list[str] | tuple[str, ...] = (),
                      context: str | None = None, server: str | None = None) -> dict:
    """A snapshot file's content: one ``List`` stamped with the time it was taken (API.md §2) and, for a live
    save, the kinds whose CRD the cluster did not have (comma-separated, in the order they were read) and the
    kubeconfig context and API server it was read from (several clusters' snapshots are reported per cluster)."""
    annotations: dict[str, str | None] = {SNAPSHOT_TIME_ANNOTATION: taken_at}
    if absent:
        annotations[SNAPSHOT_ABSENT_ANNOTATION] = ",".join(absent)
    if context:
        annotations[SNAPSHOT_CONTEXT_ANNOTATION] = context
    if server:
        annotations[SNAPSHOT_SERVER_ANNOTATION] = server
    return {"apiVersion": "v1", "kind": "List", "metadata": {"annotations": annotations}, "items": items}


# --- Snapshot -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Every object a command evaluates, loaded once and never changed."""

    nodes: tuple[Node, ...] = ()
    budgets: tuple[Budget, ...] = ()
    runs: tuple[Run, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    leases: tuple[GPULease, ...] = ()
    taken_at: datetime | None = None
    notes: tuple[str, ...] = field(default=())
    queues: QueueObjects = field(default_factory=QueueObjects)  # Kueue and Kaiwo objects (kubectl_runs.kueue): their own model
    pods: PodObjects = field(default_factory=PodObjects)  # core/v1 objects of the pod reports (kubectl_runs.pods)

    @cached_property
    def nodes_by_name(self) -> dict[str, Node]:
        return {n.metadata.name: n for n in self.nodes}

    @cached_property
    def runs_by_key(self) -> dict[str, Run]:
        return {r.key: r for r in self.runs}

    @cached_property
    def reservations_by_key(self) -> dict[str, Reservation]:
        return {r.key: r for r in self.reservations}

    @cached_property
    def leases_by_key(self) -> dict[str, GPULease]:
        return {lease.key: lease for lease in self.leases}

    @cached_property
    def envelopes_by_key(self) -> dict[tuple[str, str, str], tuple[Budget, Envelope]]:
        """(namespace, budget, envelope) -> (Budget, Envelope)."""
        return {
            (b.metadata.namespace, b.metadata.name, e.name): (b, e) for b in self.budgets for e in b.spec.envelopes
        }

    @cached_property
    def leases_by_run(self) -> dict[str, list[GPULease]]:
        out: dict[str, list[GPULease]] = {}
        for lease in self.leases:
            ref = lease.spec.run_ref
            out.setdefault(f"{ref.namespace}/{ref.name}", []).append(lease)
        return out

    @property
    def namespaces(self) -> set[str]:
        spaces = {b.metadata.namespace for b in self.budgets}
        spaces.update(r.metadata.namespace for r in self.runs)
        spaces.update(r.metadata.namespace for r in self.reservations)
        spaces.update(lease.metadata.namespace for lease in self.leases)
        return spaces

    def in_namespace(self, namespace: str | None) -> Snapshot:
        """The same snapshot with only one namespace's objects (nodes are cluster-wide and all kept)."""
        if namespace is None:
            return self
        return Snapshot(
            nodes=self.nodes,
            budgets=tuple(b for b in self.budgets if b.metadata.namespace == namespace),
            runs=tuple(r for r in self.runs if r.metadata.namespace == namespace),
            reservations=tuple(r for r in self.reservations if r.metadata.namespace == namespace),
            leases=tuple(x for x in self.leases if x.metadata.namespace == namespace),
            taken_at=self.taken_at,
            notes=self.notes,
            queues=self.queues.in_namespace(namespace),
        )
