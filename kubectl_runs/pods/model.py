"""The lean core/v1 records the pod explainer reads, and their registry in the snapshot: a Pod (who owns it, what
it asks of a node (``corev1.PodSpec``), which scheduler admits it, where it runs, the scheduler's PodScheduled
condition), the Events that carry verdicts (``FailedScheduling`` on a pod, ``FailedCreate`` on its owner: a
ResourceQuota rejection never creates the pod), ResourceQuotas and LimitRanges; and the resource.k8s.io records
of Dynamic Resource Allocation (a pod that claims its GPUs through DRA: its ResourceClaims or their templates,
the DeviceClasses they name, the ResourceSlices that publish each node's devices). Every other field is skipped
while decoding. Imports nothing of kubectl-runs but ``kubectl_runs.corev1``, so ``kubectl_runs.model`` can hold
these records in its Snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, ClassVar

import msgspec

from ..corev1 import OwnerReference, PodSpec, Quantity

Time = Annotated[datetime, msgspec.Meta(tz=True)]
DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL_PHASES = ("Succeeded", "Failed")


class PodRecord(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """Base of the pod records: frozen, untracked by the GC, camelCase on the wire."""


class PodMeta(PodRecord):
    name: str
    namespace: str = "default"
    uid: str = ""
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()


class PodCondition(PodRecord):
    type: str
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: Time | None = None


class PodClaimStatus(PodRecord):
    """The ResourceClaim generated for one of the pod's claims from its template."""

    name: str = ""
    resource_claim_name: str = ""


class PodStatus(PodRecord):
    phase: str = "Pending"
    conditions: tuple[PodCondition, ...] = ()
    nominated_node_name: str = ""
    resource_claim_statuses: tuple[PodClaimStatus, ...] = ()


class Pod(PodRecord, tag_field="kind", tag="Pod"):
    metadata: PodMeta
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def scheduler(self) -> str:
        return self.spec.scheduler_name or DEFAULT_SCHEDULER

    @property
    def bound(self) -> bool:
        return bool(self.spec.node_name)

    @property
    def terminal(self) -> bool:
        return self.status.phase in TERMINAL_PHASES

    @property
    def holds_node(self) -> bool:
        """Counted on its node by the scheduler: bound and not finished."""
        return self.bound and not self.terminal

    @property
    def controller(self) -> OwnerReference | None:
        return next((o for o in self.metadata.owner_references if o.controller), None)

    def condition(self, kind: str) -> PodCondition | None:
        return next((c for c in self.status.conditions if c.type == kind), None)


# --- Events, ResourceQuotas, LimitRanges ----------------------------------------------------------------------

VERDICT_EVENT_REASONS = ("FailedScheduling", "FailedCreate")


class ObjectReference(PodRecord):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""


class Event(PodRecord, tag_field="kind", tag="Event"):
    """A core/v1 Event of the kinds that carry a verdict."""

    metadata: PodMeta
    involved_object: ObjectReference = ObjectReference()
    reason: str = ""
    message: str = ""
    type: str = ""
    count: int = 0
    first_timestamp: Time | None = None
    last_timestamp: Time | None = None
    event_time: Time | None = None

    @property
    def when(self) -> datetime | None:
        return self.last_timestamp or self.event_time or self.first_timestamp


class QuotaSpec(PodRecord):
    hard: dict[str, Quantity] = {}


class QuotaStatus(PodRecord):
    hard: dict[str, Quantity] = {}
    used: dict[str, Quantity] = {}


class ResourceQuota(PodRecord, tag_field="kind", tag="ResourceQuota"):
    metadata: PodMeta
    spec: QuotaSpec = QuotaSpec()
    status: QuotaStatus = QuotaStatus()


class LimitRangeItem(PodRecord):
    type: str = ""
    default: dict[str, Quantity] = {}
    default_request: dict[str, Quantity] = {}
    max: dict[str, Quantity] = {}
    min: dict[str, Quantity] = {}


class LimitRangeSpec(PodRecord):
    limits: tuple[LimitRangeItem, ...] = ()


class LimitRange(PodRecord, tag_field="kind", tag="LimitRange"):
    metadata: PodMeta
    spec: LimitRangeSpec = LimitRangeSpec()


# --- Dynamic Resource Allocation (resource.k8s.io v1beta1, v1beta2 and v1: one record reads the three) --------


class ClusterMeta(PodRecord):
    name: str
    uid: str = ""
    creation_timestamp: Time | None = None


class ExactRequest(PodRecord):
    """What one request (v1beta2/v1 ``exactly``, a v1beta1 request itself, or one ``firstAvailable`` choice)
    asks: devices of a DeviceClass, ``ExactCount`` of them (``count``, 1 when omitted) or ``All``."""

    name: str = ""
    device_class_name: str = ""
    allocation_mode: str = ""
    count: int | None = None

    @property
    def devices(self) -> int | None:
        """How many devices it asks for; None: ``All`` the matching devices."""
        if self.allocation_mode == "All":
            return None
        return 1 if self.count is None else self.count


