"""The reconciler's view of the cluster: list+watch informers for Budgets, Runs, Reservations, GPULeases and
Nodes, and the one in-memory copy of the objects they keep.

Each informer lists its kind (paginated), remembers the list's resourceVersion, then watches from it with
``allowWatchBookmarks`` (bookmarks only move the resourceVersion forward). A watch that ends is resumed from the
last resourceVersion seen; a 410 Gone (the version is too old, or an ERROR event saying so) starts over with a
fresh list, whose differences from the cache are delivered as changes. Other failures back off exponentially
and are counted; an informer never gives up.

The store keeps, per object, the typed model record (what the engine reads), the ``status`` as stored (for
the kinds the reconciler writes status to: the diff compares against it) and its resourceVersion; the values
records repeat (namespaces, run names, flavors, times, empty dicts) are held once (reconciler/sharing.py). An object
the model refuses is kept as a ``BadObject`` naming the field, outside the snapshot. ``snapshot()`` builds the
immutable Snapshot the pure code evaluates (cached until something changes)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from ..model import KINDS, Snapshot
from ..sources.cluster import RESOURCES
from ..sources.files import _field_error
from ..sources.informer import (  # noqa: F401  (the generic list+watch, shared with `-w`; imported from here too)
    LIST_CHUNK,
    STOPPING,
    WATCH_TIMEOUT_SECONDS,
    ApiError,
    Gone,
    Informer,
    request,
    wait_synced,
)
from .sharing import Sharing
from .status import STATUS_KINDS, BadObject, ObjKey, Stored

# --- decoding ----------------------------------------------------------------------------------------------


class _Meta(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    generation: int = 0
    resource_version: str = ""


class _Peek(msgspec.Struct, frozen=True, gc=False):
    metadata: _Meta = _Meta()
    status: dict[str, Any] | None = None


class _MetaPeek(msgspec.Struct, frozen=True, gc=False):
    metadata: _Meta = _Meta()


_PEEK = msgspec.json.Decoder(_Peek)  # the kinds whose status the reconciler writes: the status as stored too
_META = msgspec.json.Decoder(_MetaPeek)
_TYPED = {kind: msgspec.json.Decoder(cls) for kind, cls in KINDS.items()}
_SHARING = Sharing()  # one pool for every cache (the informers' threads and the writers' answers alike)


class Entry(msgspec.Struct, frozen=True, gc=False):
    """One object in the cache: its typed record (None when the model refuses it), its stored status (kinds
    whose status the reconciler writes), its resourceVersion, and its key (``namespace/name``, or the name of a
    cluster-scoped object). A slotted struct whose names are the record's own strings: there is one per object
    (200,000 GPULeases at 10,000 runs). Made by ``make_entry``."""

    kind: str
    namespace: str
    name: str
    resource_version: str
    record: Any = None
    status: Any = None
    bad: BadObject | None = None
    key: str = ""


def make_entry(kind: str, namespace: str, name: str, resource_version: str, record: Any = None, status: Any = None,
          bad: BadObject | None = None) -> Entry:
    return Entry(kind, namespace, name, resource_version, record, status, bad,
                 f"{namespace}/{name}" if namespace else name)


def decode_entry(kind: str, raw: bytes | msgspec.Raw) -> Entry:
    """One object as the API server sent it (a list item, a watch event's object, a write's answer). The typed
    record is decoded straight from the JSON; a second, metadata-only decode is made only for what the record
    does not hold: the stored status of the kinds the reconciler writes status to, a Node's resourceVersion,
    and the names of an object the model refuses."""
    status = None
    if kind in STATUS_KINDS:
        peek = _PEEK.decode(raw)
        meta = peek.metadata
        status = dict(peek.status or {})
    else:
        meta = None
    try:
        record = _TYPED[kind].decode(raw)
    except msgspec.ValidationError as exc:
        meta = meta or _META.decode(raw).metadata
        namespace = meta.namespace if kind != "Node" else ""
        bad = BadObject(kind=kind, namespace=namespace, name=meta.name, error=_field_error(exc), uid=meta.uid,
                        generation=meta.generation, resource_version=meta.resource_version, status=status or {})
        return make_entry(kind, namespace, meta.name, meta.resource_version, None, status, bad)
    record = _SHARING.record(kind, record)
    if kind == "Node":
        return make_entry(kind, "", record.metadata.name, (meta or _META.decode(raw).metadata).resource_version, record)
    mine = record.metadata
    if meta is not None and (meta.namespace, meta.name) != (mine.namespace, mine.name):
        # only a namespaced object whose JSON names no namespace (the model's default is "default")
        return make_entry(kind, meta.namespace, meta.name, meta.resource_version, record, status)
    return make_entry(kind, mine.namespace, mine.name, mine.resource_version, record, status)


def _newer(a: str, b: str) -> bool:
    """resourceVersion ``a`` is older than ``b`` (both numeric, as etcd's are; opaque ones never compare)."""
    return a.isdigit() and b.isdigit() and int(a) < int(b)


# --- the store ---------------------------------------------------------------------------------------------

Change = Callable[[str, "Entry | None", "Entry | None"], None]  # (kind, old, new)


_SNAPSHOT_FIELDS = {"Node": "nodes", "Budget": "budgets", "Run": "runs", "Reservation": "reservations",
                    "GPULease": "leases"}
# Snapshot's indexes (cached properties) and the kinds they read: carried to the next snapshot when those kinds
# did not change (the same tuples)
_INDEXES = {"nodes_by_name": ("Node",), "runs_by_key": ("Run",), "reservations_by_key": ("Reservation",),
            "leases_by_key": ("GPULease",), "leases_by_run": ("GPULease",), "envelopes_by_key": ("Budget",)}


def _place(entry: Entry) -> tuple[str, str]:
    return (entry.namespace, entry.name)


class _Kind:
    """One kind's objects: by key, in (namespace, name) order, and the part of the view built from them."""

    def __init__(self, kind: str):
        self.kind = kind
        self.entries: dict[str, Entry] = {}
        self.order: list[Entry] = []  # the same entries, sorted by (namespace, name)
        self.records: tuple = ()
        self.stored: dict[ObjKey, Stored] = {}
        self.bad: dict[ObjKey, BadObject] = {}
        self.dirty = True

    def put(self, entry: Entry) -> Entry | None:
        old = self.entries.get(entry.key)
        self.entries[entry.key] = entry
        if old is None:
            bisect.insort(self.order, entry, key=_place)
        else:
            self.order[bisect.bisect_left(self.order, _place(old), key=_place)] = entry
        self.dirty = True
        return old

    def pop(self, key: str) -> Entry | None:
        old = self.entries.pop(key, None)
        if old is not None:
            del self.order[bisect.bisect_left(self.order, _place(old), key=_place)]
            self.dirty = True
        return old

    def reset(self, entries: dict[str, Entry]) -> None:
        self.entries = entries
        self.order = sorted(entries.values(), key=_place)
        self.dirty = True

    def build(self) -> None:
        """The records (model order), stored statuses and refused objects of this kind, again."""
        kind, ordered = self.kind, self.order
        self.records = tuple(e.record for e in ordered if e.bad is None)
        self.bad = {(kind, e.namespace, e.name): e.bad for e in ordered if e.bad is not None}
        self.stored = {(kind, e.namespace, e.name): Stored(status=e.status) for e in ordered
                       if e.bad is None and e.status is not None}
        self.dirty = False


class Cache:
    def __init__(self, on_change: Change | None = None):
        self._lock = threading.RLock()
        self._kinds: dict[str, _Kind] = {r.kind: _Kind(r.kind) for r in RESOURCES}
        self._version = 0
        self._built: tuple[int, Snapshot, dict[ObjKey, Stored], dict[ObjKey, BadObject]] | None = None
        self.synced = {r.kind: threading.Event() for r in RESOURCES}
        self.on_change = on_change

    decode = staticmethod(decode_entry)  # what the informers decode each object with

    def _notify(self, kind: str, old: Entry | None, new: Entry | None) -> None:
        if self.on_change is not None:
            self.on_change(kind, old, new)

    def replace(self, kind: str, entries: list[Entry]) -> None:
        """A fresh list: the store becomes exactly these objects; each difference is delivered as a change.
        An object the cache already holds at a newer version (written by us since) keeps that version."""
        changes = []
        with self._lock:
            store = self._kinds[kind].entries
            fresh: dict[str, Entry] = {}
            for entry in entries:
                old = store.get(entry.key)
                if old is not None and (old.resource_version == entry.resource_version
                                        or _newer(entry.resource_version, old.resource_version)):
                    entry = old  # the object held is as new: kept (and the view built from it)
                fresh[entry.key] = entry
                if old is not entry:
                    changes.append((old, entry))
            changes += [(old, None) for key, old in store.items() if key not in fresh]
            if changes:
                self._kinds[kind].reset(fresh)
            else:
                self._kinds[kind].entries = fresh  # the same objects: the view stands
            if changes:
                self._version += 1
        self.synced[kind].set()
        for old, new in changes:
            self._notify(kind, old, new)

    def upsert(self, entry: Entry, notify: bool = True) -> bool:
        """An object added or modified (a watch event, or the answer to our own write with ``notify=False``).
        An older version than the one held is ignored. True when the store changed."""
        with self._lock:
            held = self._kinds[entry.kind]
            old = held.entries.get(entry.key)
            if old is not None and (
                old.resource_version == entry.resource_version or _newer(entry.resource_version, old.resource_version)
            ):
                return False
            held.put(entry)
            self._version += 1
        if notify:
            self._notify(entry.kind, old, entry)
        return True

    def delete(self, kind: str, key: str) -> None:
        with self._lock:
            old = self._kinds[kind].pop(key)
            if old is None:
                return
            self._version += 1
        self._notify(kind, old, None)

    def get(self, kind: str, key: str) -> Entry | None:
        with self._lock:
            return self._kinds[kind].entries.get(key)

    def entries(self, kind: str) -> list[Entry]:
        with self._lock:
            return list(self._kinds[kind].entries.values())

    def all_synced(self) -> bool:
        return all(event.is_set() for event in self.synced.values())

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {kind: len(held.entries) for kind, held in self._kinds.items()}

    def view(self) -> tuple[Snapshot, dict[ObjKey, Stored], dict[ObjKey, BadObject]]:
        """The current objects as an immutable Snapshot (objects in (namespace, name) order), the stored status
        of each object the reconciler writes to, and the objects the model refuses. Built again only after a
        change, and then only the kinds that changed (the others keep their tuples, and the snapshot's indexes
        of them): a batch's view costs what changed since the last one, not the fleet."""
        with self._lock:
            if self._built is not None and self._built[0] == self._version:
                return self._built[1], self._built[2], self._built[3]
            changed = {kind for kind, held in self._kinds.items() if held.dirty}
            for kind in changed:
                self._kinds[kind].build()
            kinds = self._kinds
            snapshot = Snapshot(**{field: kinds[kind].records for kind, field in _SNAPSHOT_FIELDS.items()})
            if self._built is not None:
                before = self._built[1]
                for name, reads in _INDEXES.items():
                    if name in before.__dict__ and not changed.intersection(reads):
                        snapshot.__dict__[name] = before.__dict__[name]
            stored: dict[ObjKey, Stored] = {}
            bad: dict[ObjKey, BadObject] = {}
            for held in kinds.values():
                stored.update(held.stored)
                bad.update(held.bad)
            self._built = (self._version, snapshot, stored, bad)
            return snapshot, stored, bad
