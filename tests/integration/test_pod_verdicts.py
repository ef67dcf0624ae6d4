"""Our recomputation of kube-scheduler's filters (kubectl_runs.pods.fit) judged by the real kube-scheduler on the
test API server (issue 29): for each planted pending pod — not enough GPUs anywhere, enough but fragmented, an
untolerated taint, a selector and a required affinity no node matches, a cordoned node, a CPU shortage — our
per-reason node counts must equal the counts in the scheduler's own FailedScheduling message, and after a
planted remedy (a pod holding GPUs deleted) the node the scheduler binds the pod to must be one we said fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgspec
import pytest
from reconciler_harness import control_plane, run_plugin_json
from scheduler_harness import (
    failed_scheduling,
    gpu_node,
    gpu_pod,
    kube_scheduler,
    pod_scheduled,
    request,
    verdict_counts,
    wait_for,
)

from kubectl_runs.model import Node
from kubectl_runs.pods.fit import fleet_fit, histogram, verdict
from kubectl_runs.pods.model import Pod
from kubectl_runs.pods.reasons import reason

NS = "research"
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
GOLD = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gold"]}]}]}}}
# name -> (GPUs, more of the pod's spec, our reason code): each stays pending on the planted nodes
PENDING = {
    "fragmented": (8, {"nodeSelector": {"pool": "train"}}, "Fragmented"),  # 6 + 4 free in the pool, never 8 on one
    "huge": (16, {}, "ExceedsNodeCapacity"),  # more than any node has
    "gold": (1, {"affinity": GOLD}, "NodeSelector"),  # no node is labelled pool=gold
    "serve-cpu": (1, {"nodeSelector": {"pool": "serve"}, "containers": [{
        "name": "main", "image": "registry.example/serve:1",
        "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "32"}, "limits": {"nvidia.com/gpu": "1"}}}]},
                  "InsufficientResources"),
}


def _records(cp, path: str, kind: str, cls):
    items = request(cp, "GET", path)["items"]
    return [msgspec.json.decode(json.dumps({**item, "kind": kind}), type=cls) for item in items]


def _pod_and_fits(cp, name: str):
    nodes = _records(cp, "/api/v1/nodes", "Node", Node)
    pods = _records(cp, "/api/v1/pods", "Pod", Pod)
    mine = next(p for p in pods if p.metadata.name == name)
    others = [p for p in pods if p is not mine]  # once bound, the pod itself must not count against its node
    return mine, fleet_fit(mine.spec, nodes, others)


def _ours(cp, name: str):
    return _pod_and_fits(cp, name)[1]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    with control_plane(NS) as cp, kube_scheduler(cp, tmp_path_factory.mktemp("scheduler")) as log:
        gpu_node(cp, "a1", gpus=8, labels={"pool": "train"})
        gpu_node(cp, "a2", gpus=8, labels={"pool": "train"})
        gpu_node(cp, "t1", gpus=8, labels={"pool": "train"}, taints=[TAINT])
        gpu_node(cp, "c1", gpus=8, labels={"pool": "train"}, unschedulable=True)
        gpu_node(cp, "s1", gpus=8, labels={"pool": "serve"}, cpu="16")
        for holder, where, gpus in (("hold-a1", "a1", 2), ("hold-a2", "a2", 4)):
            request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod(holder, NS, gpus=gpus, nodeName=where))
        for name, (gpus, more, _code) in PENDING.items():
            request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod(name, NS, gpus=gpus, **more))
        try:
            for name in PENDING:
                wait_for(f"the scheduler's verdict on {name}", lambda n=name: failed_scheduling(cp, NS, n),
                         timeout=90)
        except AssertionError:
            raise AssertionError(f"kube-scheduler did not get there; its log ends:\n{log.read_text()[-3000:]}") \
                from None
        cp.scheduler_log = log
        yield cp


@pytest.mark.parametrize("name", sorted(PENDING))
def test_our_node_counts_per_reason_are_the_schedulers(planted, name):
    message = failed_scheduling(planted, NS, name)
    nodes, theirs = verdict_counts(message)
    fits = _ours(planted, name)
    assert (len(fits), histogram(fits)) == (nodes, theirs), message
    assert message.startswith(verdict(fits)), message  # the same text, up to the preemption part


@pytest.mark.parametrize("name", sorted(PENDING))
def test_one_reason_code_per_pod(planted, name):
    assert reason(*_pod_and_fits(planted, name)).code == PENDING[name][2]


def test_pending_live_lists_each_pending_pod_with_its_reason(planted):
    """`kubectl runs pending` against the API server (a separate process, the admin's kubeconfig): one row per
    planted pending pod, the same reason as above, and the holders' GPUs in the headline."""
    report = run_plugin_json(planted, "pending", "-o", "json")
    rows = {r["name"]: (r["kind"], r["reason"], r["admittedBy"]) for r in report["rows"]}
    assert rows == {name: ("Pod", code, "kube-scheduler") for name, (_g, _m, code) in PENDING.items()}
    assert report["gpus"]["total"] == 40 and report["gpus"]["heldByPodsOutsideLeases"] == 6


@pytest.mark.parametrize("name", sorted(PENDING))
def test_explain_pod_live_agrees_with_the_scheduler(planted, name):
    """`kubectl runs explain pod` live: the scheduler's own message (from its FailedScheduling Event), our counts
    equal to its counts, the same reason code; for the fragmented pod, a remedy naming a pod that holds GPUs."""
    report = run_plugin_json(planted, "explain", "pod", f"{NS}/{name}", "-o", "json")
    assert report["scheduler"]["message"] == failed_scheduling(planted, NS, name)
    assert report["scheduler"]["source"] == "FailedScheduling Event"
    assert report["agrees"] is True, report["reasons"]
    assert report["reason"] == PENDING[name][2]
    if name == "fragmented":
        remedy = next(r["message"] for r in report["remedies"] if r["kind"] == "FreeGPUs")
        assert "held by research/hold-a" in remedy


def test_a_saved_snapshot_gives_the_same_pending_report(planted, tmp_path):
    """`snapshot save` keeps the GPU pods (lean), their FailedScheduling Events, and nothing else of the pods;
    `pending` on the file equals `pending` live at the same instant."""
    path = tmp_path / "fleet.json"
    at = "2030-01-01T00:00:00Z"
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "snapshot", "save", "-f", str(path), "--at", at],
                          capture_output=True, text=True, env=dict(os.environ, KUBECONFIG=planted.admin_kubeconfig))
    assert done.returncode == 0, done.stderr
    items = json.loads(path.read_text())["items"]
    pods = sorted(i["metadata"]["name"] for i in items if i["kind"] == "Pod")
    assert pods == sorted(["hold-a1", "hold-a2", *PENDING])
    events = {i["involvedObject"]["name"] for i in items if i["kind"] == "Event"}
    assert set(PENDING) <= events and all(i["reason"] == "FailedScheduling" for i in items if i["kind"] == "Event")
    assert "containerStatuses" not in json.dumps(items)  # lean: only what kubectl-runs reads
    live = run_plugin_json(planted, "pending", "-o", "json", "--at", at)
    offline = run_plugin_json(planted, "pending", "-o", "json", "--at", at, "--snapshot", str(path))
    assert live == offline


