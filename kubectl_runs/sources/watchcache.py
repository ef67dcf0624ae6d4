"""The store behind ``-w/--watch``: the objects the informers (``sources.informer``) keep, as typed records of
the same model a live load decodes, and what changed since it was last asked.

Each kind is a dict ``namespace/name -> WatchEntry``. An event whose object is the same record as the one held
(only its resourceVersion, or fields the model does not read, changed) is no change: nothing is re-evaluated
for it. ``snapshot()`` builds the Snapshot a report evaluates, through the collector a live load uses."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import msgspec

from ..model import SNAPSHOT_KINDS, Snapshot
from ..pods.model import VERDICT_EVENT_REASONS

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


class _Meta(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""


class _Peek(msgspec.Struct, frozen=True, gc=False):
    metadata: _Meta = _Meta()


_PEEK = msgspec.json.Decoder(_Peek)
_DECODERS: dict[str, msgspec.json.Decoder] = {}


@dataclass(frozen=True)
class WatchEntry:
    kind: str
    key: str
    resource_version: str
    record: Any


@dataclass(frozen=True)
class Change:
    """One object that changed: ADDED, MODIFIED or DELETED, its kind and ``namespace/name`` (or name)."""

    type: str
    kind: str
    key: str

    def __str__(self) -> str:
        return f"{self.type} {self.kind} {self.key}"


def _decoder(kind: str) -> msgspec.json.Decoder:
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.json.Decoder(SNAPSHOT_KINDS[kind])
    return decoder


def _same(a: Any, b: Any) -> bool:
    """The same record but for its resourceVersion (and what the model leaves out)."""
    if a == b:
        return True
    meta_a, meta_b = getattr(a, "metadata", None), getattr(b, "metadata", None)
    if meta_a is None or meta_b is None or not hasattr(meta_a, "resource_version"):
        return False
    try:
        return msgspec.structs.replace(a, metadata=msgspec.structs.replace(meta_a, resource_version="")) == \
            msgspec.structs.replace(b, metadata=msgspec.structs.replace(meta_b, resource_version=""))
    except TypeError:  # not a Struct
        return False


class WatchCache:
    """What the informers of one ``-w`` keep; ``changes()`` hands over (and forgets) what changed since."""

    def __init__(self, kinds: list[str]):
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)
        self._kinds: dict[str, dict[str, WatchEntry]] = {kind: {} for kind in kinds}
        self._pending: list[Change] = []
        self.synced = {kind: threading.Event() for kind in kinds}
        self.version = 0  # moves on every change

    # --- the informer's side --------------------------------------------------------------------------------

    @staticmethod
    def decode(kind: str, raw: Any) -> WatchEntry:
        meta = _PEEK.decode(raw).metadata
        key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        try:
            record = _decoder(kind).decode(raw)
        except msgspec.ValidationError:
            record = None  # an object the model refuses: left out, as a live load would refuse it loudly
        if kind == "Event" and record is not None and record.reason not in VERDICT_EVENT_REASONS:
            record = None  # as a live load keeps them: the scheduler's and controllers' verdicts only
        return WatchEntry(kind, key, meta.resource_version, record)

    def replace(self, kind: str, entries: list[WatchEntry]) -> None:
        with self._lock:
            held = self._kinds[kind]
            fresh = {e.key: e for e in entries}
            changes = [Change(DELETED, kind, key) for key in held if key not in fresh]
            for key, entry in fresh.items():
                old = held.get(key)
                if old is None:
                    if entry.record is not None:  # an object left out is no change
                        changes.append(Change(ADDED, kind, key))
                elif not _same(old.record, entry.record):
                    changes.append(Change(MODIFIED, kind, key))
            self._kinds[kind] = fresh
            self._record(changes)
        self.synced[kind].set()

    def upsert(self, entry: WatchEntry) -> bool:
        with self._lock:
            held = self._kinds[entry.kind]
            old = held.get(entry.key)
            held[entry.key] = entry
            if _same(None if old is None else old.record, entry.record):
                return False  # the same record, or an object left out (an Event that is no verdict) again
            self._record([Change(MODIFIED if old is not None else ADDED, entry.kind, entry.key)])
            return True

    def delete(self, kind: str, key: str) -> None:
        with self._lock:
            old = self._kinds[kind].pop(key, None)
            if old is not None and old.record is not None:
                self._record([Change(DELETED, kind, key)])

    def _record(self, changes: list[Change]) -> None:
        if changes:
            self._pending.extend(changes)
            self.version += 1
            self.changed.notify_all()

    # --- the report's side ----------------------------------------------------------------------------------

    def all_synced(self) -> bool:
        return all(event.is_set() for event in self.synced.values())

    def changes(self) -> list[Change]:
        with self._lock:
            pending, self._pending = self._pending, []
            return pending

    def snapshot(self, server: str = "") -> Snapshot:
        from .files import _Collector

        collector = _Collector()
        with self._lock:
            for kind, held in self._kinds.items():
                collector.add_many(kind, [e.record for e in held.values() if e.record is not None], server)
        return collector.snapshot()


# a 403 on these is no objects (a load notes it): the pod reports still answer without them
FORBIDDEN_OK = ("Event", "ResourceQuota", "LimitRange", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass",
                "ResourceSlice")


def start_informers(source: Any, resources: list[tuple[Any, bool]], stop: threading.Event,
                    log: Any) -> tuple[WatchCache, list]:
    """One informer per kind a report reads (``resources``: (Resource, whether a 404 means no objects)), each
    into one WatchCache, started; they list, then watch, until ``stop``. Events are the Warnings; a 403 on
    Events, ResourceQuotas or LimitRanges is no objects, as a load reads them (with a note)."""
    from kubernetes import client

    from .cluster import _api_client, quiet_client_logging
    from .informer import Informer

    quiet_client_logging()
    store = WatchCache([r.kind for r, _ in resources])
    configuration = _api_client(source).configuration
    informers = []
    for resource, missing_ok in resources:
        informer = Informer(resource, store, client.ApiClient(configuration), stop, log=log,
                            base_backoff=0.2, max_backoff=1.0, missing_ok=missing_ok,
                            fallback_namespace=source.fallback_namespace,
                            field_selector="type=Warning" if resource.kind == "Event" else None,
                            forbidden_ok=resource.kind in FORBIDDEN_OK)
        informers.append(informer)
        informer.start()
    return store, informers
