"""The ledger keeper's Events on a real API server: a Reservation activates with a lottery, and the victim Run's
``kubectl describe`` (the real kubectl) and ``kubectl runs explain`` show the ``Preempted`` Event with the seed;
a second reconciler (``--once``) adds no Event; an Event said again is a 409 (already said).

The scenario (real time): runs a, b, c take the three 8-GPU nodes and report an ETA a few seconds ahead; run
``late`` cannot start and reserves for that ETA; when it comes nobody has finished and the activation draws a
victim by lottery. Events are read back through both APIs: events.k8s.io/v1 (as written) and core/v1 (what
kubectl describe and explain read: ``regarding`` is ``involvedObject`` there, ``note`` is ``message``).

The reconciler writes to every object it sees: this module uses its own control plane."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from urllib.parse import quote

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
    run,
    wait_for,
)

NS = "ev"
FLAVOR = "H100"
# --eta-grace 0s: the victims here overran the ETA they reported (round 3 would otherwise wait out the grace)
WATCH = ("--manage-leases", "--no-leader-elect", "--metrics-addr", "0", "--eta-grace", "0s")


@pytest.fixture(scope="module")
def cp():
    with control_plane() as plane:
        yield plane


def kubectl(cp, *args: str) -> subprocess.CompletedProcess:
    """The real kubectl (not the plugin), with the test's kubeconfig."""
    binary = "/usr/bin/kubectl" if os.access("/usr/bin/kubectl", os.X_OK) else shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed")
    return subprocess.run([binary, "--kubeconfig", cp.admin_kubeconfig, *args], capture_output=True, text=True,
                          timeout=60)


def plugin(cp, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig), timeout=120, cwd=str(ROOT))


