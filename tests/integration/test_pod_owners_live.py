"""Planted cases of issue 29 beyond test_pod_verdicts.py, judged by the real kube-scheduler on the test API server:

- ``affine``: a required node affinity (matchExpressions, no nodeSelector) that no node matches;
- ``gated``: a pod of Kueue's pod integration, held by the ``kueue.x-k8s.io/admission`` scheduling gate, whose
  Workload (Kueue's real CRD) owns it: ``pending`` shows the Workload, never the pod beside it;
- ``train-run-0``: a Run's pod (labelled ``jobtree.dev/run``) that does not fit: ``pending`` shows the Run, with
  its pod counted in the Run's row, never a second row.

For each pod the scheduler judges, our per-reason node counts equal its FailedScheduling message; after a planted
remedy (a node labelled, the gate lifted as Kueue does on admission, a pod holding GPUs deleted) the node the
scheduler binds the pod to is one we said fits."""

from __future__ import annotations

import json

import msgspec
import pytest
from kueue_fleet import install_crds
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
from kubectl_runs.pods.fit import fleet_fit, histogram
from kubectl_runs.pods.model import Pod
from kubectl_runs.pods.reasons import reason

NS = "research"
NINE = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z9"]}]}]}}}
LABELS = {"gpu.flavor": "H100", "fabric.domain": "nv-a"}
KUEUE_GATE = "kueue.x-k8s.io/admission"


def _records(cp, path: str, kind: str, cls):
    items = request(cp, "GET", path)["items"]
    return [msgspec.json.decode(json.dumps({**item, "kind": kind}), type=cls) for item in items]


def _pod_and_fits(cp, name: str):
    nodes = _records(cp, "/api/v1/nodes", "Node", Node)
    pods = _records(cp, "/api/v1/pods", "Pod", Pod)
    mine = next(p for p in pods if p.metadata.name == name)
    return mine, fleet_fit(mine.spec, nodes, [p for p in pods if p is not mine])


def _bound_where_we_said(cp, name: str, said: set[str]) -> None:
    wait_for(f"{name} bound", lambda: (pod_scheduled(cp, NS, name) or {}).get("status") == "True", timeout=120)
    assert request(cp, "GET", f"/api/v1/namespaces/{NS}/pods/{name}")["spec"]["nodeName"] in said


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    with control_plane(NS) as cp, kube_scheduler(cp, tmp_path_factory.mktemp("scheduler")) as log:
        install_crds(cp)
        gpu_node(cp, "g1", gpus=8, labels={**LABELS, "zone": "z1"})
        gpu_node(cp, "g2", gpus=8, labels={**LABELS, "zone": "z2"})
        gpu_node(cp, "k1", gpus=4, labels={**LABELS, "pool": "kueue"})
        for holder, where, gpus in (("hold-g1", "g1", 4), ("hold-g2", "g2", 6)):
            request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod(holder, NS, gpus=gpus, nodeName=where))
        request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod("affine", NS, gpus=2, affinity=NINE))
        # a Run and its pod (the Run's GPUs are jobtree's; its pod waits for kube-scheduler)
        request(cp, "POST", f"/apis/jobtree.dev/v1alpha1/namespaces/{NS}/runs", {
            "apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": "train-run", "namespace": NS},
            "spec": {"resources": {"gpuType": "H100", "totalGPUs": 8}}})
        run_pod = gpu_pod("train-run-0", NS, gpus=8)
        run_pod["metadata"]["labels"] = {"jobtree.dev/run": "train-run"}
        request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", run_pod)
        # Kueue's pod integration: the pod is created gated, its Workload owns it by uid
        gated = gpu_pod("gated", NS, gpus=1, nodeSelector={"pool": "kueue"},
                        schedulingGates=[{"name": KUEUE_GATE}])
        gated["metadata"]["labels"] = {"kueue.x-k8s.io/managed": "true", "kueue.x-k8s.io/queue-name": "gpu"}
        made = request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", gated)
        template = {"spec": {k: v for k, v in made["spec"].items() if k in ("containers", "nodeSelector")}}
        request(cp, "POST", f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NS}/workloads", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "pod-gated-1a2b3", "namespace": NS,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "gated",
                                              "uid": made["metadata"]["uid"], "controller": True}]},
            "spec": {"queueName": "gpu", "podSets": [{"name": "main", "count": 1, "template": template}]}})
        try:
            for name in ("affine", "train-run-0"):
                wait_for(f"the scheduler's verdict on {name}", lambda n=name: failed_scheduling(cp, NS, n),
                         timeout=90)
        except AssertionError:
            raise AssertionError(f"kube-scheduler did not get there; its log ends:\n{log.read_text()[-3000:]}") \
                from None
        yield cp


