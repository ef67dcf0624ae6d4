"""The lean core/v1 records the pod explainer reads, and their registry in the snapshot: a Pod (who owns it, what
it asks of a node (``corev1.PodSpec``), which scheduler admits it, where it runs, the scheduler's PodScheduled
condition), the Events that carry verdicts (``FailedScheduling`` on a pod, ``FailedCreate`` on its owner: a
ResourceQuota rejection never creates the pod), ResourceQuotas and LimitRanges. Every other field is skipped
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


class PodStatus(PodRecord):
    phase: str = "Pending"
    conditions: tuple[PodCondition, ...] = ()
    nominated_node_name: str = ""


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


# --- the registry --------------------------------------------------------------------------------------------

POD_KINDS: dict[str, type] = {"Pod": Pod, "Event": Event, "ResourceQuota": ResourceQuota, "LimitRange": LimitRange}
POD_API_VERSIONS = dict.fromkeys(POD_KINDS, "v1")


@dataclass(frozen=True)
class PodObjects:
    """The core/v1 objects of a Snapshot the pod reports read, each kind sorted by namespace and name."""

    pods: tuple[Pod, ...] = ()
    events: tuple[Event, ...] = ()
    quotas: tuple[ResourceQuota, ...] = ()
    limit_ranges: tuple[LimitRange, ...] = ()

    FIELDS: ClassVar[dict[str, str]] = {"Pod": "pods", "Event": "events", "ResourceQuota": "quotas",
                                        "LimitRange": "limit_ranges"}

    @classmethod
    def of(cls, by_kind: dict[str, tuple]) -> PodObjects:
        return cls(**{attribute: tuple(by_kind.get(kind, ())) for kind, attribute in cls.FIELDS.items()})

    def __bool__(self) -> bool:
        return any(getattr(self, attribute) for attribute in self.FIELDS.values())
