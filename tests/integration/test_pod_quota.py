"""A ResourceQuota refusal on a Job, judged by the real API server's quota admission (issue 29).

The test control plane runs no controller-manager (no Job controller, no quota controller), so the test does what
they would: it sets the quota's ``status.hard``/``status.used`` as the quota controller syncs them (quota admission
then keeps ``used`` itself), creates the Job's pod as the Job controller would (generateName, the job labels, a
controller ownerReference to the Job) and lets the API server refuse it, and records the refusal as the controller
records it: a Warning ``FailedCreate`` Event on the Job, ``Error creating: <the API server's message>``.

Then: ``pending`` shows the Job as ``QuotaExceeded``; ``explain pod NS/JOB`` names the quota and the amount to
raise it by, equal to what admission needs; our count of the namespace's usage (LimitRange defaults included)
equals what admission wrote in ``status.used``; after the remedy (the quota raised by that amount) the API server
admits the pod, the refusal is history, and the real kube-scheduler binds the pod to a node we said fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import msgspec
import pytest
from reconciler_harness import ROOT, control_plane, run_plugin_json
from scheduler_harness import gpu_node, gpu_pod, kube_scheduler, pod_scheduled, request, wait_for

from kubectl_runs.model import Node
from kubectl_runs.pods.fit import fleet_fit
from kubectl_runs.pods.model import LimitRange, Pod
from kubectl_runs.pods.quota import quota_usage

NS = "research"
QUOTA = "gpu-quota"
HARD = {"requests.nvidia.com/gpu": "8", "requests.cpu": "100", "pods": "20"}


def _records(cp, path: str, kind: str, cls):
    items = request(cp, "GET", path)["items"]
    return [msgspec.json.decode(json.dumps({**item, "kind": kind}), type=cls) for item in items]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def job_pod(job: dict, gpus: int) -> dict:
    """The pod the Job controller would create for ``job`` (its template has no cpu request: LimitRanger gives
    it the namespace's default)."""
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "controller-uid": uid, "job-name": name}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{name}-", "namespace": NS, "labels": labels,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {**job["spec"]["template"]["spec"]}}


def failed_create_event(job: dict, message: str) -> dict:
    """The Event the Job controller records (controller_utils.RealPodControl: ``Error creating: %v``)."""
    meta = job["metadata"]
    now = _now()
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{int(time.time() * 1e9):x}", "namespace": NS},
            "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "namespace": NS,
                               "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
            "reason": "FailedCreate", "message": f"Error creating: {message}", "type": "Warning",
            "source": {"component": "job-controller"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    with control_plane(NS) as cp, kube_scheduler(cp, tmp_path_factory.mktemp("scheduler")):
        gpu_node(cp, "q1", gpus=8)
        gpu_node(cp, "q2", gpus=8)
        request(cp, "POST", f"/api/v1/namespaces/{NS}/limitranges", {
            "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults", "namespace": NS},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "2"}}]}})
        request(cp, "POST", f"/api/v1/namespaces/{NS}/resourcequotas", {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA, "namespace": NS},
            "spec": {"hard": HARD}})
        # what the quota controller would write first: the hard limits, nothing used yet
        request(cp, "PUT", f"/api/v1/namespaces/{NS}/resourcequotas/{QUOTA}/status", {
            **request(cp, "GET", f"/api/v1/namespaces/{NS}/resourcequotas/{QUOTA}"),
            "status": {"hard": HARD, "used": {"requests.nvidia.com/gpu": "0", "requests.cpu": "0", "pods": "0"}}})
        holder = gpu_pod("holder", NS, gpus=4, nodeName="q1")
        del holder["spec"]["containers"][0]["resources"]["requests"]["cpu"]  # LimitRanger defaults it
        request(cp, "POST", f"/api/v1/namespaces/{NS}/pods", holder)
        template = gpu_pod("x", NS, gpus=8)["spec"]
        del template["containers"][0]["resources"]["requests"]["cpu"]
        job = request(cp, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NS},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": {**template, "restartPolicy": "Never"}}}})
        status, answer = cp.request("POST", f"/api/v1/namespaces/{NS}/pods", job_pod(job, 8))
        assert status == 403, (status, answer)
        message = answer["message"]
        request(cp, "POST", f"/api/v1/namespaces/{NS}/events", failed_create_event(job, message))
        cp.job, cp.refusal = job, message
        yield cp


def test_the_api_server_refuses_the_jobs_pod_for_the_gpu_quota(refused):
    assert "is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, used: " \
           "requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=8" in refused.refusal, refused.refusal


