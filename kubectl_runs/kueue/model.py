"""Typed, frozen records of the Kueue (``kueue.x-k8s.io``) and Kaiwo (``kaiwo.silogen.ai``) objects we read.

Kept apart from the Budget/envelope model on purpose: Kueue's quota is a tree of ClusterQueues and Cohorts with
borrowing and lending limits, admitted through Workloads, not envelopes funded by leases. Only the fields the
reports read are declared; the rest of each object is skipped while decoding (as in ``kubectl_runs.model``).
Wire names are the API's camelCase. This module imports nothing of kubectl-runs but ``kubectl_runs.corev1`` (the
pod-spec pieces it shares with the pod explainer), so ``kubectl_runs.model`` can hold these records in its Snapshot.

Versions read: ResourceFlavor, ClusterQueue, LocalQueue, Workload, WorkloadPriorityClass are
``kueue.x-k8s.io/v1beta1``; Cohort is ``kueue.x-k8s.io/v1alpha1`` (as Kueue v0.12 serves it); KaiwoJob and
KaiwoService are ``kaiwo.silogen.ai/v1alpha1``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, ClassVar

import msgspec

from ..corev1 import (  # noqa: F401 (the core/v1 pieces are part of this model's vocabulary)
    Affinity,
    Container,
    KTaint,
    NodeAffinity,
    NodeSelector,
    NodeSelectorTerm,
    OwnerReference,
    PodSpec,
    Quantity,
    Requirement,
    ResourceRequirements,
    Toleration,
    quantity,
    show_quantity,
)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_V1BETA1 = f"{KUEUE_GROUP}/v1beta1"
KUEUE_V1ALPHA1 = f"{KUEUE_GROUP}/v1alpha1"
KAIWO_GROUP = "kaiwo.silogen.ai"
KAIWO_API = f"{KAIWO_GROUP}/v1alpha1"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
KAIWO_NAME_LABEL = "kaiwo.silogen.ai/name"
KAIWO_TYPE_LABEL = "kaiwo.silogen.ai/type"
KAIWO_USER_LABEL = "kaiwo.silogen.ai/user"

Time = Annotated[datetime, msgspec.Meta(tz=True)]


class KRecord(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """Base of the Kueue/Kaiwo records: frozen, untracked by the GC, camelCase on the wire."""




class Meta(KRecord):
    name: str
    namespace: str = "default"
    uid: str = ""
    creation_timestamp: Time | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()  # a Workload's: the Job, or the Pod Kueue admits


class ClusterMeta(KRecord):
    """Metadata of a cluster-scoped object (ResourceFlavor, ClusterQueue, Cohort, WorkloadPriorityClass)."""

    name: str
    uid: str = ""
    creation_timestamp: Time | None = None
    labels: dict[str, str] = {}


class KCondition(KRecord):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: Time | None = None


class _Named(KRecord):
    @property
    def name(self) -> str:
        return self.metadata.name  # type: ignore[attr-defined]


class _NamespacedObject(KRecord):
    metadata: Meta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class PodTemplate(KRecord):
    spec: PodSpec = PodSpec()


# --- ResourceFlavor ----------------------------------------------------------------------------------------


class ResourceFlavorSpec(KRecord):
    node_labels: dict[str, str] = {}
    node_taints: tuple[KTaint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str = ""


class ResourceFlavor(_Named, tag_field="kind", tag="ResourceFlavor"):
    metadata: ClusterMeta
    spec: ResourceFlavorSpec = ResourceFlavorSpec()

    def selects(self, labels: dict[str, str]) -> bool:
        """A node with these labels is one of this flavor's nodes (every ``nodeLabels`` pair matches; a
        flavor without nodeLabels selects every node)."""
        return all(labels.get(key) == want for key, want in self.spec.node_labels.items())


# --- ClusterQueue and Cohort -------------------------------------------------------------------------------


class ResourceQuota(KRecord):
    name: str
    nominal_quota: Quantity = 0
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(KRecord):
    name: str
    resources: tuple[ResourceQuota, ...] = ()


class ResourceGroup(KRecord):
    covered_resources: tuple[str, ...] = ()
    flavors: tuple[FlavorQuotas, ...] = ()


class BorrowWithinCohort(KRecord):
    policy: str = "Never"
    max_priority_threshold: int | None = None


class Preemption(KRecord):
    reclaim_within_cohort: str = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None
    within_cluster_queue: str = "Never"


class FlavorFungibility(KRecord):
    when_can_borrow: str = "Borrow"
    when_can_preempt: str = "TryNextFlavor"


class ClusterQueueSpec(KRecord):
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str = ""
    queueing_strategy: str = "BestEffortFIFO"
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    preemption: Preemption = Preemption()
    stop_policy: str = "None"


class ResourceUsage(KRecord):
    name: str
    total: Quantity = 0
    borrowed: Quantity = 0


class FlavorUsage(KRecord):
    name: str
    resources: tuple[ResourceUsage, ...] = ()


class ClusterQueueStatus(KRecord):
    flavors_reservation: tuple[FlavorUsage, ...] = ()
    flavors_usage: tuple[FlavorUsage, ...] = ()
    pending_workloads: int = 0
    reserving_workloads: int = 0
    admitted_workloads: int = 0
    conditions: tuple[KCondition, ...] = ()


class ClusterQueue(_Named, tag_field="kind", tag="ClusterQueue"):
    metadata: ClusterMeta
    spec: ClusterQueueSpec = ClusterQueueSpec()
    status: ClusterQueueStatus = ClusterQueueStatus()


class CohortSpec(KRecord):
    parent: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()


class Cohort(_Named, tag_field="kind", tag="Cohort"):
    metadata: ClusterMeta
    spec: CohortSpec = CohortSpec()


# --- LocalQueue ----------------------------------------------------------------------------------------------


class LocalQueueSpec(KRecord):
    cluster_queue: str = ""
    stop_policy: str = "None"


class LocalQueue(_NamespacedObject, tag_field="kind", tag="LocalQueue"):
    spec: LocalQueueSpec = LocalQueueSpec()


# --- WorkloadPriorityClass -------------------------------------------------------------------------------------


class WorkloadPriorityClass(_Named, tag_field="kind", tag="WorkloadPriorityClass"):
    metadata: ClusterMeta
    value: int = 0
    description: str = ""


# --- Workload ------------------------------------------------------------------------------------------------


class PodSet(KRecord):
    name: str = "main"
    count: int = 1
    min_count: int | None = None
    template: PodTemplate = PodTemplate()


class WorkloadSpec(KRecord):
    pod_sets: tuple[PodSet, ...] = ()
    queue_name: str = ""
    priority_class_name: str = ""
    priority_class_source: str = ""
    priority: int | None = None
    active: bool = True


class PodSetAssignment(KRecord):
    name: str = "main"
    flavors: dict[str, str] = {}
    resource_usage: dict[str, Quantity] = {}
    count: int | None = None


class Admission(KRecord):
    cluster_queue: str = ""
    pod_set_assignments: tuple[PodSetAssignment, ...] = ()


class WorkloadStatus(KRecord):
    admission: Admission | None = None
    conditions: tuple[KCondition, ...] = ()


class Workload(_NamespacedObject, tag_field="kind", tag="Workload"):
    spec: WorkloadSpec = WorkloadSpec()
    status: WorkloadStatus = WorkloadStatus()

    def condition(self, kind: str) -> KCondition | None:
        for condition in self.status.conditions:
            if condition.type == kind:
                return condition
        return None

    def is_true(self, kind: str) -> bool:
        condition = self.condition(kind)
        return condition is not None and condition.status == "True"

    @property
    def finished(self) -> bool:
        return self.is_true("Finished")

    @property
    def quota_reserved(self) -> bool:
        """Holds quota in its ClusterQueue: an admission and ``QuotaReserved=True``, not finished (Kueue's
        cache counts exactly these)."""
        return self.state()[0]

    @property
    def admitted(self) -> bool:
        return self.state()[1]

    @property
    def pending(self) -> bool:
        """Waiting for quota: active, not finished, and no quota reserved."""
        return self.state()[2]

    def state(self) -> tuple[bool, bool, bool]:
        """(holds quota, admitted, pending) from one pass over the conditions."""
        reserved = admitted = finished = False
        for condition in self.status.conditions:
            kind = condition.type
            if kind == "QuotaReserved":
                reserved = condition.status == "True"
            elif kind == "Admitted":
                admitted = condition.status == "True"
            elif kind == "Finished":
                finished = condition.status == "True"
        holds = reserved and not finished and self.status.admission is not None
        return holds, holds and admitted, self.spec.active and not finished and not holds


# --- the lean Workload of `queues usage` ------------------------------------------------------------------


class NameMeta(KRecord):
    name: str
    namespace: str = "default"


class ConditionHead(KRecord):
    type: str
    status: str


class WorkloadHeadSpec(KRecord):
    pod_sets: msgspec.Raw = msgspec.Raw(b"[]")  # left undecoded: decode_pod_sets, when they are read
    queue_name: str = ""
    active: bool = True


class WorkloadHeadStatus(KRecord):
    admission: Admission | None = None
    conditions: tuple[ConditionHead, ...] = ()


class WorkloadHead(_NamespacedObject, tag_field="kind", tag="Workload"):
    """A Workload as `queues usage` reads it from a JSON snapshot: its name, queue, state and admission, with its
    pod sets left as raw JSON until they are asked for (``decode_pod_sets``). The pod sets of a workload that holds
    quota are never read there (its admission says what it holds), and they are most of a Workload's bytes: on
    50,000 workloads this decodes in half the time of ``Workload`` (bench/bench_queues.py). Every field this
    record declares has the type ``Workload`` gives it; what it leaves out is skipped, as any field the model does
    not declare is."""

    metadata: NameMeta
    spec: WorkloadHeadSpec = WorkloadHeadSpec()
    status: WorkloadHeadStatus = WorkloadHeadStatus()


class PodSetsError(ValueError):
    """The pod sets a WorkloadHead left undecoded do not decode as ``Workload``'s (its ``spec.podSets`` is bad)."""

    def __init__(self, workload: WorkloadHead, detail: str):
        super().__init__(f"Workload {workload.key}: {detail}")
        self.workload = workload


