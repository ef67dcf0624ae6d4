"""The reconciler's view of the cluster: list+watch informers for Budgets, Runs, Reservations, GPULeases and
Nodes, and the one in-memory copy of the objects they keep.

Each informer lists its kind (paginated), remembers the list's resourceVersion, then watches from it with
``allowWatchBookmarks`` (bookmarks only move the resourceVersion forward). A watch that ends is resumed from the
last resourceVersion seen; a 410 Gone (the version is too old, or an ERROR event saying so) starts over with a
fresh list, whose differences from the cache are delivered as changes. Other failures back off exponentially
and are counted; an informer never gives up.

The store keeps, per object, the typed model record (what the engine reads), the ``status`` as stored (for
the kinds the reconciler writes status to: the diff compares against it) and its resourceVersion. An object
the model refuses is kept as a ``BadObject`` naming the field, outside the snapshot. ``snapshot()`` builds the
immutable Snapshot the pure code evaluates (cached until something changes)."""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..model import KINDS, Snapshot
from ..sources.cluster import RESOURCES, Resource, _status_message
from ..sources.files import _field_error
from ..sources.transport import describe
from .ratelimit import RateLimiterClosed
from .status import STATUS_KINDS, BadObject, ObjKey, Stored

WATCH_TIMEOUT_SECONDS = 300  # the server ends a watch after this; it is resumed from the last version
LIST_CHUNK = 500
STOPPING = "Stopping"  # ApiError.reason of a request the rate limiter held until the reconciler stopped


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


