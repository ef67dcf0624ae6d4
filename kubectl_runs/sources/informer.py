"""List+watch of one kind into a store, for as long as it runs: the one watch implementation, used by the
reconciler (``reconciler.cache``) and by ``-w/--watch`` on the reports (``cli.watching``).

An informer lists its kind (paginated; its first list from the API server's watch cache, see ``list_once``),
remembers the list's resourceVersion, then watches from it with ``allowWatchBookmarks`` (bookmarks only move the
resourceVersion forward). A watch that ends is resumed from the
last resourceVersion seen; a 410 Gone (the version is too old, or an ERROR event saying so) starts over with a
fresh list, whose differences from the store are delivered as changes. Other failures back off exponentially
and are counted; an informer never gives up (unless told to after some failures).

The store is anything with ``decode(kind, raw) -> entry`` (an entry has ``key`` and ``resource_version``),
``replace(kind, entries)``, ``upsert(entry)`` and ``delete(kind, key)``."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from .cluster import Resource, _status_message
from .transport import describe

WATCH_TIMEOUT_SECONDS = 300  # the server ends a watch after this; it is resumed from the last version
LIST_CHUNK = 500
STOPPING = "Stopping"  # ApiError.reason of a request the rate limiter held until the reconciler stopped


class RateLimiterClosed(Exception):
    """The reconciler is stopping: a request still waiting for its token is not sent (raised by the client-side
    rate limiter, reconciler/ratelimit.py; defined here, below it, so that the informers can tell it apart)."""


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


class _Versioned(msgspec.Struct, frozen=True, gc=False):
    metadata: _ListMeta = _ListMeta()


_RAW_LIST = msgspec.json.Decoder(_RawList)
_EVENT = msgspec.json.Decoder(_Event)
_STATUS = msgspec.json.Decoder(_Status)
_VERSIONED = msgspec.json.Decoder(_Versioned)


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

    def __init__(self, resource: Resource, cache: Any, api: Any, stop: threading.Event, *,
                 log: Callable[..., None], count_error: Callable[[str, str, str], None] | None = None,
                 watch: bool = True, base_backoff: float = 0.5, max_backoff: float = 30.0,
                 max_failures: int | None = None, missing_ok: bool = False,
                 fallback_namespace: str | None = None, field_selector: str | None = None,
                 forbidden_ok: bool = False):
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
        self.missing_ok = missing_ok  # a 404 on the list (CRD not installed): no objects of this kind, no watch
        self.missing = False
        # a 403 on the cluster-wide list of a namespaced kind: list and watch this namespace alone (as reports do)
        self.fallback_namespace = fallback_namespace if resource.namespaced else None
        self.namespace: str | None = None
        self.field_selector = field_selector  # e.g. Events: type=Warning, on the list and the watch alike
        self.forbidden_ok = forbidden_ok  # a 403 (after the namespace fallback) is no objects, as a 404 is
        self._response: Any = None

    # --- list ---------------------------------------------------------------------------------------------

    def list_once(self) -> None:
        """List every object (pages of LIST_CHUNK) and replace the store; remember the list's version.

        The first list of a watching informer asks for ``resourceVersion=0`` (``resourceVersionMatch=NotOlderThan``),
        as client-go's reflector does: the API server answers from its watch cache, in one response whatever the
        limit (200,000 GPULeases: ~6 s instead of ~30 s of etcd pages), and pages from etcd only if it has no watch
        cache. That list may be a little behind etcd; the watch from its resourceVersion delivers everything since.
        A relist (after a 410), and the list of an informer that does not watch (``--once``), are consistent reads
        as before: they never go back in time, and nothing would catch them up."""
        path = self.resource.path(self.namespace)
        entries: list[Any] = []
        token = ""
        from_cache = self.watch_enabled and self.lists == 0
        while True:
            query: list[tuple[str, Any]] = [("limit", LIST_CHUNK)]
            if self.field_selector:
                query.append(("fieldSelector", self.field_selector))
            if token:
                query.append(("continue", token))  # a continue token carries the list's version: no resourceVersion
            elif from_cache:
                query += [("resourceVersion", "0"), ("resourceVersionMatch", "NotOlderThan")]
            try:
                body = request(self.api, "GET", path, query=query, timeout=(10, 60))
            except ApiError as exc:
                if exc.status == 403 and self.fallback_namespace and self.namespace is None and not token:
                    self.namespace = self.fallback_namespace
                    self.log("narrowed", kind=self.resource.kind, namespace=self.namespace)
                    path = self.resource.path(self.namespace)
                    continue
                if not ((exc.status == 404 and self.missing_ok) or (exc.status == 403 and self.forbidden_ok)):
                    raise
                self.missing = True
                self.cache.replace(self.resource.kind, [])
                return
            page = _RAW_LIST.decode(body)
            entries.extend(self.cache.decode(self.resource.kind, raw) for raw in page.items)
            token = page.metadata.continue_
            if not token:
                self.resource_version = page.metadata.resource_version
                break
        self.cache.replace(self.resource.kind, entries)
        self.lists += 1
        bad = sum(1 for e in entries if getattr(e, "bad", None) is not None)
        self.log("listed", kind=self.resource.kind, objects=len(entries), bad=bad,
                 resourceVersion=self.resource_version)

    # --- watch --------------------------------------------------------------------------------------------

    def watch_once(self) -> None:
        """One watch from the last resourceVersion until the server ends it; events go into the cache."""
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", self.resource_version),
                 ("timeoutSeconds", WATCH_TIMEOUT_SECONDS)]
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        response = request(self.api, "GET", self.resource.path(self.namespace), query=query, stream=True,
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
            self.resource_version = _VERSIONED.decode(event.object).metadata.resource_version or self.resource_version
            return
        entry = self.cache.decode(kind, event.object)
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
                if not self.watch_enabled or self.missing:
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


def wait_synced(cache: Any, stop: threading.Event, timeout: float | None = None,
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
