"""Two ``kubectl runs reconcile`` processes with leader election against the real API server, as the two
replicas of deploy/ run: one leads, the standby writes nothing (by the API server's own request count and by the
processes' logs), both serve /metrics, /healthz and /readyz with the jobtree_ series, never both report
``jobtree_leader 1``; SIGKILL of the leader makes the standby take over within lease duration + 2 × retry period
and finish the work that arrived meanwhile — writing only that (no status is written twice).

Uses its own control plane: the reconciler writes status to every object it sees."""

from __future__ import annotations

import re
import signal
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from reconciler_harness import (
    API,
    Reconciler,
    budget,
    control_plane,
    create,
    delta,
    get,
    lease,
    node,
    run,
    run_plugin_json,
    status_patches,
    wait_for,
)

NS = "team"
OWNER = "org:team"
FLAVOR = "H100"
LEASE_NS = "kubectl-runs-system"
LEASE = "failover-test"
RUNS = 10


@pytest.fixture(scope="module")
def cp():
    with control_plane(LEASE_NS) as plane:
        slots = [f"n{i // 8}#{i % 8}" for i in range(16)]
        create(plane, [*(node(f"n{i}", flavor=FLAVOR) for i in range(4)),
                       budget("b", NS, owner=OWNER, flavor=FLAVOR, concurrency=32),
                       *(run(f"r{i}", NS, flavor=FLAVOR, gpus=4) for i in range(RUNS))])
        create(plane, [lease(f"r{i}-g0", NS, owner=OWNER, run_name=f"r{i}", flavor=FLAVOR,
                             slots=slots[4 * i:4 * i + 4], budget_name="b") for i in range(4)])
        yield plane


def replica(cp, identity: str, logs) -> Reconciler:
    return Reconciler(cp, "--leader-elect", "--leader-election-namespace", LEASE_NS, "--leader-election-id", LEASE,
                      "--identity", identity, "--metrics-addr", "127.0.0.1:0", "--resync-period", "3s",
                      log_dir=logs, name=identity)


LOGFMT = re.compile(r'^time=\S+Z level=(?:info|warning|error) msg=(?:[^\s="]+|"(?:[^"\\]|\\.)*")'
                    r'(?: \w+=(?:[^\s="]*|"(?:[^"\\]|\\.)*"))*$')


def metrics_url(proc: Reconciler) -> str:
    proc.wait_log('msg="serving metrics"', timeout=60)
    line = next(x for x in proc.lines() if 'msg="serving metrics"' in x)
    return re.search(r"url=(\S+)", line).group(1)


def http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(http(url + "/metrics")[1]):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    found = [v for (n, lbl), v in samples.items() if n == name and set(labels.items()) <= set(lbl)]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def ok_writes(proc: Reconciler, since: int = 0) -> list[str]:
    return [x for x in proc.lines()[since:] if "msg=write " in x and "outcome=ok" in x]


def holder(cp) -> str:
    code, body = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE}")
    return body["spec"].get("holderIdentity", "") if code == 200 else ""


def quiet(proc: Reconciler, seconds: float = 1.0) -> bool:
    """No write logged for ``seconds`` (resync lines do not count)."""
    writes = [x for x in proc.lines() if "msg=write " in x]
    if not writes:
        return True
    stamp = re.search(r"time=(\S+)", writes[-1]).group(1)
    from datetime import UTC, datetime

    last = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - last).total_seconds() > seconds


def all_planned(cp, names) -> bool:
    return all(get(cp, f"{API}/namespaces/{NS}/runs/{n}").get("status", {}).get("plan") for n in names)