def test_our_usage_count_equals_what_quota_admission_wrote(refused):
    """The holder pod had no cpu request: LimitRanger gave it 2; our count of the namespace (with the LimitRange
    defaults) equals the quota's status.used that admission maintains."""
    used = request(refused, "GET", f"/api/v1/namespaces/{NS}/resourcequotas/{QUOTA}")["status"]["used"]
    pods = _records(refused, f"/api/v1/namespaces/{NS}/pods", "Pod", Pod)
    ranges = _records(refused, f"/api/v1/namespaces/{NS}/limitranges", "LimitRange", LimitRange)
    ours = quota_usage(NS, tuple(pods), tuple(ranges))
    assert {r: ours.get(r, 0) for r in used} == {"requests.nvidia.com/gpu": 4, "requests.cpu": 2000, "pods": 1}
    assert used == {"requests.nvidia.com/gpu": "4", "requests.cpu": "2", "pods": "1"}


def test_pending_shows_the_job_refused_by_its_quota(refused):
    report = run_plugin_json(refused, "pending", "-o", "json")
    row = next(r for r in report["rows"] if r["name"] == "train")
    assert (row["kind"], row["reason"], row["admittedBy"], row["gpus"], row["pods"]) == (
        "Job", "QuotaExceeded", "ResourceQuota", 8, 0)
    assert "ResourceQuota research/gpu-quota" in row["message"] and "by 4" in row["message"], row["message"]
    assert {"reason": "QuotaExceeded", "rows": 1, "gpus": 8} in report["reasons"]


def test_explain_names_the_quota_and_by_how_much_to_raise_it(refused):
    report = run_plugin_json(refused, "explain", "pod", f"{NS}/train", "-o", "json")
    assert (report["workload"], report["phase"], report["reason"]) == ("Job/train", "NotCreated", "QuotaExceeded")
    assert report["quota"] == [{"quota": f"{NS}/{QUOTA}", "resource": "requests.nvidia.com/gpu", "hard": "8",
                                "used": "4", "requested": "8", "raiseBy": "4",
                                "event": f"Error creating: {refused.refusal}"}]
    raise_quota = next(r for r in report["remedies"] if r["kind"] == "RaiseQuota")
    assert (raise_quota["object"], raise_quota["amount"]) == (f"{NS}/{QUOTA}", "requests.nvidia.com/gpu=4")


def normal_event(i: int) -> dict:
    """An Event that is no verdict (a Normal one, as kubelet and controllers write by the thousand)."""
    now = _now()
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"noise.{i}", "namespace": NS},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "holder", "namespace": NS},
            "reason": "Pulled", "message": "Container image already present on machine", "type": "Normal",
            "source": {"component": "kubelet"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1}


def test_pending_watch_prints_a_new_quota_refusal_and_nothing_for_events_that_are_no_verdict(refused):
    """`pending -w` watches what `pending` reads (Pods, Warning Events, ResourceQuotas, LimitRanges): a Job's
    FailedCreate Event arriving prints a block with its row; Normal Events print nothing."""
    from test_watch_live import Watch

    watch = Watch(refused, "pending", "-w", "-o", "json")
    try:
        watch.wait_lines(1)
        first = watch.docs()[0]
        assert [r["name"] for r in first["rows"] if r["reason"] == "QuotaExceeded"] == ["train"]
        time.sleep(1.5)  # the informers have listed
        for i in range(30):
            request(refused, "POST", f"/api/v1/namespaces/{NS}/events", normal_event(i))
        time.sleep(3.0)
        assert len(watch.lines) == 1, watch.lines[1:]  # no reprint: the block would read the same
        template = gpu_pod("y", NS, gpus=8)["spec"]
        del template["containers"][0]["resources"]["requests"]["cpu"]
        job = request(refused, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train2", "namespace": NS},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": {**template, "restartPolicy": "Never"}}}})
        status, answer = refused.request("POST", f"/api/v1/namespaces/{NS}/pods", job_pod(job, 8))
        assert status == 403, (status, answer)
        event = request(refused, "POST", f"/api/v1/namespaces/{NS}/events", failed_create_event(job, answer["message"]))
        watch.wait_lines(2, timeout=15)
        last = watch.docs()[-1]
        assert sorted(r["name"] for r in last["rows"] if r["reason"] == "QuotaExceeded") == ["train", "train2"]
    finally:
        assert watch.stop() == 130
    assert watch.err == [], watch.err
    # leave the refusals as the fixture made them (the Event expires as the API server's event TTL would)
    request(refused, "DELETE", f"/api/v1/namespaces/{NS}/events/{event['metadata']['name']}")


