"""The pod rows of ``kubectl runs pending`` (kubectl_runs.pods.pending): one row per workload, its pending GPU
pods counted once, the reason its pods wait for."""

from __future__ import annotations

import msgspec
from test_pod_fit import node, pod

from kubectl_runs.engine.reports import plain
from kubectl_runs.pods.model import Pod
from kubectl_runs.pods.pending import pending_pod_rows


def replica(name, gpus, *, owner=("ReplicaSet", "serve-5d8f"), hash_="5d8f", created="2025-11-20T10:00:00Z",
            **more):
    return msgspec.convert({"kind": "Pod", "metadata": {
        "name": name, "namespace": "team", "creationTimestamp": created, "labels": {"pod-template-hash": hash_},
        "ownerReferences": [{"kind": owner[0], "name": owner[1], "controller": True}], **more.pop("meta", {})},
        "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}], **more}}, Pod)


def test_replicas_are_one_row_of_their_deployment_and_only_pending_gpu_pods_count():
    nodes = [node("a"), node("b")]
    pods = [replica("serve-5d8f-1", 8, created="2025-11-20T11:00:00Z"), replica("serve-5d8f-2", 8),
            replica("serve-5d8f-3", 8, nodeName="a"),  # bound: holds a, not pending
            replica("serve-5d8f-4", 8, meta={"deletionTimestamp": "2025-11-20T12:00:00Z"}),  # being deleted
            pod("cpu-only", 0), pod("done", 8, phase="Succeeded")]
    rows = pending_pod_rows(pods, nodes)
    assert [plain(r) for r in rows] == [{
        "kind": "Deployment", "namespace": "team", "name": "serve", "pods": 2, "gpus": 16,
        "gpuResource": "nvidia.com/gpu", "waitingSince": "2025-11-20T10:00:00Z", "admittedBy": "kube-scheduler",
        "reason": "Fits", "message": "fits on 1 node(s) now; kube-scheduler has not bound it yet",
        "largestFreeBlock": 8, "freeGPUs": 8}]


def test_workloads_are_sorted_and_each_has_its_own_reason():
    nodes = [node("a")]
    pods = [replica("train-0", 16, owner=("Job", "train"), hash_=""), pod("held", 6, "a"),
            replica("ray-w-1", 4, owner=("RayCluster", "ray"), hash_="", schedulerName="volcano"),
            replica("solo", 4, owner=("Job", "solo"), hash_="")]
    rows = {(r.kind, r.name): (r.reason, r.admitted_by, r.gpus) for r in pending_pod_rows(pods, nodes)}
    assert rows == {("Job", "solo"): ("InsufficientGPU", "kube-scheduler", 4),
                    ("Job", "train"): ("ExceedsNodeCapacity", "kube-scheduler", 16),
                    ("RayCluster", "ray"): ("OtherScheduler", "volcano", 4)}
    assert [r.name for r in pending_pod_rows(pods, nodes)] == ["solo", "train", "ray"]  # by kind, then name


def test_pods_of_one_workload_waiting_for_different_reasons_say_so():
    nodes = [node("a")]
    pods = [replica("mix-1", 8, owner=("Job", "mix"), hash_=""),
            replica("mix-2", 8, owner=("Job", "mix"), hash_="", nodeSelector={"pool": "x"}),
            replica("mix-3", 8, owner=("Job", "mix"), hash_="", nodeSelector={"pool": "x"})]
    (row,) = pending_pod_rows(pods, nodes)
    assert (row.reason, row.pods, row.gpus) == ("NodeSelector", 3, 24)
    assert row.message.endswith("(1 of 3 pods: another reason)")
