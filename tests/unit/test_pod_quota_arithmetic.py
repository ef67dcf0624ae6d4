"""ResourceQuota refusals (kubectl_runs.pods.quota) and who counts a pod (a Run's, a Kueue Workload's) on hand-built
snapshots: the API server's refusal message read back, the amount to raise judged against the quota as it is now
(its status.used, else the pods counted with LimitRange defaults), ``pending``'s QuotaExceeded row and
``explain pod``'s RaiseQuota remedy; the same against the real API server: tests/integration/test_pod_quota.py."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from builders import run_cli
from jsonschema import Draft202012Validator

from kubectl_runs.corev1 import PodSpec
from kubectl_runs.pods.model import Event, LimitRange, Pod
from kubectl_runs.pods.quota import effective_requests, parse, quota_usage, rejections

ROOT = Path(__file__).resolve().parents[2]
AT = "2025-11-20T12:00:00Z"
REFUSAL = ('Error creating: pods "train-x7k2p" is forbidden: exceeded quota: gpu-quota, requested: '
           'requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=8')
FLEET = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1}, status: {allocatable: {nvidia.com/gpu: "8", cpu: "64"}}}
- {apiVersion: v1, kind: Node, metadata: {name: a2}, status: {allocatable: {nvidia.com/gpu: "8", cpu: "64"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: holder, namespace: research, creationTimestamp: "2025-11-20T09:00:00Z"}
  spec: {nodeName: a1, containers: [{name: c, resources: {limits: {nvidia.com/gpu: "4"},
                                                           requests: {nvidia.com/gpu: "4"}}}]}
  status: {phase: Running}
- apiVersion: v1
  kind: ResourceQuota
  metadata: {name: gpu-quota, namespace: research}
  spec: {hard: {requests.nvidia.com/gpu: "8"}}
  status: {hard: {requests.nvidia.com/gpu: "8"}, used: {requests.nvidia.com/gpu: "%(used)s"}}
- apiVersion: v1
  kind: Event
  metadata: {name: train.1, namespace: research}
  involvedObject: {apiVersion: batch/v1, kind: Job, name: train, namespace: research, uid: j1}
  reason: FailedCreate
  type: Warning
  count: 3
  lastTimestamp: "2025-11-20T10:00:00Z"
  message: '%(message)s'
%(more)s"""


def fleet(tmp_path, used="4", message=REFUSAL, more=""):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET % {"used": used, "message": message, "more": more})
    return str(path)


