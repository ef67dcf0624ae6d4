"""Preemption that helps (issue 25), on a real API server: examples/fleet.yaml loaded as it is, and one pass of
``kubectl runs reconcile --once --manage-leases --at <pretrain-32-r1's earliestStart>``.

Two outcomes are acceptable for rai-sys/pretrain-32-r1 (gpu-b-04 is cordoned, gpu-a-04 out of service, the
rest is full and split across two fabric domains): **it starts** — the activation's victims free slots where
pretrain-32's two 16-GPU groups place, and pretrain-32 holds its 32 GPUs after that same pass — or **it takes
nothing** — the Reservation is Failed and no lease names it. Before round 3 it took 32 GPUs by count and
pretrain-32 still could not start. With the example fleet as it is, the first happens.

A Reservation an admin writes by hand without the approval annotation (rai-eval/intruder-r1, due at the same
instant and first in name order) is Failed ``NotAuthorized`` and takes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fleet import read_objects, upload
from reconciler_harness import API, ROOT, control_plane

AT = "2025-11-22T00:00:00Z"
TAKING = ("RandomPreempt", "ReclaimUnfunded", "DropSpare", "Shrink")


@pytest.fixture(scope="module")
def cp():
    with control_plane() as plane:
        upload(plane, read_objects(str(ROOT / "examples" / "fleet.yaml")))
        upload(plane, [
            {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run",
             "metadata": {"name": "intruder", "namespace": "rai-eval"},
             "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": 8}, "locality": {"groupGPUs": 8}}},
            {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Reservation",
             "metadata": {"name": "intruder-r1", "namespace": "rai-eval"},  # written by hand: no mark
             "spec": {"runRef": {"namespace": "rai-eval", "name": "intruder"}, "scope": {"flavor": "H100-80GB"},
                      "earliestStart": AT}},
        ])
        yield plane


def plugin(cp, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig), timeout=180, cwd=str(ROOT))


def every(cp, plural: str) -> list[dict]:
    code, body = cp.request("GET", f"/apis/jobtree.dev/v1alpha1/{plural}")
    assert code == 200, body
    return body["items"]


def reservation(cp, namespace: str, name: str) -> dict:
    code, body = cp.request("GET", f"{API}/namespaces/{namespace}/reservations/{name}")
    assert code == 200, body
    return body


def open_gpus(leases: list[dict], run_key: str) -> int:
    return sum(len(x["spec"]["slice"]["slots"]) for x in leases
               if f"{x['spec']['runRef']['namespace']}/{x['spec']['runRef']['name']}" == run_key
               and x["spec"]["slice"]["role"] == "Active" and not x.get("status", {}).get("closed"))


def taken_by(leases: list[dict], reservation_key: str, activation: dict | None) -> list[str]:
    named = {a["lease"] for a in (activation or {}).get("actions", [])}
    return sorted(f"{x['metadata']['namespace']}/{x['metadata']['name']}" for x in leases
                  if x.get("status", {}).get("closureReason") in TAKING
                  and (x["status"].get("preemption", {}).get("reservation") == reservation_key
                       or f"{x['metadata']['namespace']}/{x['metadata']['name']}" in named))


def test_one_pass_at_earliest_start_either_starts_pretrain_32_or_takes_nothing(cp):
    before = every(cp, "gpuleases")
    done = plugin(cp, "reconcile", "--once", "--manage-leases", "--at", AT)
    assert done.returncode == 0, done.stderr[-3000:]
    leases = every(cp, "gpuleases")
    rsv = reservation(cp, "rai-sys", "pretrain-32-r1")
    state = rsv["status"]["state"]
    activation = rsv["status"].get("activation")
    taken = taken_by(leases, "rai-sys/pretrain-32-r1", activation)
    starts = state == "Activated" and open_gpus(leases, "rai-sys/pretrain-32") == 32
    takes_nothing = state == "Failed" and taken == []
    assert starts or takes_nothing, (state, rsv["status"].get("reason"), taken)
    # with the example fleet as it is, the placement-aware activation starts it
    assert starts, rsv["status"]
    assert activation["rule"] == "placement" and taken
    # no victim stood on the cordoned or out-of-service node: those GPUs could not have started it
    slots_of = {f"{x['metadata']['namespace']}/{x['metadata']['name']}": x["spec"]["slice"]["slots"] for x in before}
    assert not [k for k in taken if any(s.split("#")[0] in ("gpu-b-04", "gpu-a-04") for s in slots_of[k])]
    verified = plugin(cp, "seeds", "verify", "-A")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # the status that pass wrote describes the fleet after its own lease writes (before round 3 it described the
    # fleet before them until the next pass): every Budget's envelopes equal `budgets usage` at the same instant,
    # and pretrain-32's phase is Running
    usage = plugin(cp, "budgets", "usage", "-A", "-o", "json", "--at", AT)
    assert usage.returncode == 0, usage.stderr
    want = {(e["namespace"], e["budget"], e["envelope"]): (e["usedGPUs"], e["headroomGPUs"], e["unfundedGPUs"])
            for e in json.loads(usage.stdout)["envelopes"]}
    have = {(b["metadata"]["namespace"], b["metadata"]["name"], e["name"]): (e["usedGPUs"], e["headroomGPUs"],
                                                                             e["unfundedGPUs"])
            for b in every(cp, "budgets") for e in b.get("status", {}).get("envelopes", [])}
    assert have == want
    code, pretrain = cp.request("GET", f"{API}/namespaces/rai-sys/runs/pretrain-32")
    assert code == 200 and pretrain["status"]["phase"] == "Running", pretrain.get("status")


def test_a_hand_made_reservation_without_the_mark_is_failed_and_takes_nothing(cp):
    rsv = reservation(cp, "rai-eval", "intruder-r1")  # the pass of the test above saw it, due at the same instant
    assert (rsv["status"]["state"], rsv["status"]["reason"]) == ("Failed", "NotAuthorized")
    assert "activation" not in rsv["status"]
    assert taken_by(every(cp, "gpuleases"), "rai-eval/intruder-r1", None) == []
    # the run it was for is queued like any other: the reconciler made its own Reservation for it
    mine = [r for r in every(cp, "reservations") if r["spec"]["runRef"] == {"namespace": "rai-eval", "name": "intruder"}
            and r["metadata"]["name"] != "intruder-r1"]
    assert [r["metadata"]["labels"]["app.kubernetes.io/managed-by"] for r in mine] in ([], ["kubectl-runs-reconciler"])