def events(cp) -> list[dict]:
    """The namespace's Events as written (events.k8s.io/v1)."""
    code, body = cp.request("GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
    assert code == 200, body
    return body["items"]


def core_events(cp, kind: str, name: str, uid: str) -> list[dict]:
    """The Events kubectl describe finds: core/v1, selected by involvedObject kind, name and uid."""
    selector = quote(f"involvedObject.kind={kind},involvedObject.name={name},involvedObject.uid={uid}")
    code, body = cp.request("GET", f"/api/v1/namespaces/{NS}/events?fieldSelector={selector}")
    assert code == 200, body
    return body["items"]


def items(cp, plural: str) -> list[dict]:
    for _ in range(50):  # a CRD just established answers 429 "storage is (re)initializing" for a moment
        code, body = cp.request("GET", f"{API}/namespaces/{NS}/{plural}")
        if code != 429:
            break
        time.sleep(0.2)
    assert code == 200, body
    return body["items"]


def test_a_preemption_is_an_event_on_the_victim_run_that_describe_and_explain_show_once(cp, tmp_path):
    create(cp, [node("n1", flavor=FLAVOR), node("n2", flavor=FLAVOR), node("m1", flavor=FLAVOR, domain="d2"),
                budget("b", NS, owner="org:ev", envelopes=[("main", FLAVOR, 64)])])
    create(cp, [run(name, NS, flavor=FLAVOR, gpus=8, group=8) for name in ("a", "b", "c")])
    keeper = Reconciler(cp, *WATCH, log_dir=tmp_path, name="keeper")
    keeper.proc.stdout.close()
    try:
        wait_for("three runs admitted", lambda: len([x for x in items(cp, "gpuleases")
                                                     if not x.get("status", {}).get("closed")]) == 3, timeout=30)
        eta = now() + timedelta(seconds=15)
        for name in ("a", "b", "c"):
            code, body = cp.request("PATCH", f"{API}/namespaces/{NS}/runs/{name}/status",
                                    {"status": {"eta": {"estimatedCompletion": iso(eta), "source": "workload"}}},
                                    content_type="application/merge-patch+json")
            assert code == 200, body
        create(cp, [run("late", NS, flavor=FLAVOR, gpus=8, group=8)])

        def activated() -> dict | None:
            found = [r for r in items(cp, "reservations") if r["spec"]["runRef"]["name"] == "late"]
            return found[0] if found and found[0].get("status", {}).get("state") == "Activated" else None

        reservation, _ = wait_for("late's Reservation to activate", activated, timeout=60, every=0.2)
        activation = reservation["status"]["activation"]
        seed = activation["seed"]
        (action,) = activation["actions"]
        assert action["kind"] == "Lottery"
        victim = action["run"].split("/")[1]
        victim_lease = action["lease"].split("/")[1]
        wait_for("late admitted", lambda: [x for x in items(cp, "gpuleases") if x["spec"]["runRef"]["name"] == "late"
                                           and not x.get("status", {}).get("closed")], timeout=30, every=0.2)
        # the victim gets no Reservation of its own within its victim protection (round 3): wait for its record
        wait_for(f"{victim}'s preemption record", lambda: [r for r in items(cp, "runs") if r["metadata"]["name"] == victim
                                                           and r.get("status", {}).get("preemptions")],
                 timeout=30, every=0.2)

        def preempted() -> list[dict]:
            return [e for e in events(cp) if e["reason"] == "Preempted" and e["regarding"]["name"] == victim]

        (event,), _ = wait_for("the Preempted event", preempted, timeout=30, every=0.2)
    finally:
        stopped = keeper.stop()
    assert stopped == 0, "\n".join(keeper.lines()[-30:])

    # As written: on the victim Run (its uid), naming the Reservation, the seed and the GPUs.
    run_uid = get(cp, f"{API}/namespaces/{NS}/runs/{victim}")["metadata"]["uid"]
    assert event["regarding"] == {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "namespace": NS,
                                  "name": victim, "uid": run_uid}
    assert event["type"] == "Warning" and event["action"] == "RandomPreempt"
    assert event["related"]["kind"] == "Reservation" and event["related"]["name"] == reservation["metadata"]["name"]
    assert f"by reservation {NS}/late-r1 with seed {seed}" in event["note"]
    assert f"{NS}/{victim_lease} (group 0, 8 Active GPUs: " in event["note"]
    assert event["reportingController"] == "jobtree.dev/kubectl-runs-reconciler" and event["reportingInstance"]
    said = events(cp)
    reasons = sorted((e["regarding"]["kind"], e["reason"]) for e in said)
    for expected in [("GPULease", "Minted"), ("GPULease", "RandomPreempt"), ("Reservation", "Activated"),
                     ("Reservation", "ReservationCreated"), ("Run", "Admitted"), ("Run", "Preempted"),
                     ("Run", "ReservationActivated")]:
        assert expected in reasons, (expected, reasons)
    assert all(e["regarding"].get("uid") for e in said), "every Event names its object's uid"

    # Through core/v1, as kubectl describe selects them: regarding -> involvedObject, note -> message.
    (core,) = [e for e in core_events(cp, "Run", victim, run_uid) if e["reason"] == "Preempted"]
    assert core["message"] == event["note"] and core["involvedObject"]["uid"] == run_uid

    described = kubectl(cp, "describe", "run", victim, "-n", NS)
    print(f"\n$ kubectl describe run {victim} -n {NS}\n{described.stdout}{described.stderr}")
    assert described.returncode == 0, described.stderr
    section = described.stdout.split("Events:", 1)[1]
    assert "Preempted" in section and seed in section and "<none>" not in section

    explained = plugin(cp, "explain", victim, "-n", NS)
    print(f"$ kubectl runs explain {victim} -n {NS}\n{explained.stdout}{explained.stderr}")
    assert explained.returncode == 0, explained.stderr
    assert "Preempted" in explained.stdout.split("Events:", 1)[1] and seed in explained.stdout
    data = json.loads(plugin(cp, "explain", victim, "-n", NS, "-o", "json").stdout)
    assert [e["message"] for e in data["events"] if e["reason"] == "Preempted"] == [event["note"]]

    # A second reconciler: nothing left to decide, nothing said again.
    again = subprocess.run([sys.executable, "-m", "kubectl_runs", "reconcile", "--once", "--manage-leases"],
                           capture_output=True, text=True, env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig),
                           timeout=120, cwd=str(ROOT))
    assert again.returncode == 0, again.stderr[-3000:]
    after = events(cp)
    print(f"events: {len(said)} after the watch, {len(after)} after a second --once")
    assert sorted(e["metadata"]["name"] for e in after) == sorted(e["metadata"]["name"] for e in said)


def test_an_event_said_again_is_already_said(cp):
    """The same decision reported twice (a retried write, a second replica): the second POST is a 409 and the
    applier counts it ``exists``; one Event is stored."""
    from kubectl_runs.reconciler.actions import ReportEvent
    from kubectl_runs.reconciler.apply import Applier
    from kubectl_runs.reconciler.loop import make_api_factory
    from kubectl_runs.sources import Source

    cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    create(cp, [run("twice", NS, flavor=FLAVOR, gpus=8)])
    uid = get(cp, f"{API}/namespaces/{NS}/runs/twice")["metadata"]["uid"]
    applier = Applier(make_api_factory(Source(kubeconfig=cp.admin_kubeconfig))(), None, log=lambda *a, **k: None,
                      instance="test")
    event = ReportEvent(kind="Run", namespace=NS, name="twice", uid=uid, event="twice.0123456789abcdef",
                        reason="Admitted", verb="Admit", note="admitted: 8 GPUs")
    at = now()
    assert [applier.apply(event, at).outcome for _ in range(2)] == ["ok", "exists"]
    assert len([e for e in events(cp) if e["metadata"]["name"] == "twice.0123456789abcdef"]) == 1
    assert [e["reason"] for e in core_events(cp, "Run", "twice", uid)] == ["Admitted"]
