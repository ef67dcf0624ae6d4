"""The lean Pod record the pod explainer reads: who owns it, what it asks of a node (``corev1.PodSpec``), which
scheduler admits it, where it runs and the scheduler's PodScheduled condition. Every other field of a pod is
skipped while decoding."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from ..corev1 import PodSpec

Time = Annotated[datetime, msgspec.Meta(tz=True)]
DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL_PHASES = ("Succeeded", "Failed")


class PodRecord(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """Base of the pod records: frozen, untracked by the GC, camelCase on the wire."""


class OwnerReference(PodRecord):
    kind: str = ""
    name: str = ""
    api_version: str = ""
    uid: str = ""
    controller: bool = False


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
