"""The live source: the cluster of the current kubeconfig context. Requests go through ``lean_client`` (urllib3,
set up from the kubeconfig as the kubernetes client would be) unless the kubeconfig needs the client itself
(an auth-provider, a proxy, in-cluster config: ``kubeclient.api_client``).

kubeconfig discovery is kubectl's (``--kubeconfig``, else ``$KUBECONFIG`` with several files, else
``~/.kube/config``, else in-cluster), exec credential plugins included. Lists are paginated with
``limit``/``continue`` and start again from scratch when a continue token expires (410 Gone). Each page is
decoded straight into typed records, as snapshot files are. Every failure becomes one line naming what was
refused or unreachable.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from ..kueue.model import KAIWO_API, KUEUE_V1ALPHA1, KUEUE_V1BETA1
from ..model import GROUP, SNAPSHOT_KINDS, VERSION, GPULease, Snapshot
from ..pods.model import VERDICT_EVENT_REASONS
from ..timeutil import parse_time, rfc3339
from . import Source
from .files import _Collector, gc_paused
from .kubeclient import ClusterError, connect, quiet_client_logging
from .kubeclient import api_client as _api_client  # noqa: F401  (the reconciler's and tests' full client)

T = TypeVar("T")

DEFAULT_CHUNK_SIZE = 500  # kubectl's --chunk-size default
RELIST_ATTEMPTS = 3

# Without --request-timeout a request gives up by itself, as kubectl does (a server that accepts TCP and never
# answers must not hang a command for ever). CONNECT_TIMEOUT bounds the TCP connect and the TLS handshake.
# READ_TIMEOUT bounds each wait for the next bytes of an answer, not the whole answer: a page of a large list
# that streams for minutes is not cut off, while an API server that says nothing for a minute is given up on
# (a page of 500 objects normally starts within a second or two, even from a loaded etcd).
# --request-timeout N replaces both with one limit on the request (kubectl's meaning); 0 means no limit.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
# Those limits are per wait: a server that trickles a byte now and then never trips them. So each request also
# has a deadline for its whole answer, from the request to the body's last byte: --request-timeout N, else
# DEADLINE (a page of 500 objects that takes ten minutes is not a working server).
DEADLINE = 600.0
_GRACE = 0.5


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    api_version: str
    namespaced: bool

    def path(self, namespace: str | None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{base}/{self.plural}"

    @property
    def qualified(self) -> str:
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


CRD_API = f"{GROUP}/{VERSION}"
RESOURCES = (
    Resource("Node", "nodes", "v1", namespaced=False),
    Resource("Budget", "budgets", CRD_API, namespaced=True),
    Resource("Run", "runs", CRD_API, namespaced=True),
    Resource("Reservation", "reservations", CRD_API, namespaced=True),
    Resource("GPULease", "gpuleases", CRD_API, namespaced=True),
)
EVENTS = Resource("Event", "events", "v1", namespaced=True)
PODS = Resource("Pod", "pods", "v1", namespaced=True)
# what the pod reports read (kubectl_runs.pods), saved by `snapshot save`
POD_RESOURCES = (PODS, EVENTS, Resource("ResourceQuota", "resourcequotas", "v1", namespaced=True),
                 Resource("LimitRange", "limitranges", "v1", namespaced=True))
# Kueue and Kaiwo (kubectl_runs.kueue): listed for the queue reports and `snapshot save`. Where a CRD is not
# installed (404) there are simply no objects of that kind.
QUEUE_RESOURCES = (
    Resource("ResourceFlavor", "resourceflavors", KUEUE_V1BETA1, namespaced=False),
    Resource("ClusterQueue", "clusterqueues", KUEUE_V1BETA1, namespaced=False),
    Resource("Cohort", "cohorts", KUEUE_V1ALPHA1, namespaced=False),
    Resource("LocalQueue", "localqueues", KUEUE_V1BETA1, namespaced=True),
    Resource("Workload", "workloads", KUEUE_V1BETA1, namespaced=True),
    Resource("WorkloadPriorityClass", "workloadpriorityclasses", KUEUE_V1BETA1, namespaced=False),
    Resource("KaiwoJob", "kaiwojobs", KAIWO_API, namespaced=True),
    Resource("KaiwoService", "kaiwoservices", KAIWO_API, namespaced=True),
)


class NotFound(ClusterError):
    """404: for a list, the kind's CRD is not installed."""


