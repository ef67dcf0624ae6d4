"""The applier: the only code that turns the reconciler's writes (actions.py) into API calls.

- ``PatchStatus``: a JSON merge patch ``{"status": …}`` on the object's status subresource. 404 = the object is
  gone (skipped); the answer (the object as now stored) goes straight into the cache, so the next reconcile
  compares against what was written, not against a watch event that has not arrived yet.
- ``Create``: POST of the whole object; 409 AlreadyExists = done (names are deterministic: a retry after a
  crash cannot create twice).
- ``RecordEvent``: a core/v1 Event with a deterministic name (the same complaint about the same object is
  created once; 409 = already said).
- ``ReportEvent``: an events.k8s.io/v1 Event about a ledger decision (events.py), its name deterministic too
  (409 = already said); ``eventTime`` is the batch's instant, ``reportingInstance`` this replica.

Before every write the leader elector is asked; a replica that does not lead writes nothing. Every request
waits for the client-side rate limiter first (``--kube-api-qps``/``--kube-api-burst``: ``api`` is wrapped by
ratelimit.py's RateLimitedApi); one still waiting when the reconciler stops is not sent (outcome ``error``, not
counted as an API error). A failure that may pass (forbidden, unreachable, conflict, 5xx) is returned as
``retry`` so the loop requeues the object with backoff; nothing here raises into the loop. Every outcome is counted and logged, one line per action."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

from ..model import GROUP, VERSION
from ..timeutil import rfc3339
from .actions import AnyWrite, Create, ObjectRef, PatchStatus, RecordEvent, ReportEvent
from .cache import STOPPING, ApiError, Cache, decode_entry, request
from .status import event_name

PLURALS = {"Budget": "budgets", "Run": "runs", "Reservation": "reservations", "GPULease": "gpuleases"}
COMPONENT = "kubectl-runs-reconciler"
CONTROLLER = "jobtree.dev/kubectl-runs-reconciler"  # reportingController of events.k8s.io/v1 Events
EVENTS_API = "events.k8s.io/v1"

OK, EXISTS, GONE, CONFLICT, FORBIDDEN, ERROR, SKIPPED = "ok", "exists", "gone", "conflict", "forbidden", "error", "skipped"


class Metrics(Protocol):
    def count_write(self, kind: str, action: str, outcome: str) -> None: ...
    def count_api_error(self, verb: str, resource: str, reason: str) -> None: ...


class Elector(Protocol):
    def is_leader(self) -> bool: ...


@dataclass(frozen=True)
class Outcome:
    write: AnyWrite
    outcome: str  # ok | exists | gone | conflict | forbidden | error | skipped (not the leader)
    detail: str = ""
    answer: Any = None  # the object as the API server answered the write (typed record), when it was made

    @property
    def retry(self) -> bool:
        return self.outcome in (CONFLICT, FORBIDDEN, ERROR)


def object_path(kind: str, namespace: str, name: str) -> str:
    if kind == "Node":
        return f"/api/v1/nodes/{quote(name)}"
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURALS[kind]}/{quote(name)}"


def collection_path(kind: str, namespace: str) -> str:
    if kind == "Event":
        return f"/api/v1/namespaces/{quote(namespace)}/events"
    if kind == "events.k8s.io/Event":
        return f"/apis/{EVENTS_API}/namespaces/{quote(namespace)}/events"
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURALS[kind]}"


def event_body(write: RecordEvent, at: datetime) -> dict[str, Any]:
    namespace = write.namespace or "default"  # an Event about a Node lives in default, as kubectl's do
    api_version = "v1" if write.kind == "Node" else f"{GROUP}/{VERSION}"
    involved: dict[str, Any] = {"apiVersion": api_version, "kind": write.kind, "name": write.name}
    if write.namespace:
        involved["namespace"] = write.namespace
    if write.uid:
        involved["uid"] = write.uid
    stamp = rfc3339(at)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(write.name, write.uid, write.message), "namespace": namespace},
        "involvedObject": involved,
        "reason": write.reason,
        "message": write.message[:1024],
        "type": write.type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def _reference(ref: ObjectRef) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": ref.kind, "namespace": ref.namespace,
                           "name": ref.name}
    if ref.uid:
        out["uid"] = ref.uid
    return out


def report_body(write: ReportEvent, at: datetime, instance: str) -> dict[str, Any]:
    """The events.k8s.io/v1 Event of ``write`` (core/v1 readers — ``kubectl describe`` — see ``regarding`` as
    ``involvedObject`` and ``note`` as ``message``)."""
    body: dict[str, Any] = {
        "apiVersion": EVENTS_API,
        "kind": "Event",
        "metadata": {"name": write.event, "namespace": write.namespace},
        "eventTime": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": CONTROLLER,
        "reportingInstance": (instance or COMPONENT)[:128],
        "action": write.verb[:128],
        "reason": write.reason[:128],
        "type": write.type,
        "note": write.note,
        "regarding": _reference(ObjectRef(kind=write.kind, namespace=write.namespace, name=write.name, uid=write.uid)),
    }
    if write.related is not None:
        body["related"] = _reference(write.related)
    return body


class Applier:
    def __init__(self, api: Any, cache: Cache | None, *, log: Callable[..., None], metrics: Metrics | None = None,
                 elector: Elector | None = None, clock: Callable[[], datetime] | None = None,
                 timeout: float = 30.0, instance: str = ""):
        self.api = api
        self.cache = cache
        self.log = log
        self.metrics = metrics
        self.elector = elector
        self.clock = clock
        self.timeout = timeout
        self.instance = instance  # reportingInstance of the Events it reports (this replica)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def apply(self, write: AnyWrite, at: datetime, *, echo: bool = False) -> Outcome:
        """Make one write. The object as the server answers goes into the cache at once; ``echo`` says whether
        that counts as a change for the loop (the ledger's writes do: leases closed, reservations activated
        move budgets and plans; a status write of status.py does not: it only records what was computed)."""
        if not self.leading():
            outcome = Outcome(write, SKIPPED, "not the leader")
        else:
            try:
                outcome = self._apply(write, at, echo)
            except ApiError as exc:
                outcome = self._failed(write, exc)
            except Exception as exc:  # never into the loop: logged, counted, retried
                outcome = Outcome(write, ERROR, f"{type(exc).__name__}: {exc}")
        self._record(outcome)
        return outcome

    def _apply(self, write: AnyWrite, at: datetime, echo: bool) -> Outcome:
        if isinstance(write, PatchStatus):
            path = object_path(write.kind, write.namespace, write.name) + "/status"
            answer = request(self.api, "PATCH", path, body={"status": write.status},
                             content_type="application/merge-patch+json", timeout=self.timeout)
            entry = decode_entry(write.kind, answer)
            if self.cache is not None:
                self.cache.upsert(entry, notify=echo)
            return Outcome(write, OK, answer=entry.record)
        if isinstance(write, Create):
            try:
                answer = request(self.api, "POST", collection_path(write.kind, write.namespace), body=write.body,
                                 timeout=self.timeout)
            except ApiError as exc:
                if exc.status == 409:
                    return Outcome(write, EXISTS, exc.message)
                raise
            if write.kind not in PLURALS:
                return Outcome(write, OK)
            entry = decode_entry(write.kind, answer)
            if self.cache is not None:
                self.cache.upsert(entry, notify=True)
            return Outcome(write, OK, answer=entry.record)
        if isinstance(write, RecordEvent):
            body = event_body(write, at)
            try:
                request(self.api, "POST", collection_path("Event", body["metadata"]["namespace"]), body=body,
                        timeout=self.timeout)
            except ApiError as exc:
                if exc.status == 409:
                    return Outcome(write, EXISTS, "already recorded")
                raise
            return Outcome(write, OK)
        if isinstance(write, ReportEvent):
            try:
                request(self.api, "POST", collection_path("events.k8s.io/Event", write.namespace),
                        body=report_body(write, at, self.instance), timeout=self.timeout)
            except ApiError as exc:
                if exc.status == 409:
                    return Outcome(write, EXISTS, "already reported")
                raise
            return Outcome(write, OK)
        return Outcome(write, ERROR, f"unknown write {type(write).__name__}")

    def _failed(self, write: AnyWrite, exc: ApiError) -> Outcome:
        if exc.reason == STOPPING:  # held by the client-side rate limiter until the reconciler stopped: not sent
            return Outcome(write, ERROR, exc.message)
        if self.metrics is not None:
            verb = "patch" if isinstance(write, PatchStatus) else "create"
            events = isinstance(write, (RecordEvent, ReportEvent))
            resource = "events" if events else PLURALS.get(write.kind, write.kind.lower())
            self.metrics.count_api_error(verb, resource, exc.reason or str(exc.status))
        if exc.status == 404 and isinstance(write, PatchStatus):
            return Outcome(write, GONE, exc.message)
        if exc.status == 409:
            return Outcome(write, CONFLICT, exc.message)
        if exc.status == 403:
            return Outcome(write, FORBIDDEN, exc.message)
        return Outcome(write, ERROR, f"{exc.status or 'unreachable'}: {exc.message}")

    def _record(self, outcome: Outcome) -> None:
        write = outcome.write
        action = type(write).__name__
        with self._lock:
            self.counts[outcome.outcome] = self.counts.get(outcome.outcome, 0) + 1
        if self.metrics is not None and outcome.outcome != SKIPPED:
            self.metrics.count_write(write.kind, action, outcome.outcome)
        level = "info" if outcome.outcome in (OK, EXISTS, GONE, SKIPPED) else "warning"
        fields: dict[str, Any] = {"action": action, "kind": write.kind, "namespace": write.namespace,
                                  "name": write.name, "outcome": outcome.outcome, "cause": write.cause}
        if outcome.detail:
            fields["detail"] = outcome.detail
        self.log("write", level=level, **fields)
