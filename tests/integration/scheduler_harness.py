"""The real kube-scheduler (built by scripts/kube-scheduler.sh from the same k8s.io/kubernetes module as the test
kube-apiserver) run as a plain process against a test ControlPlane, and helpers to plant GPU nodes and pods and
read the scheduler's verdicts (the pod's PodScheduled condition, its FailedScheduling Events).

No node lifecycle controller runs in the tests: a Node created through the API keeps the
``node.kubernetes.io/not-ready:NoSchedule`` taint admission gives it, so ``gpu_node`` replaces the taints with the
ones asked for after creating it, and sets the GPUs as extended resources on its status, as a device plugin
would."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = "KUBECTL_RUNS_REQUIRE_CONTROLPLANE"
# "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu. preemption: …"
_VERDICT = re.compile(r"^0/(?P<nodes>\d+) nodes are available: (?P<reasons>.*?)\.(?: (?:still not schedulable, )?preemption: .*)?$", re.S)
_REASON = re.compile(r"(\d+) ((?:[^,{]|\{[^}]*\})+)")


def scheduler_binary() -> Path:
    """The kube-scheduler binary (built once into the cache by scripts/kube-scheduler.sh)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "kube-scheduler.sh")], capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/kube-scheduler.sh failed: {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def kube_scheduler(cp: Any, work: Path, args: tuple[str, ...] = ()) -> Iterator[Path]:
    """kube-scheduler bound to ``cp`` (admin kubeconfig, no leader election, no serving port, and ``args``) until
    the block ends; yields its log's path."""
    binary = scheduler_binary()
    log_path = work / "kube-scheduler.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(binary), f"--kubeconfig={cp.admin_kubeconfig}", "--leader-elect=false",
                                 "--secure-port=0", "-v=2", *args],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield log_path
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


def request(cp: Any, method: str, path: str, body: Any = None, *, merge: bool = False,
            expect: tuple[int, ...] = (200, 201)) -> Any:
    content_type = "application/merge-patch+json" if merge else "application/json"
    status, answer = cp.request(method, path, body, content_type=content_type)
    if status not in expect:
        raise AssertionError(f"{method} {path}: {status} {answer}")
    return answer


def gpu_node(cp: Any, name: str, *, gpus: int, resource: str = "nvidia.com/gpu", labels: dict | None = None,
             taints: list[dict] | None = None, unschedulable: bool = False, cpu: str = "64",
             memory: str = "512Gi") -> None:
    """A Ready node with ``gpus`` GPUs of ``resource``, the labels, taints and cordon asked for (and no others)."""
    request(cp, "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                          "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                                 **(labels or {})}}})
    request(cp, "PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None, "unschedulable": unschedulable}},
            merge=True)
    resources = {resource: str(gpus), "cpu": cpu, "memory": memory, "pods": "110"}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"status": {"capacity": resources, "allocatable": resources,
                         "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                         "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
    request(cp, "PATCH", f"/api/v1/nodes/{name}/status", status, merge=True)


def gpu_pod(name: str, namespace: str, *, gpus: int, resource: str = "nvidia.com/gpu", **spec: Any) -> dict:
    """A pod of one container asking for ``gpus`` GPUs (requests = limits, as extended resources must be)."""
    container = {"name": "main", "image": "registry.example/train:1",
                 "resources": {"requests": {resource: str(gpus), "cpu": "1"}, "limits": {resource: str(gpus)}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container], **spec}}


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def pod_scheduled(cp: Any, namespace: str, name: str) -> dict | None:
    """The pod's PodScheduled condition, once the scheduler has written one."""
    pod = request(cp, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    for cond in pod.get("status", {}).get("conditions", []):
        if cond.get("type") == "PodScheduled":
            return cond
    return None


def failed_scheduling(cp: Any, namespace: str, name: str) -> str | None:
    """The message of the latest FailedScheduling Event of the pod, if there is one."""
    events = request(cp, "GET", f"/api/v1/namespaces/{namespace}/events"
                                f"?fieldSelector=involvedObject.name={name},reason=FailedScheduling")
    items = sorted(events.get("items", []), key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return items[-1]["message"] if items else None


def verdict_counts(message: str) -> tuple[int, dict[str, int]]:
    """kube-scheduler's ``0/N nodes are available: …`` message as (N, {reason: node count})."""
    found = _VERDICT.match(message.strip())
    if not found:
        raise ValueError(f"not a scheduler verdict: {message!r}")
    counts = {reason.strip(): int(count) for count, reason in _REASON.findall(found["reasons"])}
    return int(found["nodes"]), counts


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)
