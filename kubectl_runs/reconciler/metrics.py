"""Prometheus metrics and health of the reconciler, served on ``--metrics-addr`` (default ``:8080``).

Everything is in the reconciler's own ``CollectorRegistry`` (no process-global default registry, so two
instances in one test process do not collide), every name starts with ``jobtree_``. docs/reconciler.md
("Metrics") has the same list for admins; tests/unit/test_dashboard.py holds the Grafana dashboard to it and
tests/integration/test_metrics_live.py checks each series after a real activation.

Fleet gauges (reconciler/fleet_gauges.py), computed by the engine from the leader's cache after each batch's own
writes (:meth:`ReconcilerMetrics.update_fleet`: ``accounting.ledger`` — the numbers ``budgets usage`` prints;
nothing re-derives them), replaced whole each time, so an envelope that is gone stops being exported:

- ``jobtree_budget_gpus{namespace,budget,envelope,flavor,owner,class}`` — GPUs charged to an envelope now, by
  class: owned, shared, borrowed, unfunded (slots charged but not funded), spare.
- ``jobtree_budget_concurrency_gpus``, ``jobtree_budget_headroom_gpus``, ``jobtree_budget_consumed_gpu_seconds``
  (GPU-seconds: ``budgets usage`` shows GPU-hours), ``jobtree_budget_window_active`` (the same labels without
  ``class``); ``jobtree_budget_aggregate_headroom_gpus{namespace,budget,aggregate}``.
- ``jobtree_reservations{state}`` (Pending, Activated, Released, Failed), ``jobtree_reservation_backlog{flavor}``
  (Pending reservations), ``jobtree_reservation_eta_seconds{flavor}`` — a gauge histogram of the seconds from
  now until each Pending reservation's ``earliestStart`` (``le="0.0"`` = due or overdue).
- ``jobtree_runs{phase}`` — Runs by stored ``status.phase`` ("" when none yet).
- ``jobtree_fleet_updated_timestamp_seconds`` — the instant the fleet gauges were computed at.

Decisions of the ledger keeper (``--manage-leases``), counted once, when the Reservation's status write that
records them succeeds (:meth:`ReconcilerMetrics.count_decision`; not when a pass finishes the closures of a
decision already written, never with ``--dry-run``). ``scope`` is the Reservation's scope: its flavor, or
``flavor/domain``; ``namespace`` is the namespace of the Run that lost the GPUs (no run names: bounded):

- ``jobtree_reservation_activations_total{flavor,scope,outcome}`` — outcome ``Activated`` or the Failed reason:
  NotEnoughToFree, NotPlaceable, NotFunded (due, nothing taken), NotAuthorized (refused at once: neither made by
  the reconciler nor approved), Other (a reason this version does not know);
- ``jobtree_resolver_actions_total{kind,flavor,scope,namespace}`` — one per action (one lease) an activation
  took: kind ReclaimUnfunded, DropSpare, Shrink, Lottery (the kinds ``status.activation.actions`` records);
- ``jobtree_preempted_gpus_total{kind,flavor,scope,namespace}`` — the GPUs of those actions.

Work of the reconciler:

- ``jobtree_reconcile_duration_seconds`` (histogram), ``jobtree_last_reconcile_timestamp_seconds``;
- ``jobtree_api_writes_total{kind,action,outcome}`` — outcome ok|exists|gone|conflict|forbidden|error;
- ``jobtree_api_errors_total{verb,resource,reason}``;
- ``jobtree_client_rate_limit_wait_seconds`` (histogram) — seconds each API request waited for the client-side
  rate limiter (``--kube-api-qps``/``--kube-api-burst``, reconciler/ratelimit.py) before it was sent; its
  ``_count`` is every request through the limiter (not the leader election's: they are exempt);
- ``jobtree_workqueue_depth``, ``jobtree_leader`` (1 while this replica writes: always without leader election,
  while it holds the Lease with it; 0 on a standby), ``jobtree_ready``;
- ``jobtree_build_info{version}``.

Health (:func:`serve`): ``/healthz`` is 200 while the process serves HTTP at all (liveness: a wedged process
is restarted). ``/readyz`` is 200 once the caches are synced (``set_ready(True)``), for the leader *and* for a
standby: a standby with synced caches is ready to take over, and making it NotReady would stall every rolling
update (``kubectl rollout status`` waits for all replicas to be Ready) and page for a healthy standby. The body
says which: ``ok: leader``, ``ok: standby``, or ``ok`` without leader election.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from .. import __version__
from ..engine.accounting import Ledger, ledger
from ..engine.lottery import ACTION_KINDS
from .fleet_gauges import ETA_BUCKETS, Fleet, fleet_families

__all__ = ["ETA_BUCKETS", "MetricsServer", "ReconcilerMetrics", "parse_addr", "scope_label", "serve"]

log = logging.getLogger("kubectl_runs.reconciler.metrics")

OUTCOMES = ("ok", "exists", "gone", "conflict", "forbidden", "error")
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RATE_LIMIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ACTIVATED = "Activated"
#: outcomes of jobtree_reservation_activations_total besides Activated: the reasons a due Reservation fails with
FAILED_REASONS = ("NotEnoughToFree", "NotPlaceable", "NotFunded", "NotAuthorized")
OTHER = "Other"  # a kind or reason this version does not know (keeps the label values a closed set)
DECISION_LABELS = ("kind", "flavor", "scope", "namespace")


def scope_label(flavor: str, domain: str | None) -> str:
    """The ``scope`` label of a Reservation's scope: ``flavor``, or ``flavor/domain``."""
    return f"{flavor}/{domain}" if domain else flavor


