"""``kubectl runs reconcile --manage-leases`` against a real API server: the ledger keeper end to end.

The scenario (real time): three runs are admitted (one GPULease each), a fourth is blocked and gets a
Reservation whose earliestStart is the others' reported ETA; the reconciler is killed (SIGKILL, through the
test-only KUBECTL_RUNS_TEST_KILL_AFTER hook) right after it recorded the activation and before it closed the
victim; a restarted reconciler closes the victim *from the record* (RandomPreempt, seed), admits the blocked
run, then closes the leases of a finished run (Completed) and of a deleted one (RunDeleted). It ends with
``kubectl runs seeds verify`` exiting 0 live and ``kubectl runs leases audit --strict`` exiting 0; every lease is
closed at most once (PATCHes on gpuleases/status counted by the API server itself).

Then a pass killed between two lease mints and run again converges to the ledger a dry run planned: the same
names, slots and payers, no lease created twice (POSTs counted by the API server).

And a Run deleted while a finalizer holds it (deletionTimestamp set, the object kept): the next pass closes its
leases (RunDeleted) and releases its due Reservation (RunDeleted) without preempting anyone.

The reconciler writes to every object it sees: these tests use their own control plane."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
    get,
    iso,
    node,
    now,
    requests,
    run,
    wait_for,
)

NS = "team"
OWNER = "org:team"
FLAVOR = "H100"
# --eta-grace 0s: these scenarios are about runs that overran their reported ETA, which round 3's grace would
# otherwise wait for (test_preemption_live.py and the unit tests cover the grace itself)
WATCH = ("--manage-leases", "--no-leader-elect", "--metrics-addr", "0", "--eta-grace", "0s")


def grouped_run(name: str, namespace: str = NS, *, flavor: str = FLAVOR, gpus: int = 8, group: int = 8) -> dict:
    return run(name, namespace, flavor=flavor, gpus=gpus, group=group)


def items(cp, plural: str, namespace: str = NS) -> list[dict]:
    for _ in range(50):  # a CRD just established answers 429 "storage is (re)initializing" for a moment
        code, body = cp.request("GET", f"{API}/namespaces/{namespace}/{plural}")
        if code != 429:
            break
        time.sleep(0.2)
    assert code == 200, (plural, code, body)
    return body["items"]


def leases_of(cp, run_name: str, namespace: str = NS) -> list[dict]:
    return [x for x in items(cp, "gpuleases", namespace) if x["spec"]["runRef"]["name"] == run_name]


def open_leases(cp, namespace: str = NS) -> list[dict]:
    return [x for x in items(cp, "gpuleases", namespace) if not x.get("status", {}).get("closed")]


def patch_status(cp, plural: str, name: str, status: dict, namespace: str = NS) -> None:
    code, body = cp.request("PATCH", f"{API}/namespaces/{namespace}/{plural}/{name}/status", {"status": status},
                            content_type="application/merge-patch+json")
    assert code == 200, body


def plugin(cp, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig), timeout=120, cwd=str(ROOT))


@pytest.fixture(scope="module")
def cp():
    with control_plane() as plane:
        yield plane


def test_admit_block_reserve_activate_by_lottery_crash_between_writes_verify_and_audit(cp, tmp_path):
    create(cp, [node("n1", flavor=FLAVOR), node("n2", flavor=FLAVOR), node("m1", flavor=FLAVOR, domain="d2"),
                budget("b", NS, owner=OWNER, envelopes=[("main", FLAVOR, 64)])])
    create(cp, [grouped_run(name) for name in ("a", "b", "c")])

    # 1. Three runs admitted: a lease of 8 GPUs each, every slot once.
    first = Reconciler(cp, *WATCH, log_dir=tmp_path, name="first")
    first.proc.stdout.close()
    wait_for("three runs admitted", lambda: len(open_leases(cp)) == 3, timeout=30)
    slots = [s for x in open_leases(cp) for s in x["spec"]["slice"]["slots"]]
    assert len(slots) == len(set(slots)) == 24
    for x in open_leases(cp):
        assert x["metadata"]["name"] == f"{x['spec']['runRef']['name']}-g0-active-0"
        assert x["spec"]["paidBy"] == {"namespace": NS, "budget": "b", "envelope": "main"}
        assert x["spec"]["owner"] == OWNER and x["spec"]["reason"] == "Start"

    # 2. They report an ETA a few seconds ahead; a fourth run is blocked and reserves for that instant.
    eta = now() + timedelta(seconds=20)
    for name in ("a", "b", "c"):
        patch_status(cp, "runs", name, {"eta": {"estimatedCompletion": iso(eta), "source": "workload"}})
    create(cp, [grouped_run("late")])
    reservation, _ = wait_for("late's Reservation", lambda: [r for r in items(cp, "reservations")
                                                             if r["spec"]["runRef"]["name"] == "late"], timeout=30)
    (reservation,) = reservation
    assert reservation["metadata"]["name"] == "late-r1"
    earliest = reservation["spec"]["earliestStart"]
    assert earliest >= iso(eta)
    assert reservation["spec"]["payingEnvelope"] == {"budget": "b", "envelope": "main"}
    wait_for("late-r1 Pending", lambda: get(cp, f"{API}/namespaces/{NS}/reservations/late-r1")
             .get("status", {}).get("state") == "Pending", timeout=30)
    first.stop()

    # 3. At earliestStart the ETAs have passed and nobody finished: the activation draws a victim. This
    #    reconciler dies right after recording the decision, before the closure.
    patches_before = requests(cp, "PATCH", "gpuleases", subresource="status")
    doomed = _reconciler(cp, tmp_path, "doomed", *WATCH, kill_after="activate team/late-r1")
    code = doomed.wait(timeout=90)
    assert code == -signal.SIGKILL, f"exit {code}: " + (tmp_path / "doomed.log").read_text()[-3000:]
    decided = get(cp, f"{API}/namespaces/{NS}/reservations/late-r1")["status"]
    assert decided["state"] == "Activated"
    activation = decided["activation"]
    assert activation["at"] == earliest
    assert len(activation["conflictSet"]) == 3
    (action,) = activation["actions"]
    assert action["kind"] == "Lottery" and action["gpus"] == 8
    victim_ns, victim_name = action["lease"].split("/")
    victim = get(cp, f"{API}/namespaces/{victim_ns}/gpuleases/{victim_name}")
    assert not victim.get("status", {}).get("closed"), "the crash came before the closure"
    assert requests(cp, "PATCH", "gpuleases", subresource="status") == patches_before

    # 4. A restarted reconciler closes the victim from the record and admits the blocked run.
    second = Reconciler(cp, *WATCH, log_dir=tmp_path, name="second")
    second.proc.stdout.close()
    wait_for("late admitted", lambda: [x for x in leases_of(cp, "late") if not x.get("status", {}).get("closed")],
             timeout=30)
    victim = get(cp, f"{API}/namespaces/{victim_ns}/gpuleases/{victim_name}")["status"]
    assert victim["closed"] is True and victim["closureReason"] == "RandomPreempt"
    assert victim["preemption"] == {"reservation": f"{NS}/late-r1", "seed": activation["seed"]}
    victim_run = action["run"].split("/")[1]
    wait_for("the victim run's record", lambda: get(cp, f"{API}/namespaces/{NS}/runs/{victim_run}")
             .get("status", {}).get("preemptions"), timeout=30)
    preempt_lines = [line for line in second.lines() if "RandomPreempt(" in line]
    assert len(preempt_lines) == 1 and f"RandomPreempt({activation['seed']}) by {NS}/late-r1" in preempt_lines[0]
    assert not [line for line in second.lines() if "activate team/late-r1" in line], "decided again"
    slots = [s for x in open_leases(cp) for s in x["spec"]["slice"]["slots"]]
    assert len(slots) == len(set(slots)) == 24

    # 5. A run finishes (its workload says so) and another is deleted: their leases close.
    survivors = sorted({"a", "b", "c"} - {victim_run})
    patch_status(cp, "runs", survivors[0], {"phase": "Succeeded"})
    code, body = cp.request("DELETE", f"{API}/namespaces/{NS}/runs/{survivors[1]}")
    assert code == 200, body

    def closed_with(run_name: str, reason: str) -> bool:
        return any(x.get("status", {}).get("closureReason") == reason for x in leases_of(cp, run_name))

    wait_for("Completed and RunDeleted", lambda: closed_with(survivors[0], "Completed")
             and closed_with(survivors[1], "RunDeleted"), timeout=30)
    second.stop()

    # Each lease was closed once: the victim, the finished run's, the deleted run's.
    assert requests(cp, "PATCH", "gpuleases", subresource="status") - patches_before == 3
    names = [x["metadata"]["name"] for x in items(cp, "gpuleases")]
    assert len(names) == len(set(names))

    verify = plugin(cp, "seeds", "verify", "-A")
    print("\n$ kubectl runs seeds verify -A\n" + verify.stdout + verify.stderr)
    assert verify.returncode == 0
    assert "verified" in verify.stdout
    verified = json.loads(plugin(cp, "seeds", "verify", "-A", "-o", "json").stdout)
    assert [(r["name"], r["verified"]) for r in verified["reservations"]] == [(f"{NS}/late-r1", True)]
    audit = plugin(cp, "leases", "audit", "--strict")
    print("$ kubectl runs leases audit --strict\n" + audit.stdout + audit.stderr)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    print("$ kubectl logs … | grep RandomPreempt\n" + "\n".join(preempt_lines))


def _reconciler(cp, log_dir, name: str, *args: str, kill_after: str = "") -> subprocess.Popen:
    """``kubectl-runs reconcile ARGS`` with the test-only hook that SIGKILLs it right after the write whose cause
    contains ``kill_after`` (``text#n``: the n-th)."""
    env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig, PYTHONUNBUFFERED="1")
    if kill_after:
        env["KUBECTL_RUNS_TEST_KILL_AFTER"] = kill_after
    with open(log_dir / f"{name}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "kubectl_runs", "reconcile", *args],
                                stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=str(ROOT))