class _ListMeta(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _RawList(msgspec.Struct, frozen=True, gc=False):
    metadata: _ListMeta = _ListMeta()
    items: list[msgspec.Raw] = []


class _Event(msgspec.Struct, frozen=True, gc=False):
    type: str
    object: msgspec.Raw


class _Status(msgspec.Struct, frozen=True, gc=False):
    code: int = 0
    reason: str = ""
    message: str = ""


_PEEK = msgspec.json.Decoder(_Peek)
_RAW_LIST = msgspec.json.Decoder(_RawList)
_EVENT = msgspec.json.Decoder(_Event)
_STATUS = msgspec.json.Decoder(_Status)
_TYPED = {kind: msgspec.json.Decoder(cls) for kind, cls in KINDS.items()}


@dataclass(frozen=True)
class Entry:
    """One object in the cache: its typed record (None when the model refuses it), its stored status (kinds
    whose status the reconciler writes), and its resourceVersion."""

    kind: str
    namespace: str
    name: str
    resource_version: str
    record: Any = None
    status: Any = None
    bad: BadObject | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def decode_entry(kind: str, raw: bytes | msgspec.Raw) -> Entry:
    peek = _PEEK.decode(raw)
    meta = peek.metadata
    namespace = meta.namespace if kind != "Node" else ""
    status = dict(peek.status or {}) if kind in STATUS_KINDS else None
    try:
        record = _TYPED[kind].decode(raw)
    except msgspec.ValidationError as exc:
        bad = BadObject(kind=kind, namespace=namespace, name=meta.name, error=_field_error(exc), uid=meta.uid,
                        generation=meta.generation, resource_version=meta.resource_version, status=status or {})
        return Entry(kind, namespace, meta.name, meta.resource_version, None, status, bad)
    return Entry(kind, namespace, meta.name, meta.resource_version, record, status)


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


class _Kind:
    """One kind's objects: by key, in (namespace, name) order, and the part of the view built from them."""

    def __init__(self, kind: str):
        self.kind = kind
        self.entries: dict[str, Entry] = {}
        self.order: list[tuple[str, str, str]] = []  # (namespace, name, key), sorted
        self.records: tuple = ()
        self.stored: dict[ObjKey, Stored] = {}
        self.bad: dict[ObjKey, BadObject] = {}
        self.dirty = True

    def put(self, entry: Entry) -> Entry | None:
        old = self.entries.get(entry.key)
        self.entries[entry.key] = entry
        if old is None:
            bisect.insort(self.order, (entry.namespace, entry.name, entry.key))
        self.dirty = True
        return old

    def pop(self, key: str) -> Entry | None:
        old = self.entries.pop(key, None)
        if old is not None:
            at = bisect.bisect_left(self.order, (old.namespace, old.name, key))
            del self.order[at]
            self.dirty = True
        return old

    def reset(self, entries: dict[str, Entry]) -> None:
        self.entries = entries
        self.order = sorted((e.namespace, e.name, key) for key, e in entries.items())
        self.dirty = True

    def build(self) -> None:
        """The records (model order), stored statuses and refused objects of this kind, again."""
        kind, entries = self.kind, self.entries
        ordered = [entries[key] for _ns, _name, key in self.order]
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
                if old is not None and _newer(entry.resource_version, old.resource_version):
                    entry = old
                fresh[entry.key] = entry
                if old is None or old.resource_version != entry.resource_version:
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


# --- talking to the API server -----------------------------------------------------------------------------


class ApiError(Exception):
    """A failed request: HTTP status (0 = no answer), the Status reason and a one-line message."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class Gone(ApiError):
    """410: the resourceVersion is too old; list again."""


def request(api: Any, method: str, path: str, *, query: list[tuple[str, Any]] | None = None, body: Any = None,
            content_type: str = "application/json", timeout: Any = None, stream: bool = False) -> Any:
    """One request through the kubernetes client's ApiClient (kubeconfig auth, TLS, proxies). Returns the
    body bytes, or — with ``stream`` — the open urllib3 response. Raises ApiError (Gone for 410)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(method=method, resource_path=path, query_params=query or [],
                                     header_params=headers, body=body, auth_settings=["BearerToken"])
    try:
        response = api.call_api(*serialized, _request_timeout=timeout)
    except RateLimiterClosed as exc:  # stopping while it waited for the client-side rate limiter: never sent
        raise ApiError(0, STOPPING, str(exc)) from None
    except Exception as exc:  # urllib3 transport errors, or an ApiException raised before a response
        status = getattr(exc, "status", 0) or 0
        if status:
            raise _error(status, getattr(exc, "body", None) or str(exc)) from None
        configuration = api.configuration
        raise ApiError(0, "Unreachable", _transport_text(exc, getattr(configuration, "host", "?"),
                                                         getattr(configuration, "proxy", None))) from None
    if not 200 <= response.status <= 299:
        raise _error(response.status, response.read())
    if stream:
        return response.response
    return response.read()


def _transport_text(exc: Exception, server: str, proxy: str | None = None) -> str:
    """One line, as the reports say it (sources/transport.py)."""
    detail = f"{type(exc).__name__}: {exc}"
    if "timed out" in detail.lower() or "Timeout" in detail:
        return f"the server at {server} did not answer in time"
    return describe(exc, server, proxy)


def _error(status: int, body: Any) -> ApiError:
    reason = ""
    if isinstance(body, (bytes, str)):
        try:
            reason = _STATUS.decode(body).reason
        except (msgspec.DecodeError, msgspec.ValidationError):
            reason = ""
    message = _status_message(body) if status else " ".join(str(body).split())[:300]
    reason = reason or {0: "Unreachable", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired"}.get(
        status, str(status))
    cls = Gone if status == 410 else ApiError
    return cls(status, reason, message)


class Informer(threading.Thread):
    """List, then watch, one kind into the cache, forever (until ``stop``)."""

    def __init__(self, resource: Resource, cache: Cache, api: Any, stop: threading.Event, *,
                 log: Callable[..., None], count_error: Callable[[str, str, str], None] | None = None,
                 watch: bool = True, base_backoff: float = 0.5, max_backoff: float = 30.0,
                 max_failures: int | None = None):
        super().__init__(name=f"informer-{resource.plural}", daemon=True)
        self.resource = resource
        self.cache = cache
        self.api = api
        self.stop_event = stop
        self.log = log
        self.count_error = count_error or (lambda verb, resource, reason: None)
        self.watch_enabled = watch
        self.base_backoff = base_backoff
        self.max_backoff = max_backoff
        self.resource_version = ""
        self.lists = 0  # how many full lists (1 + relists)
        self.max_failures = max_failures  # give up after this many failures in a row (--once); None: never
        self.failed = ""  # why it gave up
        self._response: Any = None

    # --- list ---------------------------------------------------------------------------------------------

    def list_once(self) -> None:
        """List every object (pages of LIST_CHUNK) and replace the store; remember the list's version."""
        path = self.resource.path(None)
        entries: list[Entry] = []
        token = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", LIST_CHUNK)]
            if token:
                query.append(("continue", token))
            page = _RAW_LIST.decode(request(self.api, "GET", path, query=query, timeout=(10, 60)))
            entries.extend(decode_entry(self.resource.kind, raw) for raw in page.items)
            token = page.metadata.continue_
            if not token:
                self.resource_version = page.metadata.resource_version
                break
        self.cache.replace(self.resource.kind, entries)
        self.lists += 1
        bad = sum(1 for e in entries if e.bad is not None)
        self.log("listed", kind=self.resource.kind, objects=len(entries), bad=bad,
                 resourceVersion=self.resource_version)

    # --- watch --------------------------------------------------------------------------------------------

    def watch_once(self) -> None:
        """One watch from the last resourceVersion until the server ends it; events go into the cache."""
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", self.resource_version),
                 ("timeoutSeconds", WATCH_TIMEOUT_SECONDS)]
        response = request(self.api, "GET", self.resource.path(None), query=query, stream=True,
                           timeout=(10, WATCH_TIMEOUT_SECONDS + 60))
        self._response = response
        try:
            buffer = b""
            for chunk in response.stream(64 * 1024, decode_content=True):
                if self.stop_event.is_set():
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self._event(line)
        finally:
            self._response = None
            response.release_conn()

    def _event(self, line: bytes) -> None:
        event = _EVENT.decode(line)
        kind = self.resource.kind
        if event.type == "ERROR":
            status = _STATUS.decode(event.object)
            if status.code == 410:
                raise Gone(410, status.reason or "Expired", status.message)
            raise ApiError(status.code, status.reason, status.message)
        if event.type == "BOOKMARK":
            self.resource_version = _PEEK.decode(event.object).metadata.resource_version or self.resource_version
            return
        entry = decode_entry(kind, event.object)
        if event.type == "DELETED":
            self.cache.delete(kind, entry.key)
        else:
            self.cache.upsert(entry)
        if entry.resource_version:
            self.resource_version = entry.resource_version

    # --- the loop -----------------------------------------------------------------------------------------

    def run(self) -> None:
        failures = 0
        while not self.stop_event.is_set():
            try:
                if not self.resource_version:
                    self.list_once()
                if not self.watch_enabled:
                    return
                self.watch_once()
                failures = 0
            except Gone as gone:
                self.log("relist", kind=self.resource.kind, reason="410 Gone", detail=gone.message)
                self.resource_version = ""
            except Exception as exc:
                if self.stop_event.is_set():
                    return
                status, reason = getattr(exc, "status", 0), getattr(exc, "reason", type(exc).__name__)
                verb = "list" if not self.resource_version else "watch"
                self.count_error(verb, self.resource.plural, str(reason))
                delay = min(self.max_backoff, self.base_backoff * (2**failures))
                failures += 1
                if self.max_failures is not None and failures >= self.max_failures:
                    self.failed = f"{verb} {self.resource.qualified}: {exc}"
                    self.log("error", level="error", kind=self.resource.kind, verb=verb, status=status,
                             reason=reason, detail=str(exc), giveUpAfter=failures)
                    return
                self.log("error", level="warning", kind=self.resource.kind, verb=verb, status=status,
                         reason=reason, detail=str(exc), retryIn=f"{delay:g}s")
                self.stop_event.wait(delay)

    def close(self) -> None:
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()


def wait_synced(cache: Cache, stop: threading.Event, timeout: float | None = None,
                informers: list[Informer] = ()) -> bool:
    """Until every kind has been listed once (or ``stop``, or ``timeout``, or an informer gave up)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        if cache.all_synced():
            return True
        if any(i.failed for i in informers):
            return False
        if deadline is not None and time.monotonic() > deadline:
            return False
        stop.wait(0.05)
    return False