class CRDsMissing(NotFound):
    """404 for a jobtree.dev list: this project's CRDs are not installed (the message says how to install them)."""


class Forbidden(ClusterError):
    """403: RBAC refused a request (the message names the verb, the resource and the user)."""

    forbidden = True


class _ListMeta(msgspec.Struct, frozen=True, gc=False):
    continue_: str = msgspec.field(default="", name="continue")


class _Page(msgspec.Struct, frozen=True, gc=False):
    metadata: _ListMeta = _ListMeta()


_PAGE_META = msgspec.json.Decoder(_Page)
_ITEM_DECODERS: dict[str, msgspec.json.Decoder] = {}


_DECODERS_LOCK = threading.Lock()


def _items_decoder(kind: str) -> msgspec.json.Decoder:
    """A decoder of one list page into typed records (items of built-in lists carry no ``kind``). Made under a
    lock: msgspec builds a type's decoding information in Python code, and a thread that decodes with it
    half-built crashes the process (several clusters are read in parallel: cli/clusters.py warms them first)."""
    with _DECODERS_LOCK:
        decoder = _ITEM_DECODERS.get(kind)
        if decoder is None:
            page_type = msgspec.defstruct(f"{kind}Page", [("items", list[SNAPSHOT_KINDS[kind]], [])], frozen=True,
                                          gc=False)
            decoder = _ITEM_DECODERS[kind] = msgspec.json.Decoder(page_type)
        return decoder


def warm_decoders() -> None:
    """Make every list decoder now, in one thread, before several clusters are read at once."""
    for resource in (*RESOURCES, *QUEUE_RESOURCES, PODS):
        _items_decoder(resource.kind)


