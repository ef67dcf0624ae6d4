"""``kubectl runs reconcile`` against a real API server: status follows changes within 2 s, equals what the
reports compute, an idle resync of a 1,000-run fleet makes no write (counted by the API server itself), --once
and --dry-run, a kill and restart converges without extra writes, and a malformed object gets an Event while the
loop goes on.

The reconciler writes status to every object it sees, so these tests use their own control plane (the module
fixture below), not the session's example fleet that the report tests compare against its manifests. The tests
run in file order and build on each other's objects."""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import timedelta

import pytest
from reconciler_harness import (
    API,
    ROOT,
    Reconciler,
    budget,
    control_plane,
    create,
    delta,
    get,
    iso,
    lease,
    node,
    now,
    run,
    run_plugin_json,
    status_patches,
    wait_for,
)

from kubectl_runs.reconciler.status import stable_text

NS = "team"
OWNER = "org:team"
FLAVOR = "H100"
WATCH = ("--no-leader-elect", "--metrics-addr", "0")


@pytest.fixture(scope="module")
def cp():
    with control_plane() as plane:
        create(plane, [node("n1", flavor=FLAVOR), node("n2", flavor=FLAVOR),
                       budget("b", NS, owner=OWNER, flavor=FLAVOR, concurrency=16),
                       run("small", NS, flavor=FLAVOR, gpus=4), run("huge", NS, flavor=FLAVOR, gpus=64),
                       run("held", NS, flavor=FLAVOR, gpus=4)])
        create(plane, [lease("held-g0", NS, owner=OWNER, run_name="held", flavor=FLAVOR,
                             slots=["n1#0", "n1#1", "n1#2", "n1#3"], budget_name="b")])
        yield plane


@pytest.fixture
def logs(tmp_path_factory):
    return tmp_path_factory.mktemp("reconcile-logs")


def run_path(name: str, ns: str = NS) -> str:
    return f"{API}/namespaces/{ns}/runs/{name}"


def budget_path(name: str = "b", ns: str = NS) -> str:
    return f"{API}/namespaces/{ns}/budgets/{name}"


def test_dry_run_prints_the_writes_and_makes_none(cp, logs):
    before = status_patches(cp)
    proc = Reconciler(cp, "--dry-run", log_dir=logs)
    out, _ = proc.proc.communicate(timeout=120)
    assert proc.stop() == 0
    actions = json.loads(out)
    assert sorted((a["action"], a["kind"], a["name"]) for a in actions) == [
        ("PatchStatus", "Budget", "b"), ("PatchStatus", "Run", "held"), ("PatchStatus", "Run", "huge"),
        ("PatchStatus", "Run", "small")]
    assert all(a["status"]["observedGeneration"] == 1 for a in actions)
    assert delta(status_patches(cp), before) == {"runs": 0, "budgets": 0, "reservations": 0}
    print(f"\n--dry-run: {len(actions)} actions printed, API server status PATCHes: 0")


def test_once_writes_each_status_once_and_a_second_once_writes_nothing(cp, logs):
    before = status_patches(cp)
    first = Reconciler(cp, "--once", log_dir=logs)
    assert first.proc.wait(timeout=120) == 0, "\n".join(first.lines())
    first.stop()
    after_first = status_patches(cp)
    assert delta(after_first, before) == {"runs": 3, "budgets": 1, "reservations": 0}
    second = Reconciler(cp, "--once", log_dir=logs)
    assert second.proc.wait(timeout=120) == 0
    second.stop()
    assert delta(status_patches(cp), after_first) == {"runs": 0, "budgets": 0, "reservations": 0}
    held = get(cp, run_path("held"))["status"]
    assert (held["phase"], held["width"]["allocated"], held["funding"]["ownedGPUs"]) == ("Running", 4, 4)
    usage = get(cp, budget_path())["status"]["envelopes"][0]
    assert (usage["usedGPUs"], usage["headroomGPUs"], usage["windowActive"]) == (4, 12, True)
    again = Reconciler(cp, "--dry-run", log_dir=logs)
    out, _ = again.proc.communicate(timeout=120)
    again.stop()
    assert out.strip() == b"[]"
    print(f"\n--once: first {delta(after_first, before)}, second 0 writes; --dry-run after: []")


@pytest.fixture(scope="module")
def watcher(cp, tmp_path_factory):
    """One reconciler watching for the next tests (leader election off, no metrics server)."""
    proc = Reconciler(cp, *WATCH, log_dir=tmp_path_factory.mktemp("watch"), name="watch")
    proc.wait_log("msg=synced")
    yield proc
    proc.stop()


