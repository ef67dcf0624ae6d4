"""``kubectl runs explain pod`` on a hand-built fleet: kube-scheduler's verdict (from the pod's condition, or its
newest FailedScheduling Event) beside ours, the deficit, the nearest nodes and remedies that name objects; the JSON
fits its schema. The same report is judged against the real kube-scheduler in test_pod_verdicts.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import run_cli
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[2]
NODES = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {pool: train}},
   status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: a2, labels: {pool: train}},
   status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: t1, labels: {pool: train}},
   spec: {taints: [{key: dedicated, value: infer, effect: NoSchedule}]},
   status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: c1, labels: {pool: serve}}, spec: {unschedulable: true},
   status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: hold-a1, namespace: infer},
   spec: {nodeName: a1, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "4"}}}]}, status: {phase: Running}}
- {apiVersion: v1, kind: Pod, metadata: {name: hold-a2, namespace: infer},
   spec: {nodeName: a2, containers: [{name: c, resources: {requests: {nvidia.com/gpu: "5"}}}]}, status: {phase: Running}}
"""
VERDICT = ("0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}, 1 node(s) were "
           "unschedulable, 2 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Preemption is not "
           "helpful for scheduling.")


def fleet(tmp_path, gpus=8, message=VERDICT, event=None, extra=""):
    pod = (f"- {{apiVersion: v1, kind: Pod, metadata: {{name: train-0, namespace: research, uid: u1}},\n"
           f"   spec: {{containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: '{gpus}'}}}}}}]{extra}}},\n"
           f"   status: {{phase: Pending, conditions: [{{type: PodScheduled, status: 'False', reason: Unschedulable,"
           f" message: '{message}'}}]}}}}\n")
    if event:
        pod += (f"- {{apiVersion: v1, kind: Event, metadata: {{name: train-0.1, namespace: research}}, reason: "
                f"FailedScheduling, involvedObject: {{kind: Pod, name: train-0, namespace: research, uid: u1}}, "
                f"message: '{event}', lastTimestamp: '2025-11-20T12:00:00Z'}}\n")
    path = tmp_path / "fleet.yaml"
    path.write_text(NODES + pod)
    return str(path)


def explain(capsys, path, *more):
    code, out, err = run_cli(capsys, "--snapshot", path, "explain", "pod", "research/train-0", "-o", "json", *more)
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_the_schedulers_verdict_beside_ours_and_what_would_fix_it(capsys, tmp_path):
    report = explain(capsys, fleet(tmp_path))
    assert report["agrees"] is True and report["reason"] == "InsufficientGPU"  # 4 + 3 free: not 8 even together
    assert report["deficit"] == {"asked": 8, "freeOnEligible": 7, "largestFreeBlock": 4, "largestNode": 8,
                                 "kind": "NotEnoughAnywhere"}
    assert [n["node"] for n in report["nodes"]] == ["a1", "a2", "t1", "c1"]  # nearest first
    assert report["nodes"][0]["holders"] == ["infer/hold-a1"]
    remedies = {r["kind"]: r["message"] for r in report["remedies"]}
    assert remedies == {"FreeGPUs": "a1 has 4 of 8 GPUs free: 4 more held by infer/hold-a1",
                        "Uncordon": "node c1 is cordoned; uncordoned it would take the pod (kubectl uncordon c1)",
                        "Tolerate": "node t1 would take the pod if it tolerated taint {dedicated: infer}"}
    Draft202012Validator(json.loads((ROOT / "docs" / "schemas" / "explain-pod.schema.json").read_text())).validate(
        report)


def test_a_disagreement_is_said_and_the_schedulers_message_is_kept(capsys, tmp_path):
    stale = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    report = explain(capsys, fleet(tmp_path, event=stale))
    assert report["scheduler"] == {"message": stale, "source": "FailedScheduling Event", "nodes": 4}
    assert report["agrees"] is False
    assert {r["reason"]: (r["scheduler"], r["ours"]) for r in report["reasons"]}[
        "Insufficient nvidia.com/gpu"] == (4, 2)
    _code, out, _err = run_cli(capsys, "--snapshot", fleet(tmp_path, event=stale), "explain", "pod",
                              "research/train-0")
    assert "Scheduler:  " + stale in out and "differ" in out


@pytest.mark.parametrize(("extra", "kind"), [
    (", nodeSelector: {pool: serve}", "Uncordon"),  # only c1 is labelled pool=serve, and it is cordoned
    (", nodeSelector: {pool: gold}", "MatchSelector"),  # no node is
])
def test_remedies_name_the_filter_to_lift(capsys, tmp_path, extra, kind):
    report = explain(capsys, fleet(tmp_path, gpus=2, message="x", extra=extra))
    assert kind in {r["kind"] for r in report["remedies"]}
    assert report["agrees"] is None  # "x" is not a filter verdict: nothing to compare


def test_a_pod_that_is_not_there(capsys, tmp_path):
    code, out, err = run_cli(capsys, "--snapshot", fleet(tmp_path), "explain", "pod", "research/nope")
    assert (code, out) == (1, "") and err == "error: pod research/nope not found\n"