class ReconcilerMetrics:
    """The reconciler's metrics in their own registry (``self.registry``)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, leader_election: bool = True):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.leader_election = leader_election
        self._ready = False
        self._leader = False
        self._lock = threading.Lock()
        self.reconcile_seconds = Histogram(
            "jobtree_reconcile_duration_seconds", "Seconds one reconcile batch took (evaluate + write).",
            buckets=RECONCILE_BUCKETS, registry=r,
        )
        self.last_reconcile = Gauge(
            "jobtree_last_reconcile_timestamp_seconds", "Unix time the last reconcile batch finished.", registry=r
        )
        self.writes = Counter(
            "jobtree_api_writes", "Writes sent to the API server, by kind, action and outcome.",
            ["kind", "action", "outcome"], registry=r,
        )
        self.api_errors = Counter(
            "jobtree_api_errors", "API requests that failed, by verb, resource and reason.",
            ["verb", "resource", "reason"], registry=r,
        )
        self.activations = Counter(
            "jobtree_reservation_activations",
            "Reservations the ledger keeper decided: outcome Activated, or the reason it Failed them with.",
            ["flavor", "scope", "outcome"], registry=r,
        )
        self.resolver_actions = Counter(
            "jobtree_resolver_actions",
            "Leases taken by reservation activations (one per recorded action), by kind, the Reservation's "
            "flavor and scope, and the namespace of the Run that lost them.",
            DECISION_LABELS, registry=r,
        )
        self.preempted_gpus = Counter(
            "jobtree_preempted_gpus",
            "GPUs taken by reservation activations, by action kind, the Reservation's flavor and scope, and the "
            "namespace of the Run that lost them.",
            DECISION_LABELS, registry=r,
        )
        self.rate_limit_wait = Histogram(
            "jobtree_client_rate_limit_wait_seconds",
            "Seconds an API request waited for the client-side rate limiter (--kube-api-qps, --kube-api-burst) "
            "before it was sent.", buckets=RATE_LIMIT_BUCKETS, registry=r,
        )
        self.queue_depth = Gauge("jobtree_workqueue_depth", "Keys waiting in the work queue.", registry=r)
        self.leader = Gauge("jobtree_leader",
                            "1 while this replica writes (always without leader election; while it holds the "
                            "leader Lease with it), 0 on a standby.", registry=r)
        self.ready_gauge = Gauge("jobtree_ready", "1 once the caches are synced.", registry=r)
        info = Gauge("jobtree_build_info", "The running kubectl-runs version.", ["version"], registry=r)
        info.labels(version=__version__).set(1)
        self._fleet = Fleet()
        r.register(self._fleet)

    # --- the interface the loop calls ---------------------------------------------------------------------

    def observe_reconcile(self, seconds: float) -> None:
        self.reconcile_seconds.observe(seconds)
        self.last_reconcile.set(time.time())

    def count_write(self, kind: str, action: str, outcome: str) -> None:
        """One write: ``outcome`` is ok|exists|gone|conflict|forbidden|error."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown write outcome {outcome!r}; one of {', '.join(OUTCOMES)}")
        self.writes.labels(kind=kind, action=action, outcome=outcome).inc()

    def count_api_error(self, verb: str, resource: str, reason: str) -> None:
        self.api_errors.labels(verb=verb, resource=resource, reason=reason).inc()

    def observe_rate_limit_wait(self, seconds: float) -> None:
        """One request let through by the client-side rate limiter after ``seconds`` of waiting (0: at once)."""
        self.rate_limit_wait.observe(seconds)

    def set_queue_depth(self, depth: int) -> None:
        self.queue_depth.set(depth)

    def count_decision(self, flavor: str, domain: str | None, status: Mapping[str, Any]) -> None:
        """A Reservation status write of the ledger keeper that was made (outcome ok): ``status`` as written,
        ``flavor``/``domain`` the Reservation's scope. An Activated one counts its outcome and every action of
        ``status.activation``; a Failed one its reason; any other state nothing."""
        state = status.get("state")
        scope = scope_label(flavor, domain)
        if state == ACTIVATED:
            self.activations.labels(flavor=flavor, scope=scope, outcome=ACTIVATED).inc()
            activation = status.get("activation")
            actions = activation.get("actions") if isinstance(activation, Mapping) else None
            for action in actions or ():
                kind = str(action.get("kind") or "")
                labels = {"kind": kind if kind in ACTION_KINDS else OTHER, "flavor": flavor, "scope": scope,
                          "namespace": str(action.get("run") or "").partition("/")[0]}
                self.resolver_actions.labels(**labels).inc()
                self.preempted_gpus.labels(**labels).inc(max(0, int(action.get("gpus") or 0)))
        elif state == "Failed":
            reason = str(status.get("reason") or "")
            outcome = reason if reason in FAILED_REASONS else OTHER
            self.activations.labels(flavor=flavor, scope=scope, outcome=outcome).inc()

    def set_leader(self, leader: bool) -> None:
        """``leader``: this replica writes (the loop sets it at start without leader election)."""
        with self._lock:
            self._leader = bool(leader)
        self.leader.set(1 if leader else 0)

    def set_ready(self, ready: bool) -> None:
        with self._lock:
            self._ready = bool(ready)
        self.ready_gauge.set(1 if ready else 0)

    def readiness(self) -> tuple[bool, str]:
        """(ready, one-line reason) for /readyz."""
        with self._lock:
            ready, leader = self._ready, self._leader
        if not ready:
            return False, "not ready: caches not synced"
        if not self.leader_election:
            return True, "ok"
        return True, "ok: leader" if leader else "ok: standby"

    def update_fleet(self, snapshot: Any, at: datetime, book: Ledger | None = None,
                     phases: Mapping[str, str | None] | None = None) -> None:
        """Recompute the fleet gauges from ``snapshot`` at ``at``. ``book`` is the engine's ledger of the same
        snapshot and instant when the caller has it already (the status writer does); else it is computed.
        ``phases`` (Run key -> status.phase as just written) overrides the snapshot's stored phases."""
        if book is None:
            book = ledger(snapshot, at)
        self._fleet.families = fleet_families(snapshot, at, book, phases)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the text format the scraper asked for (Prometheus text or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


# --- the HTTP server -------------------------------------------------------------------------------------


def parse_addr(addr: str) -> tuple[str, int]:
    """``:8080`` (every interface), ``127.0.0.1:9090``, ``[::1]:8080`` or ``8080`` → (host, port)."""
    text = addr.strip()
    if text.isdigit():
        return "", int(text)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{addr!r} is not HOST:PORT, :PORT or 0 (off)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host, int(port)


class MetricsServer:
    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread):
        self._httpd = httpd
        self._thread = thread
        self.host, self.port = httpd.server_address[:2]

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve(addr: str, metrics: ReconcilerMetrics) -> MetricsServer:
    """Serve /metrics, /healthz and /readyz on ``addr`` from a daemon thread. A bad ``addr`` is a ValueError,
    a port that cannot be bound the OSError of ``bind`` (its ``strerror`` says why)."""
    host, port = parse_addr(addr)

    class Handler(BaseHTTPRequestHandler):
        server_version = "kubectl-runs-reconciler"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, content_type = metrics.exposition(self.headers.get("Accept", ""))
                self._send(200, body, content_type)
            elif path in ("/healthz", "/livez"):
                self._send(200, b"ok\n")
            elif path == "/readyz":
                ready, reason = metrics.readiness()
                self._send(200 if ready else 503, reason.encode() + b"\n")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics server: " + format, *args)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    if ":" in host:
        import socket

        Server.address_family = socket.AF_INET6
    server_class = Server
    httpd = server_class((host, port), Handler)  # OSError (address in use, …) to the caller, strerror intact
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-server", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