_POD_SETS = msgspec.json.Decoder(tuple[PodSet, ...])
_AT = re.compile(r" - at `\$(.*)`$")


def decode_pod_sets(workload: WorkloadHead | Workload) -> tuple[PodSet, ...]:
    """A workload's pod sets, decoded now from a WorkloadHead (``PodSetsError`` when they do not decode)."""
    pod_sets = workload.spec.pod_sets
    if pod_sets.__class__ is not msgspec.Raw:
        return pod_sets  # type: ignore[return-value]
    try:
        return _POD_SETS.decode(pod_sets)  # type: ignore[arg-type]
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        text = str(exc)
        match = _AT.search(text)
        where = f"spec.podSets{match.group(1)}: " if match else "spec.podSets: "
        message = _AT.sub("", text)
        raise PodSetsError(workload, where + message[:1].lower() + message[1:].replace("`", "")) from None


# --- Kaiwo ---------------------------------------------------------------------------------------------------


class KaiwoSpec(KRecord):
    user: str = ""
    gpus: int = 0
    gpu_vendor: str = ""
    replicas: int = 0
    cluster_queue: str = ""
    priority_class: str = ""


class KaiwoStatus(KRecord):
    status: str = ""


class KaiwoJob(_NamespacedObject, tag_field="kind", tag="KaiwoJob"):
    spec: KaiwoSpec = KaiwoSpec()
    status: KaiwoStatus = KaiwoStatus()