def _as_reader(cp, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.kubeconfig_for("reader")), timeout=120, cwd=str(ROOT))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return json.loads(done.stdout)


def test_the_refusal_of_a_job_that_is_gone_is_history(refused, tmp_path):
    """A FailedCreate Event outlives its Job: once the Job is deleted (or another Job takes its name) the refusal is
    not listed, live nor in a saved snapshot, though the Event is still there. Read by the user ``reader`` bound to
    deploy/rbac-readonly.yaml (it may get the controllers a refusal names)."""
    refused.kubectl("apply", "-f", str(ROOT / "deploy" / "rbac-readonly.yaml"))
    refused.kubectl("create", "clusterrolebinding", "reader-reads", "--clusterrole=kubectl-runs-reader",
                    "--user=reader")
    template = gpu_pod("z", NS, gpus=8)["spec"]
    del template["containers"][0]["resources"]["requests"]["cpu"]
    spec = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gone", "namespace": NS},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": {**template, "restartPolicy": "Never"}}}}
    job = request(refused, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", spec)
    status, answer = refused.request("POST", f"/api/v1/namespaces/{NS}/pods", job_pod(job, 8))
    assert status == 403, (status, answer)
    event = request(refused, "POST", f"/api/v1/namespaces/{NS}/events", failed_create_event(job, answer["message"]))

    def refused_jobs(*args: str) -> list[str]:
        report = _as_reader(refused, "pending", "-o", "json", *args)
        return sorted(r["name"] for r in report["rows"] if r["reason"] == "QuotaExceeded")

    assert refused_jobs() == ["gone", "train"]
    # no garbage collector runs here: the Job keeps the orphan finalizer a plain DELETE gives it, being deleted
    request(refused, "DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/gone")
    assert request(refused, "GET", f"/apis/batch/v1/namespaces/{NS}/jobs/gone")["metadata"]["deletionTimestamp"]
    assert refused_jobs() == ["train"]
    request(refused, "PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/gone", {"metadata": {"finalizers": None}},
            merge=True)  # what the garbage collector does: now it is gone
    wait_for("the Job gone", lambda: refused.request("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/gone")[0] == 404)
    assert refused_jobs() == ["train"]
    request(refused, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", spec)  # another Job of that name
    assert refused_jobs() == ["train"]
    saved = tmp_path / "saved.json"
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "snapshot", "save", "-f", str(saved)],
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT),
                          env=dict(os.environ, KUBECONFIG=refused.kubeconfig_for("reader")))
    assert done.returncode == 0, done.stderr
    assert refused_jobs("--snapshot", str(saved)) == ["train"]
    assert request(refused, "GET", f"/api/v1/namespaces/{NS}/events/{event['metadata']['name']}")  # still there
    request(refused, "DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/gone?propagationPolicy=Background")
    request(refused, "DELETE", f"/api/v1/namespaces/{NS}/events/{event['metadata']['name']}")


def test_after_raising_the_quota_by_that_amount_the_pod_is_admitted_and_bound_where_we_said(refused):
    quota = request(refused, "GET", f"/api/v1/namespaces/{NS}/resourcequotas/{QUOTA}")
    raised = {**HARD, "requests.nvidia.com/gpu": "12"}  # 8 + the 4 explain asked for
    quota["spec"]["hard"] = raised
    quota = request(refused, "PUT", f"/api/v1/namespaces/{NS}/resourcequotas/{QUOTA}", quota)
    quota["status"]["hard"] = raised  # as the quota controller syncs it
    request(refused, "PUT", f"/api/v1/namespaces/{NS}/resourcequotas/{QUOTA}/status", quota)
    made = request(refused, "POST", f"/api/v1/namespaces/{NS}/pods", job_pod(refused.job, 8))
    name = made["metadata"]["name"]
    nodes = _records(refused, "/api/v1/nodes", "Node", Node)
    pods = _records(refused, "/api/v1/pods", "Pod", Pod)
    mine = next(p for p in pods if p.metadata.name == name)
    said = {f.node for f in fleet_fit(mine.spec, nodes, [p for p in pods if p is not mine]) if f.fits}
    assert said == {"q2"}
    report = run_plugin_json(refused, "pending", "-o", "json")
    assert all(r["reason"] != "QuotaExceeded" for r in report["rows"]), report["rows"]  # the refusal is history
    wait_for("the Job's pod bound", lambda: (pod_scheduled(refused, NS, name) or {}).get("status") == "True",
             timeout=120)
    assert request(refused, "GET", f"/api/v1/namespaces/{NS}/pods/{name}")["spec"]["nodeName"] in said
