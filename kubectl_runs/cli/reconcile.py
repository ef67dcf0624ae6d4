"""``kubectl runs reconcile``: the companion reconciler (API.md §6, docs/reconciler.md).

The kubernetes client and the reconciler are imported inside the command, so ``kubectl runs --help`` stays
fast."""

from __future__ import annotations

import os
import re
import signal
import socket

import click

from ..errors import UsageError, UserError
from ..reconciler.ratelimit import DEFAULT_BURST, DEFAULT_QPS, UNLIMITED
from ..timeutil import MAX_DURATION_SECONDS, MAX_DURATION_TEXT
from .options import GlobalOptions, global_options

DEFAULT_LEADER_NAMESPACE = "kubectl-runs-system"
DEFAULT_LEADER_ID = "kubectl-runs-reconciler"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def parse_duration(text: str, flag: str, *, zero: bool = False) -> float:
    """``5m``, ``30s``, ``1h``, ``250ms`` or plain seconds (``0`` only when ``zero``)."""
    match = _DURATION.match(text.strip())
    if not match:
        raise UsageError(f"{flag}: {text!r} is not a duration (examples: 30s, 5m, 1h)")
    seconds = float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    if seconds < 0 or (seconds == 0 and not zero):
        raise UsageError(f"{flag}: must be more than 0")
    if seconds > MAX_DURATION_SECONDS:  # (inf too: a thousand digits)
        shown = text if len(text) <= 40 else text[:39] + "…"
        raise UsageError(f"{flag}: {shown!r} is out of range: use at most {MAX_DURATION_TEXT}")
    return seconds


MAX_PORT = 65_535
MIN_QPS, MAX_QPS = 0.001, 1_000_000.0
MAX_BURST = 1_000_000


def metrics_address(text: str) -> str:
    """``--metrics-addr`` checked before anything starts: ``0`` (off), ``:PORT``, ``HOST:PORT``, ``[::1]:PORT``,
    the port 0 (any free one) to 65535. A host that cannot be bound is found when it is (exit 1)."""
    if text in ("0", ""):
        return text
    from ..reconciler.metrics import parse_addr

    try:
        _host, port = parse_addr(text)
    except ValueError as exc:
        raise UsageError(f"--metrics-addr: {exc}") from None
    if port > MAX_PORT:
        raise UsageError(f"--metrics-addr: port {port} of {text!r} is out of range: use 0-{MAX_PORT} (or 0 alone for "
                         "no metrics server)")
    return text


def rate_limit(qps: float, burst: int) -> tuple[float, int] | None:
    """(qps, burst) of the client-side rate limiter, or None for ``--kube-api-qps -1`` (no limit)."""
    if qps == UNLIMITED:
        return None
    if not MIN_QPS <= qps <= MAX_QPS:  # 0, any other negative number, NaN, inf, a wait past any timer (1e-300)
        raise UsageError(f"--kube-api-qps: must be {MIN_QPS:g} to {MAX_QPS:,.0f} (requests per second), or -1 for no "
                         f"limit; not {qps:g}")
    if not 1 <= burst <= MAX_BURST:
        raise UsageError(f"--kube-api-burst: must be 1 to {MAX_BURST:,} (requests at once), not {burst}")
    return qps, burst


def leader_namespace(explicit: str | None) -> str:
    if explicit:
        return explicit
    try:
        with open(_IN_CLUSTER_NAMESPACE, encoding="utf-8") as handle:
            namespace = handle.read().strip() or DEFAULT_LEADER_NAMESPACE
    except (OSError, UnicodeDecodeError):
        return DEFAULT_LEADER_NAMESPACE
    from ..sources.names import label_problem, shown

    problem = label_problem(namespace)
    if problem:
        raise UserError(f"{_IN_CLUSTER_NAMESPACE}: {shown(namespace)} is not a valid namespace: {problem} "
                        "(give --leader-election-namespace)")
    return namespace