def test_fragmentation_is_seen_node_by_node(planted):
    fits = {f.node: f for f in _ours(planted, "fragmented")}
    assert {n: fits[n].free["nvidia.com/gpu"] for n in ("a1", "a2")} == {"a1": 6, "a2": 4}
    assert fits["t1"].filter == "TaintToleration" and fits["c1"].filter == "NodeUnschedulable"
    assert fits["s1"].filter == "NodeAffinity"


def test_after_the_remedy_the_scheduler_binds_where_we_said_it_fits(planted):
    """Deleting the pod that holds 4 GPUs on a2 is the remedy: we say a2 then fits, and the scheduler binds there."""
    request(planted, "DELETE", f"/api/v1/namespaces/{NS}/pods/hold-a2?gracePeriodSeconds=0")
    wait_for("hold-a2 gone", lambda: planted.request("GET", f"/api/v1/namespaces/{NS}/pods/hold-a2")[0] == 404)
    said = {f.node for f in _ours(planted, "fragmented") if f.fits}
    assert said == {"a2"}
    wait_for("fragmented bound", lambda: (pod_scheduled(planted, NS, "fragmented") or {}).get("status") == "True",
             timeout=120)
    pod = request(planted, "GET", f"/api/v1/namespaces/{NS}/pods/fragmented")
    assert pod["spec"]["nodeName"] in said