def cli_json(capsys, path, *args):
    code, out, err = run_cli(capsys, "--snapshot", path, "--at", AT, *args, "-o", "json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_the_api_servers_refusal_is_read_back():
    assert parse(REFUSAL) == ("train-x7k2p", "gpu-quota", {"requests.nvidia.com/gpu": "8"},
                              {"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "8"})
    several = REFUSAL.replace("requested: requests.nvidia.com/gpu=8", "requested: requests.cpu=500m,"
                              "requests.nvidia.com/gpu=8")
    assert parse(several)[2] == {"requests.cpu": "500m", "requests.nvidia.com/gpu": "8"}
    assert parse("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.") is None


def test_pending_shows_the_refused_job_and_by_how_much_to_raise_the_quota(capsys, tmp_path):
    report = cli_json(capsys, fleet(tmp_path), "pending")
    (row,) = report["rows"]
    assert (row["kind"], row["name"], row["pods"], row["gpus"], row["admittedBy"], row["reason"]) == (
        "Job", "train", 0, 8, "ResourceQuota", "QuotaExceeded")
    assert row["message"] == ("ResourceQuota research/gpu-quota refuses its pods (requests.nvidia.com/gpu 4 of 8 "
                              "used, 8 asked): raise requests.nvidia.com/gpu by 4")
    assert row["waitingSince"] == "2025-11-20T10:00:00Z"


def test_the_quota_as_it_is_now_decides_the_amount(capsys, tmp_path):
    """The holder finished since: the quota has room now, the Job controller retries."""
    (row,) = cli_json(capsys, fleet(tmp_path, used="0"), "pending")["rows"]
    assert row["message"].endswith("it has room now: the Job controller retries")


def test_a_pod_created_after_the_refusal_makes_it_history(capsys, tmp_path):
    later = ("- {apiVersion: v1, kind: Pod, metadata: {name: train-abcde, namespace: research, creationTimestamp: "
             "'2025-11-20T11:00:00Z', ownerReferences: [{kind: Job, name: train, uid: j1, controller: true}]},\n"
             "   spec: {nodeName: a2, containers: [{name: c, resources: {requests: {nvidia.com/gpu: '8'}}}]},"
             " status: {phase: Running}}\n")
    assert cli_json(capsys, fleet(tmp_path, more=later), "pending")["rows"] == []


def test_explain_by_the_jobs_name_names_the_quota_and_the_amount(capsys, tmp_path):
    report = cli_json(capsys, fleet(tmp_path), "explain", "pod", "research/train")
    assert (report["pod"], report["workload"], report["phase"], report["reason"], report["gpus"]) == (
        "research/train-x7k2p", "Job/train", "NotCreated", "QuotaExceeded", 8)
    assert report["remedies"] == [{
        "kind": "RaiseQuota", "object": "research/gpu-quota", "amount": "requests.nvidia.com/gpu=4",
        "message": "raise ResourceQuota research/gpu-quota: requests.nvidia.com/gpu from 8 to 12 (4 used, 8 asked "
                   "by one pod)"}]
    assert report["quota"] == [{"quota": "research/gpu-quota", "resource": "requests.nvidia.com/gpu", "hard": "8",
                                "used": "4", "requested": "8", "raiseBy": "4", "event": REFUSAL}]
    Draft202012Validator(json.loads((ROOT / "docs" / "schemas" / "explain-pod.schema.json").read_text())).validate(
        report)
    code, out, _err = run_cli(capsys, "--snapshot", fleet(tmp_path), "--at", AT, "explain", "pod", "research/train")
    assert code == 0 and "RaiseQuota" in out and "research/gpu-quota" in out


def test_a_missing_used_is_counted_from_the_pods_with_limitrange_defaults():
    """No quota controller has counted ``requests.cpu`` yet: the pods are counted, a container without a cpu
    request taking the LimitRange's defaultRequest, one with only a limit taking its limit."""
    ranges = (msgspec.convert({"kind": "LimitRange", "metadata": {"name": "d", "namespace": "ns"}, "spec": {
        "limits": [{"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "500m"}}]}},
        LimitRange),)
    pods = tuple(msgspec.convert({"kind": "Pod", "metadata": {"name": n, "namespace": "ns"}, "spec": {
        "containers": [{"name": "c", "resources": r}]}, "status": {"phase": phase}}, Pod) for n, r, phase in (
        ("none", {}, "Running"), ("limit", {"limits": {"cpu": "3"}}, "Pending"),
        ("done", {"requests": {"cpu": "9"}}, "Succeeded")))
    assert quota_usage("ns", pods, ranges) == {"pods": 2, "requests.cpu": 3500, "cpu": 3500, "limits.cpu": 5000}
    assert effective_requests(PodSpec(), ({}, {})) == ({}, {})


@pytest.mark.parametrize("message", ["Error creating: pods \"x\" is forbidden: node(s) were unschedulable",
                                     "Error creating: something else"])
def test_other_failed_creates_are_not_quota_refusals(message):
    event = msgspec.convert({"kind": "Event", "metadata": {"name": "e", "namespace": "ns"},
                             "involvedObject": {"kind": "Job", "name": "j"}, "reason": "FailedCreate",
                             "message": message}, Event)
    assert rejections((event,)) == ()


RUN_AND_KUEUE = """\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: k1, labels: {gpu.flavor: H100, fabric.domain: d}},
   status: {allocatable: {nvidia.com/gpu: "4", cpu: "64", pods: "110"}}}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: Workload
  metadata: {name: pod-gated-abc, namespace: research,
             ownerReferences: [{apiVersion: v1, kind: Pod, name: gated, uid: u-gated, controller: true}]}
  spec:
    queueName: gpu
    podSets: [{name: main, count: 1, template: {spec: {containers: [{name: main, image: x,
              resources: {requests: {nvidia.com/gpu: "1"}}}]}}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: gated, namespace: research, uid: u-gated}
  spec: {schedulingGates: [{name: kueue.x-k8s.io/admission}],
         containers: [{name: main, resources: {requests: {nvidia.com/gpu: "1"}}}]}
- apiVersion: jobtree.dev/v1alpha1
  kind: Run
  metadata: {name: train-run, namespace: research}
  spec: {resources: {gpuType: H100, totalGPUs: 8}}
- apiVersion: v1
  kind: Pod
  metadata: {name: train-run-0, namespace: research, labels: {jobtree.dev/run: train-run}}
  spec: {containers: [{name: main, resources: {requests: {nvidia.com/gpu: "8"}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: other-run-0, namespace: research,
             ownerReferences: [{apiVersion: jobtree.dev/v1alpha1, kind: Run, name: other-run}]}
  spec: {containers: [{name: main, resources: {requests: {nvidia.com/gpu: "8"}}}]}
"""


def test_a_runs_pods_and_a_kueue_gated_pod_are_counted_once(capsys, tmp_path):
    """train-run's pod is in the Run's row; other-run (no such Run waits) gets a row of kind Run with its pod's
    reason; the gated pod is in its Workload's row only."""
    path = tmp_path / "fleet.yaml"
    path.write_text(RUN_AND_KUEUE)
    rows = {(r["kind"], r["name"]): r for r in cli_json(capsys, str(path), "pending")["rows"]}
    assert set(rows) == {("Run", "train-run"), ("Run", "other-run"), ("Workload", "pod-gated-abc")}
    assert (rows[("Run", "train-run")]["pods"], rows[("Run", "train-run")]["admittedBy"]) == (1, "jobtree")
    assert (rows[("Run", "other-run")]["pods"], rows[("Run", "other-run")]["reason"],
            rows[("Run", "other-run")]["admittedBy"]) == (1, "ExceedsNodeCapacity", "kube-scheduler")
    assert rows[("Workload", "pod-gated-abc")]["pods"] == 1
    report = cli_json(capsys, str(path), "explain", "pod", "research/other-run")
    assert (report["pod"], report["workload"]) == ("research/other-run-0", "Run/other-run")
