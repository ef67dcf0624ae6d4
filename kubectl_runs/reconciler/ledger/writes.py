"""The writes of a pass applied to a snapshot as the API server would apply them: ``apply_writes`` (tests, the
reconciler's loop, the fairness simulation) and ``Objects``, the pass's own view of the objects it has written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import msgspec

from ...model import GPULease, Reservation, Run, Snapshot
from ..actions import AnyWrite, Create, PatchStatus

_TYPES: dict[str, type] = {"GPULease": GPULease, "Reservation": Reservation, "Run": Run}
_FIELDS = {"Run": "runs", "Reservation": "reservations", "GPULease": "leases"}  # kind -> Snapshot field


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
    skipped (NotFound), a Create drops any status (the status subresource).

    The view after each write is a new Snapshot that shares what the write did not touch: the tuples and
    indexes (``runs_by_key``, ``leases_by_run``, …) of the kinds it left alone are the previous view's, and
    those of the kind it changed are the previous ones with the change made — what the snapshot would compute
    from its tuples, without a pass over every object per write."""

    def __init__(self, snapshot: Snapshot):
        self.base = snapshot
        self.by_kind: dict[str, dict[str, Any]] = {
            "Run": {r.key: r for r in snapshot.runs},
            "Reservation": {r.key: r for r in snapshot.reservations},
            "GPULease": {x.key: x for x in snapshot.leases},
        }
        self._snapshot: Snapshot | None = snapshot
        self._last: Snapshot = snapshot  # the last view handed out
        self._dirty: dict[str, list[tuple[Any, Any]]] = {}  # kind -> (before, after) since the last view
        # the last view's tuples are by_kind's values (not so for a snapshot that holds one key twice)
        self._fresh = all(len(self.by_kind[kind]) == len(getattr(snapshot, field)) for kind, field in _FIELDS.items())

    def apply(self, write: AnyWrite) -> tuple[Any, Any] | None:
        """Apply ``write``; returns (the object before, after) — before None for a Create — or None when the
        write changed nothing (AlreadyExists, NotFound, a kind the pass does not keep)."""
        objects = self.by_kind.get(write.kind)
        if objects is None:
            return None
        key = write.key
        if isinstance(write, Create):
            if key in objects:
                return None
            body = {k: v for k, v in write.body.items() if k != "status"}
            before, after = None, msgspec.convert(body, _TYPES[write.kind])
        elif isinstance(write, PatchStatus):
            before = objects.get(key)
            if before is None:
                return None
            after = _patched(before, write.status)
        else:
            return None
        objects[key] = after
        self._dirty.setdefault(write.kind, []).append((before, after))
        self._snapshot = None
        return before, after

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = self._next()
        return self._snapshot

    def _next(self) -> Snapshot:
        last, base, dirty = self._last, self.base, self._dirty
        fresh = self._fresh
        snap = _View(nodes=base.nodes, budgets=base.budgets, taken_at=base.taken_at, notes=base.notes,
                     runs=self._values("Run", "runs"), reservations=self._values("Reservation", "reservations"),
                     leases=self._leases())
        known = last.__dict__  # the cached indexes of the last view (functools.cached_property keeps them there)
        made = snap.__dict__
        for index in ("nodes_by_name", "envelopes_by_key"):
            if index in known:
                made[index] = known[index]
        for kind, index in (("Run", "runs_by_key"), ("Reservation", "reservations_by_key"),
                            ("GPULease", "leases_by_key")):
            if kind not in dirty and fresh and index in known:
                made[index] = known[index]
            elif kind in dirty and kind != "GPULease":
                made[index] = dict(self.by_kind[kind])
            # the leases by key, after a write of one (200,000 of them at 10,000 Runs): made again only when
            # read (the admit stage never reads them)
        if "leases_by_run" in known and fresh:
            made["leases_by_run"] = _leases_by_run(known["leases_by_run"], dirty.get("GPULease", ()))
        self._last, self._dirty, self._fresh = snap, {}, True
        return snap

    def _values(self, kind: str, field: str) -> tuple:
        """The view's tuple of ``kind``: the last view's, with the objects created since at its end when no
        object of the kind was patched since (a pass that mints); else ``by_kind``'s values."""
        last, changes = getattr(self._last, field), self._dirty.get(kind)
        if self._fresh and not changes:
            return last
        if self._fresh and all(before is None for before, _ in changes):
            return last + tuple(after for _, after in changes)
        return tuple(self.by_kind[kind].values())

    def _leases(self) -> tuple | _Minted:
        """The view's leases as ``_values`` makes them, but the leases created since the last view are appended to
        its ``_Minted`` (made a tuple when read) instead of to a copy of the 200,000 before them: a pass that
        mints 8,000 leases reads none of its views' lease tuples until the reserve stage."""
        changes = self._dirty.get("GPULease")
        last = vars(self._last)["leases"]  # a tuple, or a _Minted not made yet
        if not self._fresh or not changes:
            return last if self._fresh else tuple(self.by_kind["GPULease"].values())
        if any(before is not None for before, _ in changes):
            return tuple(self.by_kind["GPULease"].values())
        if isinstance(last, _Minted) and last.made is None and last.count == len(last.tail):
            head, tail = last.head, last.tail  # the views before keep their count of the tail
        else:
            head, tail = last.tuple() if isinstance(last, _Minted) else last, []
        tail.extend(after for _, after in changes)
        return _Minted(head, tail, len(tail))


class _Minted:
    """The lease tuple of a view that is the last view's with leases created since: ``head`` then the first
    ``count`` leases of ``tail`` (a list the views of one ``Objects`` share and only append to), made a tuple
    when first read."""

    __slots__ = ("count", "head", "made", "tail")

    def __init__(self, head: tuple, tail: list, count: int):
        self.head, self.tail, self.count = head, tail, count
        self.made: tuple | None = None

    def tuple(self) -> tuple:
        if self.made is None:
            self.made = self.head + tuple(self.tail[: self.count])
        return self.made


class _Leases:
    """``_View.leases``: the tuple, made from the view's ``_Minted`` when first read."""

    def __get__(self, view: Any, owner: type | None = None) -> Any:
        if view is None:
            return ()
        value = vars(view)["leases"]
        if isinstance(value, _Minted):
            value = vars(view)["leases"] = value.tuple()
        return value

    def __set__(self, view: Any, value: Any) -> None:  # Snapshot.__init__ (frozen: object.__setattr__)
        vars(view)["leases"] = value


class _View(Snapshot):
    """A view of ``Objects``: a Snapshot whose lease tuple is made when read (``_Minted``); equal to the
    Snapshot of the same objects."""

    leases = _Leases()  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(Snapshot))

    __hash__ = Snapshot.__hash__


def _leases_by_run(before: dict[str, list], changes) -> dict[str, list]:
    """``Snapshot.leases_by_run`` after ``changes`` ((before, after) leases): a patched lease keeps its place in
    its run's list, a created one comes last (as it does in the snapshot's tuple)."""
    if not changes:
        return before
    out = dict(before)
    for old, new in changes:
        run = new.run_key
        leases = list(out.get(run, ()))
        if old is None:
            leases.append(new)
        else:
            leases = [new if x.key == new.key else x for x in leases]
        out[run] = leases
    return out


_Objects = Objects  # the name tests/unit/metrics_driver.py knows


def apply_writes(snapshot: Snapshot, writes: Iterable[AnyWrite]) -> Snapshot:
    """The snapshot after ``writes``, applied as the API server applies them (tests; the pass's own view)."""
    objects = Objects(snapshot)
    for write in writes:
        objects.apply(write)
    return objects.snapshot