class DeviceRequest(ExactRequest):
    exactly: ExactRequest | None = None  # v1beta2, v1
    first_available: tuple[ExactRequest, ...] = ()  # the first choice is the one named

    @property
    def asked(self) -> ExactRequest:
        if self.exactly is not None:
            return self.exactly
        if self.first_available and not self.device_class_name:
            return self.first_available[0]
        return self


class DeviceClaim(PodRecord):
    requests: tuple[DeviceRequest, ...] = ()


class ClaimSpec(PodRecord):
    devices: DeviceClaim = DeviceClaim()


class DeviceResult(PodRecord):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""


class DeviceAllocation(PodRecord):
    results: tuple[DeviceResult, ...] = ()


class Allocation(PodRecord):
    devices: DeviceAllocation = DeviceAllocation()


class ConsumerReference(PodRecord):
    resource: str = ""
    name: str = ""
    uid: str = ""


class ClaimStatus(PodRecord):
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerReference, ...] = ()


class ResourceClaim(PodRecord, tag_field="kind", tag="ResourceClaim"):
    metadata: PodMeta
    spec: ClaimSpec = ClaimSpec()
    status: ClaimStatus = ClaimStatus()


class ClaimTemplateSpec(PodRecord):
    spec: ClaimSpec = ClaimSpec()


class ResourceClaimTemplate(PodRecord, tag_field="kind", tag="ResourceClaimTemplate"):
    metadata: PodMeta
    spec: ClaimTemplateSpec = ClaimTemplateSpec()


class CELSelector(PodRecord):
    expression: str = ""


class DeviceSelector(PodRecord):
    cel: CELSelector | None = None


class DeviceClassSpec(PodRecord):
    selectors: tuple[DeviceSelector, ...] = ()


class DeviceClass(PodRecord, tag_field="kind", tag="DeviceClass"):
    metadata: ClusterMeta
    spec: DeviceClassSpec = DeviceClassSpec()


class SliceDevice(PodRecord):
    name: str = ""


class SlicePool(PodRecord):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 0


class SliceSpec(PodRecord):
    driver: str = ""
    node_name: str = ""
    pool: SlicePool = SlicePool()
    devices: tuple[SliceDevice, ...] = ()


class ResourceSlice(PodRecord, tag_field="kind", tag="ResourceSlice"):
    metadata: ClusterMeta
    spec: SliceSpec = SliceSpec()


# --- the registry --------------------------------------------------------------------------------------------

CLAIM_KINDS: dict[str, type] = {"ResourceClaim": ResourceClaim, "ResourceClaimTemplate": ResourceClaimTemplate,
                                 "DeviceClass": DeviceClass, "ResourceSlice": ResourceSlice}
POD_KINDS: dict[str, type] = {"Pod": Pod, "Event": Event, "ResourceQuota": ResourceQuota, "LimitRange": LimitRange,
                              **CLAIM_KINDS}
# what a snapshot writes them as: DRA's records are read from whichever version the server prefers (v1beta1,
# v1beta2 or v1) into one shape that keeps the fields as they were; a snapshot names the newest
DRA_API_VERSION = "resource.k8s.io/v1"
POD_API_VERSIONS = {kind: DRA_API_VERSION if kind in CLAIM_KINDS else "v1" for kind in POD_KINDS}
POD_CLUSTER_SCOPED = frozenset({"DeviceClass", "ResourceSlice"})


@dataclass(frozen=True)
class PodObjects:
    """The core/v1 objects of a Snapshot the pod reports read, each kind sorted by namespace and name."""

    pods: tuple[Pod, ...] = ()
    events: tuple[Event, ...] = ()
    quotas: tuple[ResourceQuota, ...] = ()
    limit_ranges: tuple[LimitRange, ...] = ()
    claims: tuple[ResourceClaim, ...] = ()
    claim_templates: tuple[ResourceClaimTemplate, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()

    FIELDS: ClassVar[dict[str, str]] = {"Pod": "pods", "Event": "events", "ResourceQuota": "quotas",
                                        "LimitRange": "limit_ranges", "ResourceClaim": "claims",
                                        "ResourceClaimTemplate": "claim_templates", "DeviceClass": "device_classes",
                                        "ResourceSlice": "resource_slices"}

    @classmethod
    def of(cls, by_kind: dict[str, tuple]) -> PodObjects:
        return cls(**{attribute: tuple(by_kind.get(kind, ())) for kind, attribute in cls.FIELDS.items()})

    def __bool__(self) -> bool:
        return any(getattr(self, attribute) for attribute in self.FIELDS.values())
