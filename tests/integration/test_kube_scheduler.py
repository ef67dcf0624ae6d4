"""The real kube-scheduler against the test API server: the judge of the pending-GPU reports (issue 29). On four
planted 8-GPU nodes (one free, one tainted, one cordoned, one with 4 GPUs held by a bound pod) it must bind the
pod that fits, give a 16-GPU pod the verdict ``0/4 nodes are available: …`` with one reason per node, and keep a
pod for another scheduler untouched; the harness parses the verdict into counts per reason."""

from __future__ import annotations

import pytest
from reconciler_harness import control_plane
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

NS = "research"


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    with control_plane(NS) as cp, kube_scheduler(cp, tmp_path_factory.mktemp("scheduler")) as log:
        gpu_node(cp, "g-free", gpus=8)
        gpu_node(cp, "g-tainted", gpus=8, taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
        gpu_node(cp, "g-cordoned", gpus=8, unschedulable=True)
        gpu_node(cp, "g-half", gpus=8)
        request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod("holder", NS, gpus=4, nodeName="g-half"))
        for pod in (gpu_pod("big", NS, gpus=16), gpu_pod("eight", NS, gpus=8),
                    gpu_pod("elsewhere", NS, gpus=1, schedulerName="volcano")):
            request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", pod)
        try:
            wait_for("the scheduler's verdict on big", lambda: failed_scheduling(cp, NS, "big"), timeout=90)
            wait_for("eight bound", lambda: (pod_scheduled(cp, NS, "eight") or {}).get("status") == "True")
        except AssertionError:
            raise AssertionError(f"kube-scheduler did not get there; its log ends:\n{log.read_text()[-3000:]}") from None
        yield cp


def test_a_pod_that_fits_is_bound_to_the_one_free_node(scheduled):
    pod = request(scheduled, "GET", f"/api/v1/namespaces/{NS}/pods/eight")
    assert pod["spec"]["nodeName"] == "g-free"


def test_the_verdict_on_a_pod_too_big_for_any_node_has_one_reason_per_node(scheduled):
    message = failed_scheduling(scheduled, NS, "big")
    nodes, counts = verdict_counts(message)
    assert nodes == 4, message
    assert counts == {"Insufficient nvidia.com/gpu": 2, "node(s) had untolerated taint {dedicated: infer}": 1,
                      "node(s) were unschedulable": 1}, message
    condition = pod_scheduled(scheduled, NS, "big")
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert condition["message"] == message


def test_a_pod_for_another_scheduler_is_left_alone(scheduled):
    assert pod_scheduled(scheduled, NS, "elsewhere") is None
    assert failed_scheduling(scheduled, NS, "elsewhere") is None


def test_verdict_counts_refuses_what_is_not_a_verdict():
    with pytest.raises(ValueError):
        verdict_counts("pod has unbound immediate PersistentVolumeClaims")
    assert verdict_counts("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. "
                          "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.") == (
        2, {"node(s) didn't match Pod's node affinity/selector": 2})