def test_a_new_run_shows_its_plan_within_2s(cp, watcher):
    create(cp, [run("fresh", NS, flavor=FLAVOR, gpus=8)])
    created = time.monotonic()
    wait_for("status.plan of the new run", lambda: get(cp, run_path("fresh")).get("status", {}).get("plan"),
             timeout=10)
    latency = time.monotonic() - created
    print(f"\nnew run -> status.plan in {latency * 1000:.0f} ms")
    assert latency < 2.0
    stored = get(cp, run_path("fresh"))["status"]
    plan = run_plugin_json(cp, "plan", "fresh", "-n", NS, "-o", "json")
    assert stored["width"] == plan["width"]
    for key in ("deficitGPUs", "capacityDeficitGPUs", "fundingDeficitGPUs"):
        assert stored["plan"][key] == plan[key]
    assert stored["plan"]["reasons"] == [{**r, "message": stable_text(r["message"])} for r in plan["reasons"]]
    assert stored["plan"]["remedies"] == [{**r, "message": stable_text(r["message"])} for r in plan["remedies"]]
    assert stored["phase"] == "Pending"
    assert stored["observedGeneration"] == 1
    assert {c["type"] for c in stored["conditions"]} == {"Ready", "Funded", "Placeable"}


def test_a_lease_change_moves_its_budget_within_2s(cp, watcher):
    def used() -> int:
        return get(cp, budget_path())["status"]["envelopes"][0]["usedGPUs"]

    base = used()
    create(cp, [lease("fresh-g0", NS, owner=OWNER, run_name="fresh", flavor=FLAVOR,
                      slots=[f"n2#{i}" for i in range(8)], budget_name="b")])
    created = time.monotonic()
    wait_for("the budget to count the new lease", lambda: used() == base + 8, timeout=10)
    opened = time.monotonic() - created
    wait_for("the run to be Running",
                        lambda: get(cp, run_path("fresh"))["status"].get("phase") == "Running", timeout=10)
    closing = {"status": {"closed": True, "ended": iso(now()), "closureReason": "Completed"}}
    code, body = cp.request("PATCH", f"{API}/namespaces/{NS}/gpuleases/fresh-g0/status", closing,
                            content_type="application/merge-patch+json")
    assert code == 200, body
    closed_at = time.monotonic()
    wait_for("the budget to drop the closed lease", lambda: used() == base, timeout=10)
    closed = time.monotonic() - closed_at
    print(f"\nlease created -> budget status in {opened * 1000:.0f} ms; lease closed -> {closed * 1000:.0f} ms")
    assert opened < 2.0 and closed < 2.0
    report = run_plugin_json(cp, "budgets", "usage", "-o", "json")
    row = next(e for e in report["envelopes"] if e["budget"] == "b")
    entry = get(cp, budget_path())["status"]["envelopes"][0]
    for key in ("usedGPUs", "headroomGPUs", "ownedGPUs", "sharedGPUs", "borrowedGPUs", "unfundedGPUs", "spareGPUs"):
        assert entry[key] == row[key], key


