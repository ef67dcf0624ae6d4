"""The writes a reconcile decides on, as data.

A reconcile is a pure function of (snapshot, at, what is stored) that returns a list of these; the applier
(``apply.py``) is the only code that turns them into API calls, and ``--dry-run`` prints them as JSON instead.
Every write names the object by kind, namespace and name; ``cause`` is the one-line reason logged with it
(``RandomPreempt(0x…) by rai-sys/train-128-r1``, ``status changed: phase Pending -> Running``).

- ``PatchStatus``: a JSON merge patch ``{"status": status}`` on the object's status subresource. ``status``
  carries ``observedGeneration`` where the kind has it. Closing a GPULease is a PatchStatus of the lease with
  ``closed``, ``ended``, ``closureReason`` (and ``preemption`` for ReclaimUnfunded/RandomPreempt).
- ``Create``: a new object with a deterministic name (so a retry after a crash finds it and cannot create it
  twice: the applier treats 409 AlreadyExists as done). ``body`` is the whole object (apiVersion, kind,
  metadata, spec).
- ``RecordEvent``: a core/v1 Event about an object (a Warning for an object the reconciler cannot parse).
- ``ReportEvent``: an events.k8s.io/v1 Event about a decision of the ledger keeper (``events.py`` derives them
  from the ledger's writes that were made; they are side effects of those writes, never planned or printed by
  ``--dry-run``). ``kind``/``namespace``/``name``/``uid`` are the object it is about (``regarding``).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

KindName = Literal["Budget", "Run", "Reservation", "GPULease"]


class Write(msgspec.Struct, frozen=True, tag_field="action", kw_only=True):
    kind: str
    namespace: str
    name: str
    cause: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PatchStatus(Write, frozen=True, tag="PatchStatus", kw_only=True):
    status: dict[str, Any]


class Create(Write, frozen=True, tag="Create", kw_only=True):
    body: dict[str, Any]


class RecordEvent(Write, frozen=True, tag="RecordEvent", kw_only=True):
    type: Literal["Normal", "Warning"] = "Warning"
    reason: str
    message: str
    uid: str = ""  # of the object the Event is about (involvedObject.uid); "" when unknown


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """An object an Event names (``regarding``/``related``: core/v1 ObjectReference)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""


class ReportEvent(Write, frozen=True, tag="ReportEvent", kw_only=True):
    event: str  # the Event's own name: deterministic, so the same decision is said once (409 = already said)
    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    verb: str  # the Event's ``action`` (that name is taken by the write's tag)
    note: str
    uid: str = ""  # of the object it is about (regarding.uid: what ``kubectl describe`` selects on)
    related: ObjectRef | None = None


AnyWrite = PatchStatus | Create | RecordEvent | ReportEvent