def _valid(rule: str):
    """A click callback refusing a value the API server would refuse in a path (exit 2, one line)."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        from ..sources.names import label_problem, shown, subdomain_problem

        problem = None if value is None else (label_problem if rule == "label" else subdomain_problem)(value)
        if problem:
            what = "namespace" if rule == "label" else "name"
            raise click.UsageError(f"--{param.name.replace('_', '-')} {shown(value)} is not a valid {what}: {problem}",
                                   ctx=ctx)
        return value

    return check


@click.command("reconcile")
@click.option("--once", is_flag=True, help="Reconcile everything once and exit (no watch, no leader election).")
@click.option("--dry-run", is_flag=True,
              help="Print the writes it would make as one JSON document (a list of actions) and make none; "
                   "implies --once.")
@click.option("--manage-leases", is_flag=True,
              help="Also keep the GPULease ledger: mint and close leases, create and activate Reservations.")
@click.option("--resync-period", default="5m", show_default=True, metavar="DURATION",
              help="Look at every object again this often, changed or not.")
@click.option("--status-interval", default="30s", show_default=True, metavar="DURATION",
              help="Write a Run's or Reservation's figures that follow the rest of the fleet (a pending Run's "
                   "deficits, remedies and forecast) at most this often; a change of phase, reason, width or a "
                   "condition's status is written at once. 0 writes every change at once.")
@click.option("--metrics-addr", default=":8080", show_default=True, metavar="ADDR",
              help="Serve /metrics, /healthz and /readyz here (HOST:PORT or :PORT); 0 disables.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True,
              help="Run as one of several replicas: only the holder of a coordination.k8s.io Lease writes.")
@click.option("--leader-election-namespace", metavar="NS", callback=_valid("label"),
              help=f"Namespace of the Lease (default: the pod's namespace in a cluster, else "
                   f"{DEFAULT_LEADER_NAMESPACE}).")
@click.option("--leader-election-id", default=DEFAULT_LEADER_ID, show_default=True, metavar="NAME", callback=_valid("subdomain"),
              help="Name of the Lease.")
@click.option("--identity", metavar="ID", help="This replica's name in the Lease (default: <hostname>_<pid>).")
@click.option("--min-run-time", default="1h", show_default=True, metavar="DURATION",
              help="With --manage-leases: a Run started through an activation is out of every preemption this long.")
@click.option("--victim-protection", default="6h", show_default=True, metavar="DURATION",
              help="With --manage-leases: a Run that lost GPUs to a lottery is out of every lottery this long, and "
                   "gets no Reservation in that time (it starts when GPUs are free).")
@click.option("--eta-grace", default="15m", show_default=True, metavar="DURATION",
              help="With --manage-leases: a Run whose reported completion is within this of an activation is not "
                   "a victim (it frees its GPUs by itself); the activation waits for it instead.")
@click.option("--kube-api-qps", type=float, default=DEFAULT_QPS, show_default=f"{DEFAULT_QPS:g}", metavar="QPS",
              help="Client-side rate limit: requests per second to the API server, sustained (lists, watches when "
                   "opened, status patches, creates, Events; not the leader-election Lease); -1: no limit.")
@click.option("--kube-api-burst", type=int, default=DEFAULT_BURST, show_default=True, metavar="N",
              help="Client-side rate limit: requests that may go out at once before --kube-api-qps paces them.")
@global_options
@click.pass_context
def reconcile(ctx: click.Context, once: bool, dry_run: bool, manage_leases: bool, resync_period: str,
              status_interval: str, metrics_addr: str, leader_elect: bool, leader_election_namespace: str | None,
              leader_election_id: str, identity: str | None, min_run_time: str, victim_protection: str,
              eta_grace: str, kube_api_qps: float, kube_api_burst: int) -> int:
    """Watch Budgets, Runs, Reservations, GPULeases and Nodes and write what the reports compute into status:
    Budget usage and headroom per envelope, Run width/funding/plan/phase with Ready, Funded and Placeable
    conditions, Reservation forecasts. Only status, only when it changed (a resync of an unchanged fleet writes
    nothing). Logs one line per action on stderr (logfmt). SIGTERM stops it after the write in flight.

    \b
    Examples:
      kubectl runs reconcile --no-leader-elect --metrics-addr 0      # one replica, on a laptop
      kubectl runs reconcile --dry-run                                # what would it write? (JSON)
      kubectl runs reconcile --once                                   # write it, once, and exit
    """
    opts = GlobalOptions.of(ctx)
    if opts.snapshots:
        raise UsageError("reconcile works on a live cluster: --snapshot cannot be used with it")
    metrics_addr = metrics_address(metrics_addr)
    period = parse_duration(resync_period, "--resync-period")
    interval = parse_duration(status_interval, "--status-interval", zero=True)
    once = once or dry_run
    windows = {name: parse_duration(text, flag, zero=True) for name, text, flag in (
        ("min_run_time", min_run_time, "--min-run-time"), ("victim_protection", victim_protection, "--victim-protection"),
        ("eta_grace", eta_grace, "--eta-grace"))}
    fixed_at = None
    if opts.at:
        if not once:
            raise UsageError("--at decides as of a past or future instant: use it with --once or --dry-run (a "
                             "watching reconciler runs on the wall clock)")
        fixed_at = opts.evaluation_time(None)
    limits = rate_limit(kube_api_qps, kube_api_burst)
    from ..reconciler.loop import Logger, Reconciler, Settings, make_api_factory
    from ..reconciler.ratelimit import TokenBucket, limited_factory

    log = Logger()
    source = opts.source(None)
    make_api = make_api_factory(source)  # unlimited: the leader elector's (its Lease renewals never wait)
    limiter = TokenBucket(*limits) if limits is not None else None
    limited = limited_factory(make_api, limiter, log)  # every other client: one bucket for all of them
    settings = Settings(once=once, dry_run=dry_run, resync_period=period, manage_leases=manage_leases,
                        request_timeout=opts.timeout_seconds() or 30.0,
                        status_interval=interval)
    _preflight(limited, settings.request_timeout, None if once or not leader_elect else
               (leader_namespace(leader_election_namespace), leader_election_id))
    metrics = server = elector = None
    if not once and metrics_addr not in ("0", ""):
        metrics, server = _metrics(metrics_addr, log, leader_elect)
        if limiter is not None:
            limiter.observe = metrics.observe_rate_limit_wait
    log("client rate limit", qps=f"{limits[0]:g}" if limits else "unlimited", burst=limits[1] if limits else None)
    if not once and leader_elect:
        elector = _elector(make_api, leader_namespace(leader_election_namespace), leader_election_id,
                           identity or f"{socket.gethostname()}_{os.getpid()}", log)
    ledger = _ledger(windows) if manage_leases else None
    clock = {} if fixed_at is None else {"clock": lambda: fixed_at}
    reconciler = Reconciler(limited, settings, log=log, metrics=metrics, elector=elector, ledger=ledger, **clock)

    def stop(signum, _frame) -> None:
        log("signal", signal=signal.Signals(signum).name)
        reconciler.stop.set()
        reconciler.queue.shutdown()
        if limiter is not None:
            limiter.close()  # a request still waiting for its token is not sent

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if elector is not None:
            elector.start()
        return reconciler.run()
    finally:
        if elector is not None:
            elector.stop(release=True)
        if server is not None:
            server.shutdown()


def _preflight(make_api, timeout: float, lease: tuple[str, str] | None) -> None:
    """One line that says what to do when the CRDs or the leader-election namespace are missing (not a wait)."""
    from ..reconciler.preflight import check_crds, check_lease_namespace

    api = make_api()
    check_crds(api, timeout)
    if lease is not None:
        check_lease_namespace(api, *lease, timeout)


def _metrics(addr: str, log, leader_elect: bool) -> tuple[object, object]:
    from ..reconciler.metrics import ReconcilerMetrics, serve

    metrics = ReconcilerMetrics(leader_election=leader_elect)
    try:
        server = serve(addr, metrics)
    except (OSError, ValueError) as exc:
        raise UserError(f"--metrics-addr {addr}: cannot serve metrics: {getattr(exc, 'strerror', None) or exc}") from None
    log("serving metrics", addr=addr, url=server.url)
    return metrics, server


def _elector(make_api, namespace: str, name: str, identity: str, log):
    from ..reconciler.leader import LeaderElector

    def started() -> None:
        log("leader election", event="started leading", lease=f"{namespace}/{name}", identity=identity)

    def stopped() -> None:
        log("leader election", event="stopped leading", lease=f"{namespace}/{name}", identity=identity)

    try:
        return LeaderElector(make_api(), namespace, name, identity, on_started_leading=started,
                             on_stopped_leading=stopped, log=log)
    except ValueError as exc:
        raise UsageError(f"leader election: {exc}") from None


def _ledger(windows: dict[str, float]):
    from datetime import timedelta

    from ..reconciler.ledger import Keeper, LedgerOptions

    options = LedgerOptions(**{name: timedelta(seconds=seconds) for name, seconds in windows.items()})
    return Keeper(options)  # plan_ledger, each pass starting from what the last one computed when that stands
