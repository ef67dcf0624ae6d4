"""The reconciler's metrics and health endpoints (reconciler/metrics.py), scraped over HTTP and parsed with
prometheus-client's own parser. The fleet gauges must equal what ``budgets usage`` computes for the same
snapshot and instant (one engine, no second arithmetic)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from builders import at, budget, envelope, lease, node, reservation, run, snapshot
from prometheus_client.parser import text_string_to_metric_families

from kubectl_runs.engine.reports import plain
from kubectl_runs.engine.usage import budget_usage
from kubectl_runs.reconciler.metrics import ReconcilerMetrics, parse_addr, serve


def get(url: str, accept: str = "") -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(scraped, name: str, **labels) -> float:
    matches = [v for (n, lbl), v in scraped.items() if n == name and set(labels.items()) <= set(lbl)]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def fleet():
    now = at(days=2)
    snap = snapshot(
        node("n1", gpus=8),
        node("n2", gpus=8),
        budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=12),
                                                         envelope("east", concurrency=4, lending={"allow": True,
                                                                                                  "to": ["org:*"]})]),
        budget("lab", "lab", owner="org:lab", envelopes=[envelope("main", concurrency=2)]),
        run("train", "team", gpus=8),
        run("probe", "lab", gpus=4, phase=None),
        lease("train-0", "team", gpus=8, node_name="n1", run_name="train"),
        lease("probe-0", "lab", owner="org:lab", gpus=4, node_name="n2", run_name="probe", paid_by=("lab", "main")),
        lease("old", "team", gpus=2, node_name="n2", run_name="train", start=at(days=1), ended=at(days=1, hours=10)),
        reservation("r-soon", "team", run_name="train", earliest_start=at(days=2, minutes=10)),
        reservation("r-late", "team", run_name="train", earliest_start=at(days=10)),
        reservation("r-due", "lab", run_name="probe", flavor="A100", earliest_start=at(days=1)),
        reservation("r-done", "lab", run_name="probe", state="Activated"),
    )
    return snap, now


@pytest.fixture
def served():
    metrics = ReconcilerMetrics()
    server = serve("127.0.0.1:0", metrics)
    yield metrics, server
    server.shutdown()


def test_fleet_gauges_equal_budgets_usage(served):
    metrics, server = served
    snap, now = fleet()
    metrics.update_fleet(snap, now)
    status, content_type, text = get(server.url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    scraped = samples(text)
    report = plain(budget_usage(snap, now).report)
    assert len(report["envelopes"]) == 3
    for row in report["envelopes"]:
        key = {"namespace": row["namespace"], "budget": row["budget"], "envelope": row["envelope"]}
        assert series(scraped, "jobtree_budget_headroom_gpus", **key) == row["headroomGPUs"]
        assert series(scraped, "jobtree_budget_concurrency_gpus", **key) == row["concurrency"]
        assert series(scraped, "jobtree_budget_consumed_gpu_seconds", **key) == pytest.approx(
            row["consumedGPUHours"] * 3600)
        for cls in ("owned", "shared", "borrowed", "unfunded", "spare"):
            assert series(scraped, "jobtree_budget_gpus", **key, **{"class": cls}) == row[f"{cls}GPUs"], cls
    # the figures themselves (so the equality above is not between two zeros)
    assert series(scraped, "jobtree_budget_gpus", namespace="team", envelope="west", **{"class": "owned"}) == 8
    assert series(scraped, "jobtree_budget_headroom_gpus", namespace="team", envelope="west") == 4
    assert series(scraped, "jobtree_budget_gpus", namespace="lab", envelope="main", **{"class": "owned"}) == 2
    assert series(scraped, "jobtree_budget_gpus", namespace="lab", envelope="main", **{"class": "unfunded"}) == 2
    assert series(scraped, "jobtree_budget_consumed_gpu_seconds", namespace="team", envelope="west") == pytest.approx(
        (8 * 48 + 2 * 10) * 3600)


def test_reservation_backlog_and_eta_buckets(served):
    metrics, server = served
    snap, now = fleet()
    metrics.update_fleet(snap, now)
    scraped = samples(get(server.url + "/metrics")[2])
    assert series(scraped, "jobtree_reservations", state="Pending") == 3
    assert series(scraped, "jobtree_reservations", state="Activated") == 1
    assert series(scraped, "jobtree_reservation_backlog", flavor="H100") == 2
    assert series(scraped, "jobtree_reservation_backlog", flavor="A100") == 1
    h100 = {le: series(scraped, "jobtree_reservation_eta_seconds_bucket", flavor="H100", le=le)
            for le in ("0.0", "300.0", "900.0", "3600.0", "21600.0", "86400.0", "604800.0", "+Inf")}
    assert h100 == {"0.0": 0, "300.0": 0, "900.0": 1, "3600.0": 1, "21600.0": 1, "86400.0": 1, "604800.0": 1,
                    "+Inf": 2}
    assert series(scraped, "jobtree_reservation_eta_seconds_bucket", flavor="A100", le="0.0") == 1  # overdue
    assert series(scraped, "jobtree_reservation_eta_seconds_gcount", flavor="H100") == 2
    assert series(scraped, "jobtree_runs", phase="Running") == 1
    assert series(scraped, "jobtree_runs", phase="") == 1


def test_an_envelope_that_is_gone_stops_being_exported(served):
    metrics, server = served
    snap, now = fleet()
    metrics.update_fleet(snap, now)
    assert 'envelope="main"' in get(server.url + "/metrics")[2]
    smaller = snapshot(*snap.nodes, snap.budgets[0], *snap.runs, *snap.leases)
    metrics.update_fleet(smaller, now)
    text = get(server.url + "/metrics")[2]
    assert 'envelope="main"' not in text
    assert 'envelope="west"' in text
    assert "jobtree_reservation_backlog{" not in text


def test_work_counters_and_histogram(served):
    metrics, server = served
    metrics.observe_reconcile(0.03)
    metrics.observe_reconcile(2.0)
    metrics.count_write("Run", "PatchStatus", "ok")
    metrics.count_write("Run", "PatchStatus", "ok")
    metrics.count_write("GPULease", "Create", "exists")
    metrics.count_api_error("patch", "runs", "Forbidden")
    metrics.count_decision("H100", "d1", {"state": "Activated", "activation": {"actions": [
        {"kind": "Lottery", "run": "lab/a", "group": 0, "lease": "lab/a-g0", "gpus": 8},
        {"kind": "DropSpare", "run": "team/c", "group": 1, "lease": "team/c-g1-spare-0", "gpus": 1},
        {"kind": "DropSpare", "run": "team/d", "group": 0, "lease": "team/d-g0-spare-0", "gpus": 1}]}})
    metrics.count_decision("H100", None, {"state": "Failed", "reason": "NotPlaceable"})
    metrics.count_decision("H100", None, {"state": "Failed", "reason": "SomethingNew"})
    metrics.count_decision("H100", None, {"state": "Released", "reason": "Started"})  # not a decision: nothing
    metrics.set_queue_depth(7)
    metrics.set_leader(True)
    scraped = samples(get(server.url + "/metrics")[2])
    assert series(scraped, "jobtree_reconcile_duration_seconds_count") == 2
    assert series(scraped, "jobtree_reconcile_duration_seconds_bucket", le="0.05") == 1
    assert series(scraped, "jobtree_reconcile_duration_seconds_bucket", le="2.5") == 2
    assert series(scraped, "jobtree_api_writes_total", kind="Run", action="PatchStatus", outcome="ok") == 2
    assert series(scraped, "jobtree_api_writes_total", kind="GPULease", outcome="exists") == 1
    assert series(scraped, "jobtree_api_errors_total", verb="patch", resource="runs", reason="Forbidden") == 1
    lottery = {"kind": "Lottery", "flavor": "H100", "scope": "H100/d1", "namespace": "lab"}
    assert series(scraped, "jobtree_resolver_actions_total", **lottery) == 1
    assert series(scraped, "jobtree_preempted_gpus_total", **lottery) == 8
    assert series(scraped, "jobtree_resolver_actions_total", kind="DropSpare", namespace="team") == 2
    assert series(scraped, "jobtree_preempted_gpus_total", kind="DropSpare", namespace="team") == 2
    outcomes = {dict(lbl)["outcome"]: v for (n, lbl), v in scraped.items()
                if n == "jobtree_reservation_activations_total"}
    assert outcomes == {"Activated": 1, "NotPlaceable": 1, "Other": 1}
    assert series(scraped, "jobtree_reservation_activations_total", outcome="Activated", scope="H100/d1") == 1
    assert series(scraped, "jobtree_workqueue_depth") == 7
    assert series(scraped, "jobtree_leader") == 1
    assert series(scraped, "jobtree_last_reconcile_timestamp_seconds") > 1.7e9
    with pytest.raises(ValueError, match="outcome"):
        metrics.count_write("Run", "PatchStatus", "fine")


def test_every_series_is_jobtree_prefixed_and_registries_are_separate(served):
    metrics, server = served
    metrics.update_fleet(*fleet())
    text = get(server.url + "/metrics")[2]
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names and all(n.startswith("jobtree_") for n in names), sorted(names)
    other = ReconcilerMetrics()  # a second instance in the same process: no duplicate-timeseries error
    other.set_queue_depth(1)
    assert series(samples(get(server.url + "/metrics")[2]), "jobtree_workqueue_depth") == 0


def test_openmetrics_when_asked(served):
    metrics, server = served
    metrics.update_fleet(*fleet())
    status, content_type, text = get(server.url + "/metrics", accept="application/openmetrics-text")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")
    assert "# TYPE jobtree_reservation_eta_seconds gaugehistogram" in text


def test_health_and_readiness(served):
    metrics, server = served
    assert get(server.url + "/healthz")[:1] == (200,)
    status, _, body = get(server.url + "/readyz")
    assert (status, body) == (503, "not ready: caches not synced\n")
    metrics.set_ready(True)
    assert get(server.url + "/readyz")[::2] == (200, "ok: standby\n")
    metrics.set_leader(True)
    assert get(server.url + "/readyz")[::2] == (200, "ok: leader\n")
    metrics.set_ready(False)
    assert get(server.url + "/readyz")[0] == 503
    assert get(server.url + "/nope")[0] == 404


def test_readiness_without_leader_election():
    metrics = ReconcilerMetrics(leader_election=False)
    metrics.set_ready(True)
    assert metrics.readiness() == (True, "ok")


@pytest.mark.parametrize(
    "addr, expected",
    [(":8080", ("", 8080)), ("127.0.0.1:9090", ("127.0.0.1", 9090)), ("[::1]:8080", ("::1", 8080)),
     ("8080", ("", 8080))],
)
def test_parse_addr(addr, expected):
    assert parse_addr(addr) == expected


def test_bad_addr_and_busy_port():
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_addr("localhost")
    metrics = ReconcilerMetrics()
    first = serve("127.0.0.1:0", metrics)
    try:
        with pytest.raises(OSError, match="in use"):
            serve(f"127.0.0.1:{first.port}", metrics)
    finally:
        first.shutdown()


def test_help_imports_neither_prometheus_client_nor_kubernetes():
    probe = ("import sys, io, contextlib, json\nfrom kubectl_runs.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\n"
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    top = {m.split(".")[0] for m in json.loads(done.stdout)}
    assert not {"prometheus_client", "kubernetes"} & top
