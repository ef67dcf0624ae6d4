"""Every metric docs/reconciler.md lists, scraped from a real reconciler after a real activation (issue 26).

``kubectl runs reconcile --manage-leases --no-leader-elect --metrics-addr 127.0.0.1:0 --resync-period 1h`` runs
as its own process against the real API server (a control plane of this module's own: the reconciler writes to
every object it sees). The fleet: nodes n1, n2 (fabric domain d1) and m1 (d2), 8 H100 GPUs each; lab (owner
org:lab, 16 GPUs) runs a and b, admitted on n1 and n2; team (owner org:team, 32 GPUs under an aggregate cap of
28) runs c, admitted on m1. a and b report an ETA a few seconds ahead, then team's job asks for 16 GPUs in groups
of 8 kept in one domain: the reconciler makes it a Reservation scoped to H100 in d1, due at that ETA. At
earliestStart a and b have not finished (``--eta-grace 0s``): the lottery takes both (16 GPUs of lab) and job
starts on n1 and n2.

Then, without a resync (it is an hour away), within 2 s of the activation's writes: the resolver counters by
kind/flavor/scope/namespace equal what the Reservation's ``status.activation`` records and what the reconciler
logged; ``jobtree_reservations{state}``, ``jobtree_runs{phase}`` equal the objects on the server; the budget
gauges equal ``kubectl runs budgets usage -o json``; ``jobtree_leader`` is 1; the API write counters equal the
objects the reconciler made. The backlog and ETA gauges are checked while the Reservation is Pending. The text
passes Prometheus's own parser and linter (scripts/promlint.sh).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from reconciler_harness import (
    API,
    ROOT,
    Reconciler,
    budget,
    control_plane,
    create,
    get,
    iso,
    node,
    now,
    run,
    wait_for,
)

from kubectl_runs.engine.lottery import CLOSURE_REASON

FLAVOR = "H100"
ARGS = ("--manage-leases", "--no-leader-elect", "--metrics-addr", "127.0.0.1:0", "--resync-period", "1h",
        "--eta-grace", "0s")
KIND_OF_CLOSURE = {reason: kind for kind, reason in CLOSURE_REASON.items()}  # RandomPreempt -> Lottery
CLOSE = re.compile(r'outcome=ok cause="(?P<reason>\w+)(?:\((?P<seed>0x[0-9a-f]+)\))? by (?P<reservation>\S+): '
                   r'close (?P<lease>\S+) \((?P<gpus>\d+) GPUs of (?P<run>\S+) group')
LATENCY = 2.0  # seconds from a change on the server to /metrics showing it


@pytest.fixture(scope="module")
def cp():
    with control_plane() as plane:
        yield plane


def plugin_json(cp, *args: str):
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig), timeout=120, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def every(cp, plural: str) -> list[dict]:
    for _ in range(50):  # a CRD just established answers 429 "storage is (re)initializing" for a moment
        code, body = cp.request("GET", f"/apis/jobtree.dev/v1alpha1/{plural}")
        if code != 429:
            break
        time.sleep(0.2)
    assert code == 200, body
    return body["items"]


def open_gpus(cp, namespace: str, run_name: str) -> int:
    return sum(len(x["spec"]["slice"]["slots"]) for x in every(cp, "gpuleases")
               if x["metadata"]["namespace"] == namespace and x["spec"]["runRef"]["name"] == run_name
               and not x.get("status", {}).get("closed"))


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def select(scraped, name: str, **labels) -> dict[tuple, float]:
    return {lbl: v for (n, lbl), v in scraped.items() if n == name and set(labels.items()) <= set(lbl)}


def one(scraped, name: str, **labels) -> float:
    found = list(select(scraped, name, **labels).values())
    assert len(found) == 1, (name, labels, found)
    return found[0]


def by_label(scraped, name: str, label: str) -> dict[str, float]:
    return {dict(lbl)[label]: v for lbl, v in select(scraped, name).items() if v}


def counts(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


def patch_status(cp, namespace: str, plural: str, name: str, status: dict) -> None:
    code, body = cp.request("PATCH", f"{API}/namespaces/{namespace}/{plural}/{name}/status", {"status": status},
                            content_type="application/merge-patch+json")
    assert code == 200, body


def until(what: str, rec: Reconciler, check, since: float, timeout: float = LATENCY):
    """Scrape until ``check(scraped)`` holds; fails when that took longer than ``timeout`` after ``since``
    (time.monotonic() of the change on the server). Returns (scraped, text, seconds after ``since``)."""
    while True:
        text = rec.metrics()
        scraped = samples(text)
        if check(scraped):
            return scraped, text, time.monotonic() - since
        if time.monotonic() - since > timeout:
            raise AssertionError(f"/metrics did not show {what} within {timeout:g}s of the change:\n" + "\n".join(
                line for line in text.splitlines() if line.startswith("jobtree_") and "_created" not in line))
        time.sleep(0.05)


def test_every_listed_metric_after_a_real_activation(cp, tmp_path):
    team = budget("b", "team", owner="org:team", envelopes=[("main", FLAVOR, 32)])
    team["spec"]["aggregateCaps"] = [{"name": "all", "envelopes": ["main"], "maxConcurrency": 28}]
    create(cp, [node("n1", flavor=FLAVOR), node("n2", flavor=FLAVOR), node("m1", flavor=FLAVOR, domain="d2"),
                budget("b", "lab", owner="org:lab", envelopes=[("main", FLAVOR, 16)]), team])
    create(cp, [run("a", "lab", flavor=FLAVOR, gpus=8, group=8), run("b", "lab", flavor=FLAVOR, gpus=8, group=8)])
    rec = Reconciler(cp, *ARGS, log_dir=tmp_path, name="metrics")
    rec.proc.stdout.close()
    try:
        rec.wait_log("serving metrics")
        wait_for("a and b admitted", lambda: open_gpus(cp, "lab", "a") == open_gpus(cp, "lab", "b") == 8,
                 timeout=60)
        create(cp, [run("c", "team", flavor=FLAVOR, gpus=8, group=8)])
        wait_for("c admitted", lambda: open_gpus(cp, "team", "c") == 8, timeout=30)
        slots = {x["spec"]["runRef"]["name"]: {s.split("#")[0] for s in x["spec"]["slice"]["slots"]}
                 for x in every(cp, "gpuleases")}
        assert slots == {"a": {"n1"}, "b": {"n2"}, "c": {"m1"}}

        # --- the Reservation, Pending: backlog and ETA ---------------------------------------------------------
        eta = now() + timedelta(seconds=15)
        for name in ("a", "b"):
            patch_status(cp, "lab", "runs", name, {"eta": {"estimatedCompletion": iso(eta), "source": "workload"}})
        job = run("job", "team", flavor=FLAVOR, gpus=16, group=8)
        job["spec"]["locality"]["allowCrossGroupSpread"] = False
        create(cp, [job])
        pending, _ = wait_for("job-r1 Pending", lambda: [
            r for r in every(cp, "reservations") if r["metadata"]["name"] == "job-r1"
            and r.get("status", {}).get("state") == "Pending"], timeout=30)
        seen_pending = time.monotonic()
        (reservation,) = pending
        assert reservation["spec"]["scope"] == {"flavor": FLAVOR, "domain": "d1"}
        earliest = datetime.fromisoformat(reservation["spec"]["earliestStart"].replace("Z", "+00:00"))
        scraped, _, _ = until("the Pending Reservation", rec,
                              lambda s: select(s, "jobtree_reservation_backlog", flavor=FLAVOR), seen_pending)
        assert one(scraped, "jobtree_reservation_backlog", flavor=FLAVOR) == 1
        assert one(scraped, "jobtree_reservations", state="Pending") == 1
        ahead = (earliest - datetime.now(UTC)).total_seconds()
        assert 0 < ahead < 300, ahead
        assert one(scraped, "jobtree_reservation_eta_seconds_bucket", flavor=FLAVOR, le="0.0") == 0
        assert one(scraped, "jobtree_reservation_eta_seconds_bucket", flavor=FLAVOR, le="300.0") == 1
        assert one(scraped, "jobtree_reservation_eta_seconds_gcount", flavor=FLAVOR) == 1
        assert one(scraped, "jobtree_runs", phase="Reserved") == 1  # job, as its stored status says

        # --- the activation ---------------------------------------------------------------------------------------
        def phases() -> dict[str, str]:
            return {r["metadata"]["name"]: r.get("status", {}).get("phase") or "" for r in every(cp, "runs")}

        # the change: the activation's lease writes, then the status they lead to (the batch that made them, or
        # the one right after when the wake-up's batch ran the ledger alone)
        wait_for("job started by its activation", lambda: open_gpus(cp, "team", "job") == 16, timeout=90)
        wait_for("the runs' status after the activation",
                 lambda: phases() == {"a": "Pending", "b": "Pending", "c": "Running", "job": "Running"}, timeout=30)
        started = time.monotonic()
        decided = get(cp, f"{API}/namespaces/team/reservations/job-r1")["status"]
        assert decided["state"] == "Activated"
        actions = decided["activation"]["actions"]
        assert {a["kind"] for a in actions} == {"Lottery"} and sum(a["gpus"] for a in actions) == 16
        assert {a["run"] for a in actions} == {"lab/a", "lab/b"}

        def settled(s) -> bool:
            return (one_or_none(s, "jobtree_reservations", state="Activated") == 1
                    and one_or_none(s, "jobtree_budget_headroom_gpus", namespace="lab") == 16
                    and one_or_none(s, "jobtree_budget_headroom_gpus", namespace="team") == 8
                    and by_label(s, "jobtree_runs", "phase") == {"Pending": 2, "Running": 2})

        scraped, text, latency = until("the activation", rec, settled, started)
        print(f"the activation's writes -> /metrics: {latency:.2f} s")  # -s shows it
        usage = plugin_json(cp, "budgets", "usage", "-A", "-o", "json")
        assert settled(samples(rec.metrics())), "the fleet moved after the activation"
        assert rec.count('msg=resync') == 0

        # resolver actions and GPUs: what the record says, what the log says
        scope = f"{FLAVOR}/d1"
        recorded: dict[tuple, list[int]] = {}
        for action in actions:
            key = (action["kind"], action["run"].split("/")[0])
            recorded.setdefault(key, []).append(action["gpus"])
        logged: dict[tuple, list[int]] = {}
        for line in rec.writes():
            m = CLOSE.search(line)
            if m and m["reservation"] == "team/job-r1":
                key = (KIND_OF_CLOSURE[m["reason"]], m["run"].split("/")[0])
                logged.setdefault(key, []).append(int(m["gpus"]))
        assert sorted(logged.items()) == sorted(recorded.items())
        exported_actions = {(dict(lbl)["kind"], dict(lbl)["namespace"]): v
                            for lbl, v in select(scraped, "jobtree_resolver_actions_total").items()}
        exported_gpus = {(dict(lbl)["kind"], dict(lbl)["namespace"]): v
                         for lbl, v in select(scraped, "jobtree_preempted_gpus_total").items()}
        assert exported_actions == {k: len(v) for k, v in recorded.items()}
        assert exported_gpus == {k: sum(v) for k, v in recorded.items()}
        for name in ("jobtree_resolver_actions_total", "jobtree_preempted_gpus_total"):
            assert {(dict(lbl)["flavor"], dict(lbl)["scope"]) for lbl in select(scraped, name)} == {(FLAVOR, scope)}
        assert select(scraped, "jobtree_reservation_activations_total") == {
            (("flavor", FLAVOR), ("outcome", "Activated"), ("scope", scope)): 1}
        assert rec.count('cause="activate team/job-r1 at ') == 1

        # the fleet gauges: the objects on the server, budgets usage
        assert by_label(scraped, "jobtree_reservations", "state") == counts(
            r["status"]["state"] for r in every(cp, "reservations"))
        assert not select(scraped, "jobtree_reservation_backlog")  # nothing Pending any more
        assert by_label(scraped, "jobtree_runs", "phase") == counts(
            r.get("status", {}).get("phase") or "" for r in every(cp, "runs"))
        rows = usage["envelopes"]
        assert {(r["namespace"], r["headroomGPUs"]) for r in rows} == {("lab", 16), ("team", 8)}
        for row in rows:
            key = {"namespace": row["namespace"], "budget": row["budget"], "envelope": row["envelope"],
                   "flavor": row["flavor"], "owner": row["owner"]}
            assert one(scraped, "jobtree_budget_headroom_gpus", **key) == row["headroomGPUs"]
            assert one(scraped, "jobtree_budget_concurrency_gpus", **key) == row["concurrency"]
            assert one(scraped, "jobtree_budget_window_active", **key) == (1 if row["windowActive"] else 0)
            for cls in ("owned", "shared", "borrowed", "unfunded", "spare"):
                assert one(scraped, "jobtree_budget_gpus", **key, **{"class": cls}) == row[f"{cls}GPUs"], cls
        (aggregate,) = usage["aggregates"]
        assert one(scraped, "jobtree_budget_aggregate_headroom_gpus", namespace="team", budget="b",
                   aggregate="all") == aggregate["headroomGPUs"] == 4
        # consumed GPU-seconds: exactly budgets usage at the instant the gauges were computed at
        stamp = datetime.fromtimestamp(one(scraped, "jobtree_fleet_updated_timestamp_seconds"), UTC)
        at_stamp = plugin_json(cp, "budgets", "usage", "-A", "-o", "json", "--at", iso(stamp))["envelopes"]
        for row in at_stamp:
            consumed = one(scraped, "jobtree_budget_consumed_gpu_seconds", namespace=row["namespace"])
            assert consumed == pytest.approx(row["consumedGPUHours"] * 3600, abs=0.5)
            assert consumed > 0

        # the reconciler's own work
        assert one(scraped, "jobtree_leader") == 1  # --no-leader-elect: this replica writes
        assert one(scraped, "jobtree_ready") == 1
        assert one(scraped, "jobtree_build_info") == 1
        assert one(scraped, "jobtree_workqueue_depth") >= 0
        assert one(scraped, "jobtree_reconcile_duration_seconds_count") > 0
        assert time.time() - one(scraped, "jobtree_last_reconcile_timestamp_seconds") < 60
        leases = every(cp, "gpuleases")
        assert one(scraped, "jobtree_api_writes_total", kind="GPULease", action="Create", outcome="ok") == len(leases) == 5
        assert one(scraped, "jobtree_api_writes_total", kind="GPULease", action="PatchStatus", outcome="ok") == sum(
            1 for x in leases if x.get("status", {}).get("closed")) == 2
        assert one(scraped, "jobtree_api_writes_total", kind="Reservation", action="Create", outcome="ok") == 1
        assert one(scraped, "jobtree_api_writes_total", kind="Reservation", action="PatchStatus", outcome="ok") >= 2
        assert not [lbl for lbl in select(scraped, "jobtree_api_errors_total") if ("reason", "Forbidden") in lbl]
        # every request went through the client-side rate limiter (default 50/100: a fleet this small never waits
        # long): at least the writes, the informers' lists and watches
        written = sum(select(scraped, "jobtree_api_writes_total").values())
        assert one(scraped, "jobtree_client_rate_limit_wait_seconds_count") >= written + 2 * 5
        assert 0 <= one(scraped, "jobtree_client_rate_limit_wait_seconds_sum") < 1.0
        _lints_clean(text)
    finally:
        rec.stop()
    assert rec.count("level=error") == 0, [line for line in rec.lines() if "level=error" in line]


def one_or_none(scraped, name: str, **labels) -> float | None:
    found = list(select(scraped, name, **labels).values())
    return found[0] if len(found) == 1 else None


def _lints_clean(text: str) -> None:
    """The live text through Prometheus's Go parser and linter (a failed build fails where the control plane
    is required, i.e. in CI; elsewhere without Go the tier is skipped anyway)."""
    if shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK):
        if os.environ.get("KUBECTL_RUNS_REQUIRE_CONTROLPLANE"):
            pytest.fail("Go is not installed: scripts/promlint.sh cannot build the metrics linter")
        return
    done = subprocess.run([str(ROOT / "scripts" / "promlint.sh"), "check"], input=text, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.startswith("ok: ")
