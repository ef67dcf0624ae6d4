"""``kubectl runs pending`` as a user runs it (through the CLI's error boundary, a snapshot file, a fixed --at):
the example fleet's pending Runs say what `plan` says; a fleet of GPU pods gets one row per workload with its
reason, the headline counts each node's GPUs once, and -n/--flavor narrow the rows, never the arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = "2025-11-20T12:00:00Z"

PODS = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {gpu.flavor: H100, pool: train}},
   status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: a2, labels: {gpu.flavor: H100, pool: train}},
   status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: m1, labels: {gpu.flavor: MI300X}},
   spec: {taints: [{key: amd, effect: NoSchedule}]}, status: {allocatable: {amd.com/gpu: "8", cpu: "64"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: holder, namespace: infer}
  spec: {nodeName: a1, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}
  status: {phase: Running}
- apiVersion: v1
  kind: Pod
  metadata: {name: holder2, namespace: infer}
  spec: {nodeName: a2, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}
  status: {phase: Running}
%s
"""


def replica(i: int, ns: str, owner: str, gpus: int, extra: str = "") -> str:
    return (f"- apiVersion: v1\n  kind: Pod\n  metadata: {{name: {owner}-{i}, namespace: {ns}, "
            f"creationTimestamp: '2025-11-20T0{i}:00:00Z', ownerReferences: [{{kind: Job, name: {owner}, "
            f"controller: true}}]}}\n  spec: {{containers: [{{name: c, resources: {{requests: "
            f"{{nvidia.com/gpu: '{gpus}'}}}}}}]{extra}}}\n  status: {{phase: Pending}}\n")


@pytest.fixture
def pods_fleet(tmp_path):
    pods = "".join([replica(1, "research", "train", 8), replica(2, "research", "train", 8),
                    replica(1, "research", "tiny", 2), replica(1, "serve", "gated", 8,
                                                               ", schedulingGates: [{name: kueue.x-k8s.io/admission}]")])
    path = tmp_path / "pods.yaml"
    path.write_text(PODS % pods)
    return str(path)


def test_a_fleet_of_gpu_pods(capsys, pods_fleet):
    code, out, err = run_cli(capsys, "--snapshot", pods_fleet, "--at", AT, "pending")
    assert (code, err) == (0, "")
    assert out == """\
GPUs: 24 in all; 0 held by leases, 8 by pods outside leases; 16 free, 16 in blocks of 2+
Pending: 3 consumers asking 26 GPUs; Fits 1, Fragmented 1, SchedulingGated 1

KIND  NAMESPACE  NAME   PODS  GPUS  ADMITTED-BY     REASON
Job   research   tiny      1     2  kube-scheduler  Fits
Job   research   train     2    16  kube-scheduler  Fragmented
Job   serve      gated     1     8  Kueue           SchedulingGated

Reasons:
REASON           ROWS  GPUS
Fits                1     2
Fragmented          1    16
SchedulingGated     1     8
"""


def test_json_and_narrowing(capsys, pods_fleet):
    code, out, _err = run_cli(capsys, "--snapshot", pods_fleet, "--at", AT, "pending", "-n", "research", "-o", "json")
    report = json.loads(out)
    assert code == 0 and [r["name"] for r in report["rows"]] == ["tiny", "train"]
    assert report["gpus"] == {"total": 24, "heldByLeases": 0, "heldByPodsOutsideLeases": 8, "free": 16,
                              "freeInLargeEnoughBlocks": 16, "smallestPendingRequest": 2}
    train = report["rows"][1]
    assert train["message"] == "needs 8 GPUs on one node: 8 are free on the nodes it may use, at most 4 on one"
    assert train["waitingSince"] == "2025-11-20T01:00:00Z"
    code, out, _err = run_cli(capsys, "--snapshot", pods_fleet, "--at", AT, "pending", "--flavor", "MI300X",
                              "-o", "json")
    assert json.loads(out)["rows"] == []  # no pod here may use the MI300X nodes


def test_the_example_fleets_pending_runs_say_what_plan_says(capsys):
    code, out, _err = run_cli(capsys, "--snapshot", EXAMPLE, "pending", "-o", "json")
    runs = [r for r in json.loads(out)["rows"] if r["kind"] == "Run"]
    assert code == 0 and runs
    for row in runs:
        _c, plan, _e = run_cli(capsys, "--snapshot", EXAMPLE, "plan", row["name"], "-n", row["namespace"], "-o",
                               "json")
        plan = json.loads(plan)
        assert (row["gpus"], row["reason"], row["message"]) == (
            plan["need"], plan["reasons"][0]["code"], plan["reasons"][0]["message"])


def test_nothing_pending_says_so_on_stderr(capsys, tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text(PODS % "")
    code, out, err = run_cli(capsys, "--snapshot", str(path), "pending")
    assert (code, out, err) == (0, "", "No pending GPU consumers found.\n")


KUEUE_EXAMPLE = str(ROOT / "examples" / "kueue-fleet.yaml")


def test_kueue_workloads_are_rows_and_their_gpus_are_queues_usages_pending(capsys):
    code, out, _err = run_cli(capsys, "--snapshot", KUEUE_EXAMPLE, "pending", "-o", "json")
    rows = json.loads(out)["rows"]
    _c, usage, _e = run_cli(capsys, "--snapshot", KUEUE_EXAMPLE, "queues", "usage", "-o", "json")
    usage = json.loads(usage)
    assert code == 0 and {r["kind"] for r in rows} == {"Workload"}
    assert sum(r["gpus"] for r in rows) == sum(q["pending"] for q in usage["clusterQueues"])
    for row in rows:
        _c, why, _e = run_cli(capsys, "--snapshot", KUEUE_EXAMPLE, "explain", "workload", row["name"], "-n",
                              row["namespace"], "-o", "json")
        assert row["admittedBy"] == "Kueue" and row["message"] in why


def test_a_pod_kueue_admits_is_counted_in_its_workloads_row_only(capsys, tmp_path):
    """Kueue's pod integration: a gated pod, and a Workload that the pod owns. One row (the Workload's), not two."""
    text = (ROOT / "examples" / "kueue-fleet.yaml").read_text()
    pod = ("\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: solo, namespace: team-a, uid: u-solo}\n"
           "spec: {schedulingGates: [{name: kueue.x-k8s.io/admission}], containers: [{name: c, resources: "
           "{requests: {nvidia.com/gpu: '2'}}}]}\n")
    path = tmp_path / "fleet.yaml"
    path.write_text(text + pod)
    _c, out, _e = run_cli(capsys, "--snapshot", str(path), "pending", "-o", "json")
    assert [r["name"] for r in json.loads(out)["rows"] if r["kind"] == "Pod"] == ["solo"]  # no Workload for it yet
    owned = text.replace("name: a-eval-4\n", "name: a-eval-4\n    ownerReferences: [{kind: Pod, name: solo, uid: u-solo}]\n",
                         1)
    assert owned != text
    path.write_text(owned + pod)
    _c, out, _e = run_cli(capsys, "--snapshot", str(path), "pending", "-o", "json")
    names = [(r["kind"], r["name"]) for r in json.loads(out)["rows"]]
    assert ("Pod", "solo") not in names and ("Workload", "a-eval-4") in names