def test_a_malformed_object_gets_an_event_and_the_loop_goes_on(cp, watcher):
    """The CRD admits a preemption record without ``reservation``; the model requires it."""
    create(cp, [run("broken", NS, flavor=FLAVOR, gpus=4)])
    code, body = cp.request("PATCH", run_path("broken") + "/status",
                            {"status": {"preemptions": [{"seed": "0x1", "gpus": 4}]}},
                            content_type="application/merge-patch+json")
    assert code == 200, body

    def invalid():
        for c in get(cp, run_path("broken")).get("status", {}).get("conditions", []):
            if c["reason"] == "InvalidObject":
                return c
        return None

    condition, _ = wait_for("the InvalidObject condition", invalid, timeout=10)
    assert condition["status"] == "False"
    assert "status.preemptions[0].reservation" in condition["message"]

    def recorded():  # the Event is its own write, made beside the condition's (not after it)
        code, events = cp.request(
            "GET", f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3Dbroken")
        assert code == 200
        return [e for e in events["items"] if e["reason"] == "InvalidObject"]

    [event], _ = wait_for("the InvalidObject Event", recorded, timeout=10)
    assert event["type"] == "Warning" and "status.preemptions[0].reservation" in event["message"]
    create(cp, [run("after-broken", NS, flavor=FLAVOR, gpus=4)])
    wait_for("a later run's status", lambda: get(cp, run_path("after-broken")).get("status", {}).get("plan"),
             timeout=10)
    assert watcher.proc.poll() is None
    # the reports refuse a cluster with a Run the model refuses (one line naming it): later tests read reports
    code, body = cp.request("DELETE", run_path("broken"))
    assert code == 200, body


def test_a_window_that_opens_is_written_when_it_opens_not_at_the_next_resync(cp, watcher):
    """No event says that a window opened: the loop wakes up just after the instant (resync is 5 minutes)."""
    opens = now() + timedelta(seconds=4)
    create(cp, [{"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "soon", "namespace": "soon"},
                 "spec": {"owner": "org:soon", "envelopes": [{"name": "main", "flavor": FLAVOR, "concurrency": 4,
                                                              "start": iso(opens),
                                                              "end": iso(opens + timedelta(days=1))}]}}])

    def window() -> bool | None:
        envelopes = get(cp, budget_path("soon", "soon")).get("status", {}).get("envelopes")
        return envelopes[0]["windowActive"] if envelopes else None

    wait_for("the closed window in status", lambda: window() is False, timeout=10)
    wait_for("the window to open in status", lambda: window() is True, timeout=15)
    late = (now() - opens).total_seconds()
    print(f"\nwindow opened -> status windowActive within {late:.0f} s (whole seconds)")
    assert late <= 3
    assert get(cp, budget_path("soon", "soon"))["status"]["envelopes"][0]["headroomGPUs"] == 4


def test_a_killed_reconciler_restarted_writes_only_what_changed(cp, watcher, logs):
    wait_for("the watcher to be idle", lambda: _idle(watcher), timeout=20, every=0.2)
    watcher.stop(signal.SIGKILL)
    before = status_patches(cp)
    create(cp, [run("while-down", NS, flavor=FLAVOR, gpus=4)])
    time.sleep(1.5)  # the clock moves on; nothing else changes
    again = Reconciler(cp, *WATCH, log_dir=logs, name="restart")
    try:
        again.wait_log("msg=synced")
        wait_for("the new run's status", lambda: get(cp, run_path("while-down")).get("status", {}).get("plan"),
                 timeout=10)
        wait_for("the restarted reconciler to be idle", lambda: _idle(again), timeout=20, every=0.2)
        writes = delta(status_patches(cp), before)
        lines = again.lines()
        synced = next(i for i, line in enumerate(lines) if "msg=synced" in line)
        assert not any("msg=write " in line for line in lines[:synced]), "a write before the lists were synced"
        print(f"\nkilled, one run created, restarted: status PATCHes {writes}")
        assert writes == {"runs": 1, "budgets": 0, "reservations": 0}, "\n".join(again.writes())
    finally:
        assert again.stop() == 0


def _idle(proc: Reconciler, quiet: float = 1.5) -> bool:
    """No log line for ``quiet`` seconds (the loop logs every write)."""
    return time.time() - proc.log_path.stat().st_mtime > quiet


def test_forbidden_writes_are_retried_with_backoff_counted_and_never_fatal(cp, logs):
    """As a user who may read but not write status: the write is refused, logged, counted in
    jobtree_api_errors_total and retried with a growing delay; once RBAC allows it, the status is written."""
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "rbac-readonly.yaml"))
    cp.kubectl("create", "clusterrolebinding", "reader-reads-all", "--clusterrole=kubectl-runs-reader", "--user=reader")
    wait_for("the reader binding", lambda: cp.request("GET", f"{API}/runs?limit=1", user="reader")[0] == 200,
             timeout=30, every=0.2)
    create(cp, [run("denied", NS, flavor=FLAVOR, gpus=4)])
    proc = Reconciler(cp, "--no-leader-elect", "--metrics-addr", "127.0.0.1:0", log_dir=logs, name="reader",
                      kubeconfig=cp.kubeconfig_for("reader"))
    try:
        proc.wait_log("outcome=forbidden", count=3, timeout=30)
        delays = [float(m.group(1)) for m in map(re.compile(r"msg=retry .*name=denied retryIn=([\d.]+)s").search,
                                                  proc.lines()) if m]
        assert delays[:3] == sorted(delays[:3]) and delays[2] > delays[0], delays
        errors = [line for line in proc.metrics().splitlines()
                  if line.startswith("jobtree_api_errors_total{") and 'reason="Forbidden"' in line]
        assert errors and float(errors[0].rsplit(" ", 1)[1]) >= 3, errors
        cp.kubectl("create", "clusterrole", "status-writer", "--verb=patch",
                   "--resource=runs.jobtree.dev/status,budgets.jobtree.dev/status,reservations.jobtree.dev/status")
        cp.kubectl("create", "clusterrolebinding", "reader-writes-status", "--clusterrole=status-writer",
                   "--user=reader")
        wait_for("the status once allowed", lambda: get(cp, run_path("denied")).get("status", {}).get("plan"),
                 timeout=30, every=0.2)
        assert proc.proc.poll() is None
        print(f"\nforbidden: {proc.count('outcome=forbidden')} refused writes, retry delays {delays[:5]} s, "
              f"then written once allowed")
    finally:
        assert proc.stop() == 0