class KaiwoService(_NamespacedObject, tag_field="kind", tag="KaiwoService"):
    spec: KaiwoSpec = KaiwoSpec()
    status: KaiwoStatus = KaiwoStatus()


# --- the registry --------------------------------------------------------------------------------------------

QUEUE_KINDS: dict[str, type] = {
    "ResourceFlavor": ResourceFlavor,
    "ClusterQueue": ClusterQueue,
    "Cohort": Cohort,
    "LocalQueue": LocalQueue,
    "Workload": Workload,
    "WorkloadPriorityClass": WorkloadPriorityClass,
    "KaiwoJob": KaiwoJob,
    "KaiwoService": KaiwoService,
}
# `queues usage` reads Workloads from JSON snapshots as WorkloadHead (sources/files.py, ``lean``).
LEAN_KINDS: dict[str, type] = {"Workload": WorkloadHead}
QUEUE_CLUSTER_SCOPED = frozenset({"ResourceFlavor", "ClusterQueue", "Cohort", "WorkloadPriorityClass"})
QUEUE_API_VERSIONS = {
    "ResourceFlavor": KUEUE_V1BETA1,
    "ClusterQueue": KUEUE_V1BETA1,
    "Cohort": KUEUE_V1ALPHA1,
    "LocalQueue": KUEUE_V1BETA1,
    "Workload": KUEUE_V1BETA1,
    "WorkloadPriorityClass": KUEUE_V1BETA1,
    "KaiwoJob": KAIWO_API,
    "KaiwoService": KAIWO_API,
}


