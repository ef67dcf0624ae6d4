"""The writes of a pass applied to a snapshot as the API server would apply them: ``apply_writes`` (tests, the
reconciler's loop, the fairness simulation) and ``Objects``, the pass's own view of the objects it has written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ...model import GPULease, Reservation, Run, Snapshot
from ..actions import AnyWrite, Create, PatchStatus

_TYPES: dict[str, type] = {"GPULease": GPULease, "Reservation": Reservation, "Run": Run}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _patched(obj: Any, status: dict) -> Any:
    doc = msgspec.to_builtins(obj)
    doc["status"] = merge_patch(doc.get("status") or {}, status)
    return msgspec.convert(doc, type(obj))


class Objects:
    """The Runs, Reservations and GPULeases of a snapshot by key, changed by writes as the API server would
    change them: a Create of a name that exists is a no-op (AlreadyExists), a patch of a missing object is
    skipped (NotFound), a Create drops any status (the status subresource)."""

    def __init__(self, snapshot: Snapshot):
        self.base = snapshot
        self.by_kind: dict[str, dict[str, Any]] = {
            "Run": {r.key: r for r in snapshot.runs},
            "Reservation": {r.key: r for r in snapshot.reservations},
            "GPULease": {x.key: x for x in snapshot.leases},
        }
        self._snapshot: Snapshot | None = snapshot

    def apply(self, write: AnyWrite) -> None:
        objects = self.by_kind.get(write.kind)
        if objects is None:
            return
        key = write.key
        if isinstance(write, Create):
            if key in objects:
                return
            body = {k: v for k, v in write.body.items() if k != "status"}
            objects[key] = msgspec.convert(body, _TYPES[write.kind])
        elif isinstance(write, PatchStatus):
            current = objects.get(key)
            if current is None:
                return
            objects[key] = _patched(current, write.status)
        else:
            return
        self._snapshot = None

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            base = self.base
            self._snapshot = Snapshot(
                nodes=base.nodes,
                budgets=base.budgets,
                runs=tuple(self.by_kind["Run"].values()),
                reservations=tuple(self.by_kind["Reservation"].values()),
                leases=tuple(self.by_kind["GPULease"].values()),
                taken_at=base.taken_at,
                notes=base.notes,
            )
        return self._snapshot


_Objects = Objects  # the name tests/unit/metrics_driver.py knows


def apply_writes(snapshot: Snapshot, writes: Iterable[AnyWrite]) -> Snapshot:
    """The snapshot after ``writes``, applied as the API server applies them (tests; the pass's own view)."""
    objects = Objects(snapshot)
    for write in writes:
        objects.apply(write)
    return objects.snapshot