def test_a_pass_killed_between_two_mints_and_run_again_converges_to_the_planned_ledger(cp, tmp_path):
    """Runs p (4 groups of 4) and q (2 groups of 4) of namespace crash on three 8-GPU A100 nodes; envelope e1
    funds 6 GPUs, e2 32: p's
    group 1 straddles both (two leases). --dry-run says what one pass writes; the first --once dies after its
    third lease, the second finishes: the same leases, and the API server created each exactly once."""
    create(cp, [node("x1", flavor="A100"), node("x2", flavor="A100"), node("x3", flavor="A100"),
                budget("b", "crash", owner="org:crash", envelopes=[("e1", "A100", 6), ("e2", "A100", 32)]),
                grouped_run("p", "crash", flavor="A100", gpus=16, group=4),
                grouped_run("q", "crash", flavor="A100", gpus=8, group=4)])
    dry = plugin(cp, "reconcile", "--dry-run", "--manage-leases")
    assert dry.returncode == 0, dry.stderr
    planned = {w["name"]: w["body"]["spec"] for w in json.loads(dry.stdout)
               if w["action"] == "Create" and w["kind"] == "GPULease" and w["namespace"] == "crash"}
    assert sorted(planned) == ["p-g0-active-0", "p-g1-active-0", "p-g1-active-1", "p-g2-active-0",
                               "p-g3-active-0", "q-g0-active-0", "q-g1-active-0"]
    assert [planned[n]["paidBy"]["envelope"] for n in ("p-g0-active-0", "p-g1-active-0", "p-g1-active-1")] == [
        "e1", "e1", "e2"]
    posts = requests(cp, "POST", "gpuleases")

    killed = _reconciler(cp, tmp_path, "killed", "--once", "--manage-leases", kill_after="mint crash/#3")
    assert killed.wait(timeout=90) == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert len(items(cp, "gpuleases", "crash")) == 3

    again = _reconciler(cp, tmp_path, "again", "--once", "--manage-leases")
    assert again.wait(timeout=90) == 0, (tmp_path / "again.log").read_text()[-3000:]
    stored = {x["metadata"]["name"]: x["spec"] for x in items(cp, "gpuleases", "crash")}
    without_start = lambda specs: {n: {k: v for k, v in spec.items() if k != "start"} for n, spec in specs.items()}  # noqa: E731
    assert without_start(stored) == without_start(planned)
    assert requests(cp, "POST", "gpuleases") - posts == len(planned), "a lease was created twice"
    slots = [s for spec in stored.values() for s in spec["slice"]["slots"]]
    assert len(slots) == len(set(slots)) == 24
    audit = plugin(cp, "leases", "audit", "--strict", "-n", "crash")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    print(f"\nkilled after 3 of {len(planned)} leases, run again: {len(stored)} leases, "
          f"{requests(cp, 'POST', 'gpuleases') - posts} POSTs; leases audit --strict: exit {audit.returncode}")