class Cluster:
    """A connection to one API server, made from kubeconfig like kubectl's."""

    def __init__(self, source: Source):
        self.source = source
        quiet_client_logging()
        self.api = connect(source)
        self.server = self.api.configuration.host
        self.api_error = _api_error(self.api)
        self.timeout = source.request_timeout  # None: not given (the defaults apply); 0: no limit
        self.chunk_size = source.chunk_size or DEFAULT_CHUNK_SIZE
        self.missing: set[Resource] = set()  # the kinds whose list answered 404 (their CRD is not installed)

    # --- raw requests -----------------------------------------------------------------------------------

    @property
    def request_timeout(self) -> float | tuple[float, float] | None:
        """What the kubernetes client is given: (connect, read) by default, one limit with --request-timeout,
        None (no limit) with --request-timeout 0."""
        if self.timeout is None:
            return (CONNECT_TIMEOUT, READ_TIMEOUT)
        return self.timeout or None

    def get(self, path: str, query: list[tuple[str, Any]] | None = None) -> bytes:
        """GET ``path`` and return the body; non-2xx answers and transport failures raise ClusterError."""
        request = self.api.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query or [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        return self._bounded(lambda state: self._fetch(request, path, state))

    def _bounded(self, call: Callable[[dict[str, Any]], T]) -> T:
        """``call(state)`` within the deadline of a whole request. The request runs in a worker thread the
        command waits for until the deadline; past it, the connection (``state["response"]``, once the call
        has one) is shut, which ends the worker's read, and the command says so."""
        deadline = self.deadline
        if deadline is None:
            return call({})
        state: dict[str, Any] = {}

        def work() -> None:
            try:
                state["data"] = call(state)
            except BaseException as exc:  # handed to the waiting thread
                state["error"] = exc

        worker = threading.Thread(target=work, name="kubectl-runs-request", daemon=True)
        worker.start()
        worker.join(deadline + _GRACE)  # a silent server: the client's own timeout says it first
        if worker.is_alive():
            _shut(state.get("response"))
            raise self._timeout_error("deadline", deadline)
        if "error" in state:
            raise state["error"]
        return state["data"]

    @property
    def deadline(self) -> float | None:
        """Seconds for a whole request, its body's last byte included: ``--request-timeout``, else DEADLINE;
        None with ``--request-timeout 0``."""
        if self.timeout is None:
            return DEADLINE
        return self.timeout or None

    def _fetch(self, request: Any, path: str, state: dict[str, Any]) -> bytes:
        try:
            response = self.api.call_api(*request, _request_timeout=self.request_timeout)
            state["response"] = response
            response.read()
        except self.api_error as exc:  # raised by some transports before a response exists
            raise self._http_error(exc.status, exc.body, path) from None
        except Exception as exc:  # urllib3 transport errors: unreachable, TLS, timeout
            raise self._transport_error(exc) from None
        if not 200 <= response.status <= 299:
            raise self._http_error(response.status, response.data, path)
        return response.data

    def delete(self, path: str, body: dict) -> int:
        """DELETE ``path`` with a DeleteOptions body; returns the HTTP status (2xx, 404 gone, 409 a failed
        precondition). Other answers and transport failures raise ClusterError."""
        request = self.api.param_serialize(
            method="DELETE",
            resource_path=path,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )

        def send(state: dict[str, Any]) -> tuple[int | None, Any]:
            try:
                response = self.api.call_api(*request, _request_timeout=self.request_timeout)
                state["response"] = response
                response.read()
            except self.api_error as exc:
                return exc.status, exc.body
            except Exception as exc:
                raise self._transport_error(exc) from None
            return response.status, response.data

        status, data = self._bounded(send)
        if status is not None and (200 <= status <= 299 or status in (404, 409)):
            return status
        if status == 403:
            raise Forbidden(f"forbidden: {_status_message(data) or f'DELETE {path}'}")
        if status == 401:
            raise self._http_error(status, data, path)
        raise ClusterError(f"the server at {self.server} answered {status} for DELETE {path}: "
                           f"{_status_message(data) or 'no message'}")

    def pages(self, resource: Resource, namespace: str | None, field_selector: str | None = None
              ) -> Iterator[bytes]:
        """Every page of a list, following ``continue``; a 410 Gone (expired token) starts over."""
        path = resource.path(namespace)
        for _attempt in range(RELIST_ATTEMPTS):
            pages: list[bytes] = []
            token = ""
            try:
                while True:
                    query: list[tuple[str, Any]] = [("limit", self.chunk_size)]
                    if field_selector:
                        query.append(("fieldSelector", field_selector))
                    if token:
                        query.append(("continue", token))
                    body = self.get(path, query)
                    pages.append(body)
                    token = _PAGE_META.decode(body).metadata.continue_
                    if not token:
                        yield from pages
                        return
            except _Expired:
                continue
        raise ClusterError(
            f"listing {resource.qualified}: the continue token expired {RELIST_ATTEMPTS} times in a row "
            "(410 Gone); the list is changing faster than it can be read — try a larger --chunk-size"
        )

    # --- errors -----------------------------------------------------------------------------------------

    def _http_error(self, status: int | None, body: Any, path: str) -> Exception:
        message = _status_message(body)
        if status == 410:
            return _Expired(message)
        if status == 401:
            return ClusterError(
                f"unauthorized: the server at {self.server} does not accept your credentials "
                f"(check the user of your kubeconfig context): {message or 'Unauthorized'}"
            )
        if status == 403:
            return Forbidden(f"forbidden: {message or f'GET {path}'}")
        if status == 404 and f"/apis/{CRD_API}" in path:
            return CRDsMissing(
                f"the {GROUP} CRDs are not installed on {self.server} ({message or '404 Not Found'}): "
                "kubectl apply -f crds/"
            )
        error = NotFound if status == 404 else ClusterError
        return error(f"the server at {self.server} answered {status} for GET {path}: {message or 'no message'}")

    def _transport_error(self, exc: Exception) -> ClusterError:
        from .transport import describe, timeout_of

        timed_out = timeout_of(exc)
        if timed_out is not None:
            return self._timeout_error(*timed_out)
        configuration = self.api.configuration
        return ClusterError(describe(exc, self.server, configuration.proxy,
                                     getattr(configuration, "_proxy_from_env", True),
                                     tls_server_name=getattr(configuration, "tls_server_name", None)))

    def _timeout_error(self, phase: str, seconds: float | None) -> ClusterError:
        """One line naming the server, what it failed to do and the limit that fired."""
        if self.timeout:
            limit = f"within {self.timeout:g}s (--request-timeout)"
        elif phase == "deadline":
            limit = f"within {seconds:g}s (the default deadline of a request; --request-timeout sets another)"
        else:
            if phase == "read" and seconds == CONNECT_TIMEOUT != READ_TIMEOUT:
                phase = "handshake"  # urllib3 calls a TLS handshake that never ends a read timeout
            which = "read" if phase == "read" else "connect"
            seconds = seconds or (READ_TIMEOUT if which == "read" else CONNECT_TIMEOUT)
            limit = f"within {seconds:g}s (the default {which} timeout; --request-timeout sets another)"
        doing = {
            "connect": "did not accept a connection",
            "handshake": "accepted a connection but did not complete the TLS handshake",
            "read": "did not answer",
            "deadline": "did not finish its answer",
        }[phase]
        return ClusterError(f"the server at {self.server} {doing} {limit}")


def _api_error(api: Any) -> type[Exception]:
    """What the transport raises for an answer it did not return as a response: the client's ApiException
    (an SSL error, …); the lean transport raises none (``lean_client``)."""
    error = getattr(api, "api_error", None)
    if error is not None:
        return error
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _shut(response: Any) -> None:
    """End a read that is still going: shut the response's connection down (the worker then sees its end)."""
    connection = getattr(getattr(response, "response", None), "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _Expired(Exception):
    """410 Gone: the continue token expired."""


def _status_message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body, else the body itself, on one line."""
    if body is None:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return _one_line(str(body))[:300]
    if isinstance(decoded, dict) and decoded.get("message"):
        return _one_line(str(decoded["message"]))
    return _one_line(str(body))[:300]


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- what commands use ----------------------------------------------------------------------------------


def load_cluster(source: Source) -> Snapshot:
    """Every object the commands read, from the cluster, as a Snapshot."""
    cluster = Cluster(source)
    collector = _Collector()
    # The queue reports read Nodes and Kueue's/Kaiwo's kinds only: a Kueue cluster needs no jobtree.dev CRDs.
    resources = (RESOURCES[0], *QUEUE_RESOURCES) if source.queues else RESOURCES
    if source.pods:  # `pending`, `explain pod`: every GPU consumer, whatever admits it; a cluster may have none of
        # the CRDs. Events: the Warnings only (FailedScheduling on pods, FailedCreate on their controllers, kept
        # below), ResourceQuotas and LimitRanges: the quota refusals of pods that were never created.
        from .dra import claim_resources

        resources = (*RESOURCES, *QUEUE_RESOURCES, *POD_RESOURCES, *claim_resources(cluster))
    controllers: dict = {}  # the controllers quota refusals name (sources/controllers.py)
    with gc_paused():
        for resource in resources:
            decoder = _items_decoder(resource.kind)
            selector = "type=Warning" if resource is EVENTS else None
            try:
                bodies = readable_pages(cluster, resource, source, collector.notes, selector)
            except Forbidden as refused:
                if resource in POD_RESOURCES[1:]:
                    collector.notes.append(f"{refused.message}; without {resource.qualified}, quota refusals and "
                                           "the scheduler's Events are not shown")
                elif resource.api_version.startswith("resource.k8s.io/"):
                    collector.notes.append(f"{refused.message}; without {resource.qualified}, pods that claim GPUs "
                                           "through DRA are not named")
                else:
                    raise
                continue
            for body in bodies:
                try:
                    page = decoder.decode(body)
                except msgspec.ValidationError as exc:
                    raise ClusterError(f"{resource.qualified} from {cluster.server}: {exc}") from None
                items = page.items
                if resource is EVENTS:
                    from .controllers import live_refusals

                    items = live_refusals(cluster, [e for e in items if e.reason in VERDICT_EVENT_REASONS],
                                          controllers)
                collector.add_many(resource.kind, items, cluster.server)
        return collector.snapshot()


def readable_pages(cluster: Cluster, resource: Resource, source: Source, notes: list[str],
                   field_selector: str | None = None) -> list[bytes]:
    """The pages of a list over every namespace; when RBAC refuses the cluster-wide list of a namespaced kind,
    the pages of ``source.fallback_namespace`` instead, with a note saying what could not be read (reports
    cover the namespaces the user may read). Nodes are cluster-scoped: refusing them stays an error. A Kueue or
    Kaiwo kind whose CRD is not installed has no objects."""
    try:
        return list(cluster.pages(resource, source.namespace, field_selector))
    except NotFound:
        if resource in QUEUE_RESOURCES or (source.pods and resource.kind != "Node"):
            cluster.missing.add(resource)
            return []
        raise
    except Forbidden as refused:
        fallback = source.fallback_namespace
        if not resource.namespaced or source.namespace is not None or not fallback:
            raise
        pages = list(cluster.pages(resource, fallback, field_selector))
        notes.append(f"{refused.message}; reading {resource.qualified} of namespace {fallback} only")
        return pages


def delete_leases(source: Source, leases: Iterable[GPULease],
                  after_each: Callable[[], None] | None = None) -> tuple[int, list[str], list[str]]:
    """Delete these GPULeases, each only if it is still the object that was read (preconditions on its uid and
    resourceVersion: a lease recreated or changed since is left alone). Returns (deleted, gone already, left
    because it changed)."""
    cluster = Cluster(source)
    resource = RESOURCES[-1]
    deleted, gone, changed = 0, [], []
    for lease in leases:
        meta = lease.metadata
        preconditions = {"uid": meta.uid}
        if meta.resource_version:
            preconditions["resourceVersion"] = meta.resource_version
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        status = cluster.delete(f"{resource.path(meta.namespace)}/{quote(meta.name, safe='')}", body)
        if status == 404:
            gone.append(lease.key)
        elif status == 409:
            changed.append(lease.key)
        else:
            deleted += 1
        if after_each is not None:
            after_each()
    return deleted, gone, changed


def recent_events(source: Source, namespace: str, kind: str, name: str, limit: int = 20, *, uid: str = "") -> list[dict]:
    """Events about one object, newest last (for ``explain``). Failing to read them is not fatal: returns
    an empty list (events are a courtesy, and many users may not list them).

    Read through core/v1, which also serves the events.k8s.io/v1 Events (the reconciler's ledger decisions:
    ``regarding`` is ``involvedObject`` there, ``note`` is ``message``, ``eventTime`` their time). With ``uid``,
    Events naming another uid — an earlier object of the same name — are left out, as ``kubectl describe``
    does; Events that name no uid are kept."""
    try:
        cluster = Cluster(source)
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        body = cluster.get(EVENTS.path(namespace), [("fieldSelector", selector)])
    except ClusterError:
        return []
    events = [e for e in msgspec.json.decode(body).get("items") or []
              if not uid or (e.get("involvedObject") or {}).get("uid", "") in ("", uid)]

    def when(event: dict) -> str:
        series = event.get("series") or {}
        return (event.get("lastTimestamp") or series.get("lastObservedTime") or event.get("eventTime")
                or event.get("firstTimestamp") or "")

    def instant(event: dict) -> tuple[int, str]:
        """(0, the time in seconds) — eventTime has microseconds, lastTimestamp none — or (-1, the text)."""
        try:
            return 0, rfc3339(parse_time(when(event)))
        except ValueError:
            return -1, when(event)

    events.sort(key=instant)
    return [
        {
            "type": e.get("type", ""),
            "reason": e.get("reason", ""),
            "message": _one_line(e.get("message", "")),
            "at": instant(e)[1],
            "count": e.get("count") or 1,
        }
        for e in events[-limit:]
    ]