@pytest.mark.parametrize("name, code", [("affine", "NodeSelector"), ("train-run-0", "Fragmented")])  # 4 + 2 + 4 free
def test_our_node_counts_per_reason_are_the_schedulers(planted, name, code):
    message = failed_scheduling(planted, NS, name)
    nodes, theirs = verdict_counts(message)
    pod, fits = _pod_and_fits(planted, name)
    assert (len(fits), histogram(fits)) == (nodes, theirs), message
    assert reason(pod, fits).code == code


def test_the_gated_pod_is_not_judged_by_the_scheduler_and_we_say_so(planted):
    """The API server marks a gated pod PodScheduled=False/SchedulingGated; the scheduler writes no verdict."""
    assert (pod_scheduled(planted, NS, "gated") or {}).get("reason") == "SchedulingGated"
    assert failed_scheduling(planted, NS, "gated") is None
    pod, fits = _pod_and_fits(planted, "gated")
    assert (reason(pod, fits).code, reason(pod, fits).admitter) == ("SchedulingGated", "Kueue")
    report = run_plugin_json(planted, "explain", "pod", f"{NS}/gated", "-o", "json")
    assert (report["reason"], report["agrees"]) == ("SchedulingGated", None)  # no filter verdict to compare
    assert report["scheduler"] == {"message": "Scheduling is blocked due to non-empty scheduling gates",
                                   "source": "PodScheduled condition", "nodes": None}  # shown, never hidden


def test_pending_counts_each_consumer_once(planted):
    """The Run's pod is in the Run's row, the gated pod in its Workload's row: three rows, none of them a pod
    row of the Run or of the gated pod."""
    report = run_plugin_json(planted, "pending", "-o", "json")
    rows = {(r["kind"], r["name"]): r for r in report["rows"]}
    assert set(rows) == {("Run", "train-run"), ("Workload", "pod-gated-1a2b3"), ("Pod", "affine")}, rows
    assert (rows[("Run", "train-run")]["pods"], rows[("Run", "train-run")]["admittedBy"]) == (1, "jobtree")
    assert (rows[("Workload", "pod-gated-1a2b3")]["pods"], rows[("Workload", "pod-gated-1a2b3")]["gpus"],
            rows[("Workload", "pod-gated-1a2b3")]["admittedBy"]) == (1, 1, "Kueue")
    assert rows[("Pod", "affine")]["reason"] == "NodeSelector"


def test_explain_by_the_runs_name_explains_its_pod(planted):
    report = run_plugin_json(planted, "explain", "pod", f"{NS}/train-run", "-o", "json")
    assert (report["pod"], report["workload"], report["agrees"]) == (f"{NS}/train-run-0", "Run/train-run", True)


def test_after_labelling_a_node_the_affine_pod_is_bound_where_we_said(planted):
    request(planted, "PATCH", "/api/v1/nodes/g2", {"metadata": {"labels": {"zone": "z9"}}}, merge=True)
    said = {f.node for f in _pod_and_fits(planted, "affine")[1] if f.fits}
    assert said == {"g2"}
    _bound_where_we_said(planted, "affine", said)


def test_after_kueue_lifts_the_gate_the_pod_is_bound_where_we_said(planted):
    pod = request(planted, "GET", f"/api/v1/namespaces/{NS}/pods/gated")
    pod["spec"]["schedulingGates"] = []  # what Kueue does when it admits the Workload
    request(planted, "PUT", f"/api/v1/namespaces/{NS}/pods/gated", pod)
    said = {f.node for f in _pod_and_fits(planted, "gated")[1] if f.fits}
    assert said == {"k1"}
    _bound_where_we_said(planted, "gated", said)


def test_after_freeing_a_node_the_runs_pod_is_bound_where_we_said(planted):
    request(planted, "DELETE", f"/api/v1/namespaces/{NS}/pods/hold-g1?gracePeriodSeconds=0")
    wait_for("hold-g1 gone", lambda: planted.request("GET", f"/api/v1/namespaces/{NS}/pods/hold-g1")[0] == 404)
    said = {f.node for f in _pod_and_fits(planted, "train-run-0")[1] if f.fits}
    assert said == {"g1"}
    _bound_where_we_said(planted, "train-run-0", said)
