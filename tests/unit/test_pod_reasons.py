"""One reason code per pending GPU pod (kubectl_runs.pods.reasons) and the workload a pod is counted under
(kubectl_runs.pods.owners), on hand-built nodes and pods."""

from __future__ import annotations

import msgspec
import pytest
from test_pod_fit import TAINT, node, pod, spec

from kubectl_runs.pods.fit import fleet_fit
from kubectl_runs.pods.model import Pod
from kubectl_runs.pods.owners import Workload, workload_of
from kubectl_runs.pods.reasons import reason


def pending(gpus, **more):
    return msgspec.convert({"kind": "Pod", "metadata": {"name": "p", "namespace": "team"},
                            "spec": {**msgspec.to_builtins(spec(gpus)), **more}}, Pod)


def code(p, nodes, bound=()):
    return reason(p, fleet_fit(p.spec, nodes, bound))


def test_gates_and_other_schedulers_come_first():
    gated = pending(8, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    assert (code(gated, [node("a")]).code, code(gated, [node("a")]).admitter) == ("SchedulingGated", "Kueue")
    other = pending(8, schedulerName="volcano")
    assert (code(other, [node("a")]).code, code(other, [node("a")]).admitter) == ("OtherScheduler", "volcano")


@pytest.mark.parametrize(("gpus", "expected", "largest", "together"), [
    (4, "Fits", 4, 6),  # a2 has 4 free
    (6, "Fragmented", 4, 6),  # 2 + 4 free, never 6 on one node
    (8, "InsufficientGPU", 4, 6),  # not even together
    (9, "ExceedsNodeCapacity", 4, 6),  # no node has 9, even empty
], ids=["fits", "fragmented", "insufficient", "exceeds"])
def test_free_gpus_on_the_nodes_it_may_use_decide_between_fits_fragmented_and_insufficient(
        gpus, expected, largest, together):
    nodes = [node("a1"), node("a2"), node("t", taints=[TAINT])]  # the tainted node's 8 free GPUs do not count
    got = code(pending(gpus), nodes, [pod("x", 6, "a1"), pod("y", 4, "a2")])
    assert (got.code, got.largest_block, got.free_gpus) == (expected, largest, together)


def test_when_no_node_passes_the_filters_before_resources_the_commonest_filter_names_it():
    nodes = [node("a", cordoned=True), node("b", taints=[TAINT]), node("c", taints=[TAINT])]
    got = code(pending(1), nodes)
    assert got.code == "UntoleratedTaint"
    assert got.message == "no node passes the filters before resources (2 UntoleratedTaint, 1 Cordoned)"
    assert code(pending(1, nodeSelector={"pool": "x"}), [node("a")]).code == "NodeSelector"


def test_gpus_free_but_cpu_short_is_insufficient_resources():
    assert code(pending(1, containers=[{"resources": {"requests": {"cpu": "99", "nvidia.com/gpu": "1"}}}]),
                [node("a", cpu="8")]).code == "InsufficientResources"


def test_a_pod_is_counted_under_its_deployment_job_or_itself():
    def owned(kind, name, labels=None):
        return msgspec.convert({"kind": "Pod", "metadata": {
            "name": "p-1", "namespace": "team", "labels": labels or {},
            "ownerReferences": [{"kind": kind, "name": name, "controller": True}]}}, Pod)
    assert workload_of(owned("ReplicaSet", "serve-7f9c", {"pod-template-hash": "7f9c"})) == Workload(
        "team", "Deployment", "serve")
    assert workload_of(owned("ReplicaSet", "plain-rs")) == Workload("team", "ReplicaSet", "plain-rs")
    assert workload_of(owned("Job", "train")) == Workload("team", "Job", "train")
    assert workload_of(owned("RayCluster", "ray")) == Workload("team", "RayCluster", "ray")
    assert workload_of(pending(1)) == Workload("team", "Pod", "p")