def test_an_unreachable_server_is_retried_and_once_gives_up_in_one_line(cp, logs, tmp_path):
    dead = tmp_path / "dead.kubeconfig"
    config = json.loads(open(cp.admin_kubeconfig).read())  # noqa: SIM115
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    dead.write_text(json.dumps(config))
    proc = Reconciler(cp, *WATCH, log_dir=logs, name="dead", kubeconfig=str(dead))
    try:
        proc.wait_log("reason=Unreachable", count=15, timeout=30)  # 5 kinds x 3 tries
        assert proc.proc.poll() is None
        runs = [line for line in proc.lines() if "reason=Unreachable" in line and "kind=Run " in line]
        assert [re.search(r"retryIn=(\S+)", line).group(1) for line in runs[:3]] == ["0.5s", "1s", "2s"]
    finally:
        assert proc.stop() == 0
    once = Reconciler(cp, "--once", log_dir=logs, name="dead-once", kubeconfig=str(dead))
    assert once.proc.wait(timeout=60) == 1
    once.stop()
    last = once.lines()[-1]
    assert last.startswith("error: list ") and "connection refused" in last and "gave up after 4 tries" in last
    assert not any("Traceback" in line for line in once.lines())


FLEET_NS = "fleet"
FLEET_RUNS = 1000


def test_an_idle_resync_of_1000_runs_writes_nothing(cp, logs):
    """1,000 runs (30 of them holding a lease) and their budget; the reconciler converges, then two resyncs of
    the unchanged fleet make zero status PATCHes by the API server's own count."""
    nodes = [node(f"a{i}", flavor="A100", domain="da") for i in range(4)]
    runs = [run(f"r{i:04d}", FLEET_NS, flavor="A100", gpus=1) for i in range(FLEET_RUNS)]
    leases = [lease(f"r{i:04d}-g0", FLEET_NS, owner="org:fleet", run_name=f"r{i:04d}", flavor="A100",
                    slots=[f"a{i // 8}#{i % 8}"], budget_name="fleet", start=now() - timedelta(hours=1))
              for i in range(30)]
    started = time.monotonic()
    create(cp, [*nodes, budget("fleet", FLEET_NS, owner="org:fleet", flavor="A100", concurrency=16), *runs, *leases],
           threads=16)
    created = time.monotonic() - started
    proc = Reconciler(cp, *WATCH, "--resync-period", "4s", log_dir=logs, name="fleet")
    try:
        started = time.monotonic()
        proc.wait_log("msg=synced", timeout=120)

        def converged() -> bool:
            code, body = cp.request("GET", f"{API}/namespaces/{FLEET_NS}/runs")
            return code == 200 and all(item.get("status", {}).get("plan") for item in body["items"])

        wait_for("every run's status", converged, timeout=180, every=1.0)
        converge = time.monotonic() - started
        resyncs = proc.count("msg=resync ")
        proc.wait_log("msg=resync ", count=resyncs + 1, timeout=60)  # a resync after convergence
        wait_for("the reconciler to be idle", lambda: _idle(proc), timeout=60, every=0.2)
        before = status_patches(cp)
        resyncs = proc.count("msg=resync ")
        proc.wait_log("msg=resync ", count=resyncs + 2, timeout=60)
        wait_for("the resyncs to finish", lambda: _idle(proc), timeout=60, every=0.2)
        writes = delta(status_patches(cp), before)
        running = sum(1 for i in range(30) if get(cp, run_path(f"r{i:04d}", FLEET_NS))["status"]["phase"] == "Running")
        print(f"\n{FLEET_RUNS} runs created in {created:.1f} s, converged in {converge:.1f} s; "
              f"status PATCHes over 2 idle resyncs: {writes}")
        assert running == 30
        assert writes == {"runs": 0, "budgets": 0, "reservations": 0}
        # the status the reconciler left is what the reports say of the same objects
        stored = {e["name"]: e for e in get(cp, f"{API}/namespaces/{FLEET_NS}/budgets/fleet")["status"]["envelopes"]}
        rows = run_plugin_json(cp, "budgets", "usage", "-n", FLEET_NS, "-o", "json")["envelopes"]
        assert rows and {r["envelope"] for r in rows} == set(stored)
        for row in rows:
            mine = stored[row["envelope"]]
            for field in ("windowActive", "concurrency", "usedGPUs", "headroomGPUs", "ownedGPUs", "unfundedGPUs"):
                assert mine[field] == row[field], (field, mine, row)
        for name in ("r0000", "r0029", "r0030", f"r{FLEET_RUNS - 1:04d}"):  # Running, and Pending beyond the budget
            plan = run_plugin_json(cp, "plan", f"{FLEET_NS}/{name}", "-o", "json")
            mine = get(cp, run_path(name, FLEET_NS))["status"]["plan"]
            for field in ("deficitGPUs", "capacityDeficitGPUs", "fundingDeficitGPUs"):
                assert mine[field] == plan[field], (name, field, mine, plan)
            assert [r["code"] for r in mine["reasons"]] == [r["code"] for r in plan["reasons"]], name
    finally:
        assert proc.stop() == 0