def _log_has(path, fragment: str) -> bool:
    return path.exists() and fragment in path.read_text(errors="replace")


def test_two_replicas_managing_leases_the_standby_takes_over_from_a_leader_killed_mid_admission(cp, tmp_path):
    """Two ``reconcile --manage-leases`` replicas with leader election, as deploy/'s manage-leases overlay runs
    them. Four runs of one 8-GPU group each arrive on four 8-GPU L40 nodes; the leader is SIGKILLed right after
    its third mint (test-only hook). The standby takes the Lease over and mints the fourth: the API server
    created exactly four GPULeases (no retry minted twice, the standby re-minted nothing), no slot is in two
    open leases, and ``leases audit --strict`` exits 0."""
    create(cp, [*(node(f"fo{i}", flavor="L40") for i in range(4)),
                budget("b", "fo", owner="org:fo", envelopes=[("e", "L40", 32)])])
    cp.kubectl("create", "namespace", "fo-election")
    election = ("--manage-leases", "--leader-elect", "--leader-election-namespace", "fo-election",
                "--leader-election-id", "fo", "--metrics-addr", "0")
    a = _reconciler(cp, tmp_path, "a", *election, "--identity", "replica-a", kill_after="mint fo/#3")
    b = None
    try:
        wait_for("replica-a to lead", lambda: _log_has(tmp_path / "a.log", "msg=leadership leader=True"),
                 timeout=60, every=0.1)
        b = _reconciler(cp, tmp_path, "b", *election, "--identity", "replica-b")
        wait_for("replica-b's caches", lambda: _log_has(tmp_path / "b.log", "msg=synced"), timeout=60, every=0.1)
        posts = requests(cp, "POST", "gpuleases")
        create(cp, [grouped_run(f"w{i}", "fo", flavor="L40", gpus=8, group=8) for i in range(4)])
        assert a.wait(timeout=90) == -signal.SIGKILL, (tmp_path / "a.log").read_text()[-3000:]
        killed = time.monotonic()
        minted_by_a = len(items(cp, "gpuleases", "fo"))
        assert minted_by_a == 3
        wait_for("replica-b to lead", lambda: _log_has(tmp_path / "b.log", "msg=leadership leader=True"),
                 timeout=40, every=0.1)
        took = time.monotonic() - killed
        wait_for("four open leases", lambda: len(open_leases(cp, "fo")) == 4 or None, timeout=60, every=0.2)
        time.sleep(2.0)  # a duplicate mint, if any, would land now
        stored = items(cp, "gpuleases", "fo")
        slots = [s for x in stored for s in x["spec"]["slice"]["slots"]]
        created = requests(cp, "POST", "gpuleases") - posts
        audit = plugin(cp, "leases", "audit", "--strict", "-n", "fo")
        print(f"\nleader killed after {minted_by_a} mints; replica-b led after {took:.1f} s; "
              f"{len(stored)} leases, {created} POSTs; leases audit --strict: exit {audit.returncode}")
        assert sorted(x["spec"]["runRef"]["name"] for x in stored) == ["w0", "w1", "w2", "w3"]
        assert created == 4, "a lease was created twice"
        assert len(slots) == len(set(slots)) == 32
        assert audit.returncode == 0, audit.stdout + audit.stderr
        b_log = (tmp_path / "b.log").read_text(errors="replace")
        assert b_log.count("mint fo/") == 1, "the standby minted what the leader had already minted"
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