@dataclass(frozen=True)
class QueueObjects:
    """The Kueue and Kaiwo objects of a Snapshot, each kind sorted by (namespace,) name."""

    flavors: tuple[ResourceFlavor, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    cohorts: tuple[Cohort, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    workloads: tuple[Workload, ...] = ()
    priority_classes: tuple[WorkloadPriorityClass, ...] = ()
    kaiwo_jobs: tuple[KaiwoJob, ...] = ()
    kaiwo_services: tuple[KaiwoService, ...] = ()

    FIELDS: ClassVar[dict[str, str]] = {  # kind -> attribute
        "ResourceFlavor": "flavors",
        "ClusterQueue": "cluster_queues",
        "Cohort": "cohorts",
        "LocalQueue": "local_queues",
        "Workload": "workloads",
        "WorkloadPriorityClass": "priority_classes",
        "KaiwoJob": "kaiwo_jobs",
        "KaiwoService": "kaiwo_services",
    }

    @classmethod
    def of(cls, by_kind: dict[str, tuple]) -> QueueObjects:
        return cls(**{attribute: tuple(by_kind.get(kind, ())) for kind, attribute in cls.FIELDS.items()})

    def __bool__(self) -> bool:
        return any(getattr(self, attribute) for attribute in self.FIELDS.values())

    def groups(self) -> tuple[tuple, ...]:
        """Every kind's objects, in the registry's order (what ``snapshot save`` writes)."""
        return tuple(getattr(self, attribute) for attribute in self.FIELDS.values())

    def in_namespace(self, namespace: str | None) -> QueueObjects:
        """Cluster-scoped kinds are all kept; namespaced ones only of ``namespace``."""
        if namespace is None:
            return self

        def mine(objects: tuple) -> tuple:
            return tuple(o for o in objects if o.metadata.namespace == namespace)

        return QueueObjects(
            flavors=self.flavors,
            cluster_queues=self.cluster_queues,
            cohorts=self.cohorts,
            local_queues=mine(self.local_queues),
            workloads=mine(self.workloads),
            priority_classes=self.priority_classes,
            kaiwo_jobs=mine(self.kaiwo_jobs),
            kaiwo_services=mine(self.kaiwo_services),
        )