def test_two_replicas_one_writes_then_the_standby_takes_over_after_sigkill(cp, tmp_path):
    before = status_patches(cp)
    a = replica(cp, "replica-a", tmp_path)
    b = replica(cp, "replica-b", tmp_path)
    try:
        urls = {"replica-a": metrics_url(a), "replica-b": metrics_url(b)}
        a.wait_log("msg=synced")
        b.wait_log("msg=synced")
        wait_for("a leader", lambda: holder(cp), timeout=30)
        procs = {"replica-a": a, "replica-b": b}
        leader_id = holder(cp)
        standby_id = next(k for k in procs if k != leader_id)
        leader, standby = procs[leader_id], procs[standby_id]
        leader.wait_log("msg=leadership leader=True", timeout=30)
        wait_for("every run's status", lambda: all_planned(cp, [f"r{i}" for i in range(RUNS)]), timeout=60,
                 every=0.2)
        wait_for("the leader to be idle", lambda: quiet(leader, 1.5), timeout=30, every=0.2)

        # one leader, by both replicas' own metrics, sampled while resyncs go on
        most = 0
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            flags = [value(scrape(u), "jobtree_leader") for u in urls.values()]
            most = max(most, sum(flags))
            time.sleep(0.05)
        assert most == 1
        assert http(urls[leader_id] + "/readyz") == (200, "ok: leader\n")
        assert http(urls[standby_id] + "/readyz") == (200, "ok: standby\n")
        assert http(urls[standby_id] + "/healthz")[0] == 200
        served = scrape(urls[leader_id])
        usage = run_plugin_json(cp, "budgets", "usage", "-o", "json")["envelopes"][0]
        assert value(served, "jobtree_budget_headroom_gpus", namespace=NS, envelope="main") == usage["headroomGPUs"]
        assert value(served, "jobtree_budget_gpus", namespace=NS, envelope="main", **{"class": "owned"}) == 16
        assert value(served, "jobtree_api_writes_total", kind="Run", action="PatchStatus", outcome="ok") == RUNS
        assert value(served, "jobtree_reconcile_duration_seconds_count") >= 1
        # only the leader exports the fleet gauges (docs/reconciler.md, Metrics): the standby evaluates nothing
        standing = scrape(urls[standby_id])
        assert value(standing, "jobtree_leader") == 0 and value(standing, "jobtree_ready") == 1
        assert not [k for k in standing if k[0].startswith(("jobtree_budget_", "jobtree_reservation", "jobtree_runs"))]

        server = delta(status_patches(cp), before)
        print(f"\nleader {leader_id}: {len(ok_writes(leader))} writes logged; standby {standby_id}: "
              f"{len(ok_writes(standby))}; API server status PATCHes: {server}")
        assert ok_writes(standby) == []
        assert server == {"runs": RUNS, "budgets": 1, "reservations": 0}
        assert len(ok_writes(leader)) == sum(server.values())

        # idle resyncs: nothing written by either
        idle = status_patches(cp)
        resyncs = leader.count("msg=resync ")
        leader.wait_log("msg=resync ", count=resyncs + 2, timeout=30)
        wait_for("the leader to be idle", lambda: quiet(leader, 1.0), timeout=30, every=0.2)
        assert delta(status_patches(cp), idle) == {"runs": 0, "budgets": 0, "reservations": 0}

        # SIGKILL the leader (no release), then new work arrives
        mark = len(standby.lines())
        at_kill = status_patches(cp)
        leader.stop(signal.SIGKILL)
        killed = time.monotonic()
        create(cp, [run(f"late{i}", NS, flavor=FLAVOR, gpus=4) for i in range(3)])
        standby.wait_log("msg=leadership leader=True", timeout=40)
        took = time.monotonic() - killed
        wait_for("the late runs' status", lambda: all_planned(cp, [f"late{i}" for i in range(3)]), timeout=30,
                 every=0.1)
        finished = time.monotonic() - killed
        wait_for("the new leader to be idle", lambda: quiet(standby, 1.5), timeout=30, every=0.2)
        after = delta(status_patches(cp), at_kill)
        print(f"SIGKILL of {leader_id}: {standby_id} led after {took:.1f} s, the 3 new runs had status after "
              f"{finished:.1f} s; API server status PATCHes since the kill: {after}; "
              f"{standby_id} logged {len(ok_writes(standby, mark))} writes")
        assert took <= 15 + 2 * 2 * 1.2 + 2.0
        assert after == {"runs": 3, "budgets": 0, "reservations": 0}  # only the new work: nothing rewritten
        assert len(ok_writes(standby, mark)) == 3
        assert holder(cp) == standby_id
        assert value(scrape(urls[standby_id]), "jobtree_leader") == 1
    finally:
        codes = {p.log_path.name: p.stop() for p in (a, b)}
    assert holder(cp) == ""  # the survivor released the Lease on SIGTERM
    assert sorted(codes.values()) == [-signal.SIGKILL, 0]
    # Leader election logs as the rest of the reconciler: one logfmt line per event, nothing else on stderr.
    for proc in (a, b):
        assert [x for x in proc.lines() if not LOGFMT.match(x)] == [], proc.log_path.name
    survivor = standby.lines()
    for event in ("acquired", "released"):
        assert [x for x in survivor if 'msg="leader election"' in x and f"event={event} " in x
                and f"identity={standby_id}" in x and f"lease={LEASE_NS}/{LEASE}" in x], event