def test_a_run_deleted_while_a_finalizer_holds_it_has_its_leases_closed_and_its_reservation_released(cp, tmp_path):
    """Run keep (8 V100 GPUs, finalizer example.com/hold) and run other (8) fill two 8-GPU V100 nodes: one
    ``reconcile --once --manage-leases`` mints a lease for each. keep also has a Pending Reservation, keep-r1, due
    already (earliestStart a second ago; made here by hand: spec is immutable, and a keeper-made one would not
    be due for 10 s). ``kubectl delete run keep --wait=false``: the API server sets deletionTimestamp and keeps the
    object for its finalizer. The next pass closes keep's lease (closureReason RunDeleted, ended set, not before
    its start) and releases keep-r1 (reason RunDeleted) without activating it: other's lease is not written at all
    (resourceVersion unchanged) and nobody is preempted — activating keep-r1 for a Run whose lease that pass just
    closed would take other's 8 GPUs by lottery. With the finalizer removed the Run is gone, and a pass after that
    does not close keep's lease again."""
    ns, flavor = "hold", "V100"
    keep = grouped_run("keep", ns, flavor=flavor)
    keep["metadata"]["finalizers"] = ["example.com/hold"]
    create(cp, [node("h1", flavor=flavor), node("h2", flavor=flavor),
                budget("b", ns, owner="org:hold", envelopes=[("main", flavor, 16)])])
    create(cp, [keep, grouped_run("other", ns, flavor=flavor)])

    def once(name: str) -> Reconciler:
        proc = Reconciler(cp, "--once", "--manage-leases", log_dir=tmp_path, name=name)
        code = proc.proc.wait(timeout=90)
        proc.stop()
        assert code == 0, "\n".join(proc.lines()[-30:])
        return proc

    def lease_of(run_name: str) -> dict:
        (one,) = leases_of(cp, run_name, ns)
        return one

    once("mint")
    keep_lease, other_lease = lease_of("keep"), lease_of("other")
    assert not keep_lease.get("status", {}).get("closed") and not other_lease.get("status", {}).get("closed")
    create(cp, [{"apiVersion": "jobtree.dev/v1alpha1", "kind": "Reservation",
                 "metadata": {"name": "keep-r1", "namespace": ns,  # as the reconciler makes them (its mark)
                              "labels": {"app.kubernetes.io/managed-by": "kubectl-runs-reconciler"}},
                 "spec": {"runRef": {"namespace": ns, "name": "keep"}, "scope": {"flavor": flavor},
                          "earliestStart": iso(now() - timedelta(seconds=1))}}])
    patch_status(cp, "reservations", "keep-r1", {"state": "Pending", "reason": "Waiting"}, namespace=ns)

    cp.kubectl("delete", "run", "keep", "-n", ns, "--wait=false")
    marked = get(cp, f"{API}/namespaces/{ns}/runs/keep")["metadata"]
    assert marked.get("deletionTimestamp") and marked["finalizers"] == ["example.com/hold"]

    deleting = once("deleting")
    closed = lease_of("keep")
    assert closed["metadata"]["name"] == keep_lease["metadata"]["name"]
    status = closed.get("status", {})
    assert (status.get("closed"), status.get("closureReason")) == (True, "RunDeleted"), closed
    assert status["ended"] >= closed["spec"]["start"]
    assert "preemption" not in status
    reservation = get(cp, f"{API}/namespaces/{ns}/reservations/keep-r1")["status"]
    assert (reservation["state"], reservation["reason"]) == ("Released", "RunDeleted")
    assert "activation" not in reservation
    assert lease_of("other")["metadata"]["resourceVersion"] == other_lease["metadata"]["resourceVersion"]
    assert not get(cp, f"{API}/namespaces/{ns}/runs/other").get("status", {}).get("preemptions")
    assert not [line for line in deleting.lines() if "RandomPreempt(" in line or f"activate {ns}/keep-r1" in line]
    assert get(cp, f"{API}/namespaces/{ns}/runs/keep")["metadata"].get("deletionTimestamp"), "the finalizer holds it"

    cp.kubectl("patch", "run", "keep", "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait_for("keep gone", lambda: cp.request("GET", f"{API}/namespaces/{ns}/runs/keep")[0] == 404, timeout=30)
    once("gone")
    assert lease_of("keep")["metadata"]["resourceVersion"] == closed["metadata"]["resourceVersion"], \
        "a closed lease was written again"
