"""Prometheus metrics and health of the reconciler, served on ``--metrics-addr`` (default ``:8080``).

Everything is in the reconciler's own ``CollectorRegistry`` (no process-global default registry, so two
instances in one test process do not collide), every name starts with ``jobtree_``:

Fleet, computed by the engine (``accounting.ledger`` — the numbers ``budgets usage`` prints; nothing here
re-derives them), replaced as a whole at each :meth:`ReconcilerMetrics.update_fleet`, so an envelope that is
gone stops being exported:

- ``jobtree_budget_gpus{namespace,budget,envelope,flavor,owner,class}`` — GPUs charged to an envelope now, by
  class: owned, shared, borrowed, unfunded (slots charged but not funded), spare.
- ``jobtree_budget_concurrency_gpus``, ``jobtree_budget_headroom_gpus``, ``jobtree_budget_consumed_gpu_hours``,
  ``jobtree_budget_window_active`` (same labels without ``class``); ``jobtree_budget_aggregate_headroom_gpus
  {namespace,budget,aggregate}``.
- ``jobtree_reservations{state}`` (Pending, Activated, Released, Failed), ``jobtree_reservation_backlog{flavor}``
  (Pending reservations), ``jobtree_reservation_eta_seconds{flavor}`` — a gauge histogram of the seconds from
  now until each Pending reservation's ``earliestStart`` (``le="0"`` = due or overdue).
- ``jobtree_runs{phase}`` — Runs by their stored ``status.phase`` ("" when none yet).
- ``jobtree_fleet_updated_timestamp_seconds`` — when the fleet gauges were last computed.

Work of the reconciler:

- ``jobtree_reconcile_duration_seconds`` (histogram), ``jobtree_last_reconcile_timestamp_seconds``;
- ``jobtree_api_writes_total{kind,action,outcome}`` — outcome ok|exists|gone|conflict|forbidden|error;
- ``jobtree_api_errors_total{verb,resource,reason}``;
- ``jobtree_resolver_actions_total{kind}`` — ReclaimUnfunded, DropSpare, Shrink, RandomPreempt …;
- ``jobtree_workqueue_depth``, ``jobtree_leader`` (1 while this replica leads), ``jobtree_ready``;
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
from collections.abc import Iterable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from .. import __version__
from ..engine.accounting import Ledger, ledger

__all__ = ["ETA_BUCKETS", "MetricsServer", "ReconcilerMetrics", "parse_addr", "serve"]

log = logging.getLogger("kubectl_runs.reconciler.metrics")

OUTCOMES = ("ok", "exists", "gone", "conflict", "forbidden", "error")
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: upper bounds (seconds from now until a Pending reservation's earliestStart) of the ETA buckets
ETA_BUCKETS = (0.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 24 * 3600.0, 7 * 86400.0)
CLASS_FIELDS = ("owned", "shared", "borrowed", "unfunded", "spare")
ENVELOPE_LABELS = ("namespace", "budget", "envelope", "flavor", "owner")
PENDING = (None, "Pending")


class _Fleet:
    """The fleet's gauges as computed at one instant; swapped whole by update_fleet, read by collect()."""

    def __init__(self) -> None:
        self.families: list[Any] = []

    def collect(self) -> Iterable[Any]:
        return list(self.families)

    def describe(self) -> Iterable[Any]:
        return []


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
            "jobtree_reconcile_duration_seconds", "Seconds one reconcile of the fleet took (evaluate + write).",
            buckets=RECONCILE_BUCKETS, registry=r,
        )
        self.last_reconcile = Gauge(
            "jobtree_last_reconcile_timestamp_seconds", "Unix time the last reconcile finished.", registry=r
        )
        self.writes = Counter(
            "jobtree_api_writes", "Writes sent to the API server, by kind, action and outcome.",
            ["kind", "action", "outcome"], registry=r,
        )
        self.api_errors = Counter(
            "jobtree_api_errors", "API requests that failed, by verb, resource and reason.",
            ["verb", "resource", "reason"], registry=r,
        )
        self.resolver_actions = Counter(
            "jobtree_resolver_actions", "Resolver actions applied at reservation activations, by kind.",
            ["kind"], registry=r,
        )
        self.queue_depth = Gauge("jobtree_workqueue_depth", "Keys waiting in the work queue.", registry=r)
        self.leader = Gauge("jobtree_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.ready_gauge = Gauge("jobtree_ready", "1 once the caches are synced.", registry=r)
        info = Gauge("jobtree_build_info", "The running kubectl-runs version.", ["version"], registry=r)
        info.labels(version=__version__).set(1)
        self._fleet = _Fleet()
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

    def set_queue_depth(self, depth: int) -> None:
        self.queue_depth.set(depth)

    def count_resolver_action(self, kind: str) -> None:
        self.resolver_actions.labels(kind=kind).inc()

    def set_leader(self, leader: bool) -> None:
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

    def update_fleet(self, snapshot: Any, at: datetime, book: Ledger | None = None) -> None:
        """Recompute the fleet gauges from ``snapshot`` at ``at``. ``book`` is the engine's ledger of the same
        snapshot and instant when the caller has it already (the status writer does); else it is computed."""
        if book is None:
            book = ledger(snapshot, at)
        gpus = GaugeMetricFamily("jobtree_budget_gpus", "GPUs charged to an envelope now, by class.",
                                 labels=[*ENVELOPE_LABELS, "class"])
        concurrency = GaugeMetricFamily("jobtree_budget_concurrency_gpus", "GPUs an envelope funds at one instant.",
                                        labels=ENVELOPE_LABELS)
        headroom = GaugeMetricFamily("jobtree_budget_headroom_gpus",
                                     "GPUs an envelope can still fund now (0 outside its window).",
                                     labels=ENVELOPE_LABELS)
        hours = GaugeMetricFamily("jobtree_budget_consumed_gpu_hours", "GPU-hours an envelope paid in its window.",
                                  labels=ENVELOPE_LABELS)
        active = GaugeMetricFamily("jobtree_budget_window_active", "1 while now is inside the envelope's window.",
                                   labels=ENVELOPE_LABELS)
        for _key, usage in sorted(book.envelopes.items()):
            meta = usage.budget.metadata
            labels = [meta.namespace, meta.name, usage.envelope.name, usage.envelope.flavor, usage.owner]
            for cls in CLASS_FIELDS:
                gpus.add_metric([*labels, cls], getattr(usage, cls))
            concurrency.add_metric(labels, usage.envelope.concurrency)
            headroom.add_metric(labels, usage.headroom)
            hours.add_metric(labels, usage.consumed_gpu_hours)
            active.add_metric(labels, 1 if usage.window_active else 0)
        aggregates = GaugeMetricFamily("jobtree_budget_aggregate_headroom_gpus",
                                       "GPUs an aggregate cap still allows now.",
                                       labels=["namespace", "budget", "aggregate"])
        for agg in book.aggregates:
            aggregates.add_metric([agg.budget.metadata.namespace, agg.budget.metadata.name, agg.name], agg.headroom)

        states: dict[str, int] = {"Pending": 0, "Activated": 0, "Released": 0, "Failed": 0}
        backlog: dict[str, int] = {}
        etas: dict[str, list[float]] = {}
        for rsv in snapshot.reservations:
            state = rsv.status.state or "Pending"
            states[state] = states.get(state, 0) + 1
            if rsv.status.state in PENDING:
                flavor = rsv.spec.scope.flavor
                backlog[flavor] = backlog.get(flavor, 0) + 1
                etas.setdefault(flavor, []).append((rsv.spec.earliest_start - at).total_seconds())
        by_state = GaugeMetricFamily("jobtree_reservations", "Reservations by state.", labels=["state"])
        for state, count in sorted(states.items()):
            by_state.add_metric([state], count)
        pending = GaugeMetricFamily("jobtree_reservation_backlog", "Pending reservations, by flavor.",
                                    labels=["flavor"])
        for flavor, count in sorted(backlog.items()):
            pending.add_metric([flavor], count)
        eta = GaugeHistogramMetricFamily(
            "jobtree_reservation_eta_seconds",
            "Seconds from now until each Pending reservation's earliestStart (le=0: due or overdue).",
            labels=["flavor"],
        )
        for flavor, seconds in sorted(etas.items()):
            buckets = [(_le(bound), sum(1 for s in seconds if s <= bound)) for bound in ETA_BUCKETS]
            buckets.append(("+Inf", len(seconds)))
            eta.add_metric([flavor], buckets, gsum_value=sum(seconds))

        phases: dict[str, int] = {}
        for run in snapshot.runs:
            phase = run.status.phase or ""
            phases[phase] = phases.get(phase, 0) + 1
        runs = GaugeMetricFamily("jobtree_runs", "Runs by stored status.phase (\"\" = not yet written).",
                                 labels=["phase"])
        for phase, count in sorted(phases.items()):
            runs.add_metric([phase], count)
        stamp = GaugeMetricFamily("jobtree_fleet_updated_timestamp_seconds",
                                  "Unix time of the instant the fleet gauges were computed at.",
                                  value=at.timestamp())
        self._fleet.families = [gpus, concurrency, headroom, hours, active, aggregates, by_state, pending, eta,
                                runs, stamp]

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the text format the scraper asked for (Prometheus text or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


def _le(bound: float) -> str:
    return str(float(bound))  # the client's spelling of le ("300.0")


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
