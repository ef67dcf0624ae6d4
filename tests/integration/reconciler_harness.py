"""Helpers for driving ``kubectl runs reconcile`` against a real API server in tests: a control plane of its own
with the CRDs (``control_plane``), the reconciler as a separate process (as it runs in a pod), the API server's
own count of requests (from its /metrics, not from the code under test), objects built around the wall clock,
and bulk creation."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
API = "/apis/jobtree.dev/v1alpha1"
STATUS_RESOURCES = ("runs", "budgets", "reservations")
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


# --- a control plane of one's own ---------------------------------------------------------------------------


@contextlib.contextmanager
def control_plane(*namespaces: str, **options: Any) -> Iterator[Any]:
    """A kube-apiserver + etcd of the test tier (tests/controlplane) with the users of the RBAC tests, the
    jobtree.dev CRDs applied and Established, and ``namespaces`` created: the reconciler writes status to every
    object it sees, so each reconciler test module uses one of its own (a module-scoped fixture). ``options``
    go to ``ControlPlane`` (``etcd_args``, ``apiserver_args``)."""
    from controlplane import DEFAULT_USERS, ControlPlane, skip_reason

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with ControlPlane(users=DEFAULT_USERS, **options) as plane:
        plane.kubectl("apply", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        for namespace in namespaces:
            plane.kubectl("create", "namespace", namespace)
        yield plane


# --- the API server's own count of requests ---------------------------------------------------------------


def _request_samples(cp) -> Iterator[tuple[dict[str, str], int]]:
    """(labels, value) of every ``apiserver_request_total`` sample on the API server's /metrics."""
    status, text = cp.request("GET", "/metrics")
    assert status == 200, text
    for line in str(text).splitlines():
        match = _SAMPLE.match(line)
        if match:
            yield dict(_LABEL.findall(match.group("labels"))), int(float(match.group("value")))


def requests(cp, verb: str, resource: str, *, subresource: str = "", code: str | None = None) -> int:
    """Requests the API server answered (its own ``apiserver_request_total``) for jobtree.dev ``resource``
    (``subresource`` "" = the object itself), with response ``code`` when given."""
    return sum(value for labels, value in _request_samples(cp)
               if labels.get("verb") == verb and labels.get("group") == "jobtree.dev"
               and labels.get("resource") == resource and labels.get("subresource", "") == subresource
               and (code is None or labels.get("code") == code))


def status_patches(cp, resources: Iterable[str] = STATUS_RESOURCES) -> dict[str, int]:
    """PATCH requests on the status subresource the API server has answered, per resource (every response
    code), read from ``apiserver_request_total`` on its /metrics."""
    counts = dict.fromkeys(resources, 0)
    for labels, value in _request_samples(cp):
        if (labels.get("verb") == "PATCH" and labels.get("subresource") == "status" and labels.get("group") == "jobtree.dev"
                and labels.get("resource") in counts):
            counts[labels["resource"]] += value
    return counts


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


# --- objects -----------------------------------------------------------------------------------------------


def node(name: str, *, flavor: str, gpus: int = 8, domain: str = "d1") -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpu.flavor": flavor, "fabric.domain": domain}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"},
                       "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "96"}}}


def budget(name: str, namespace: str, *, owner: str, flavor: str | None = None, concurrency: int | None = None,
           days: int = 30, envelopes: Iterable[tuple[str, str, int]] | None = None) -> dict:
    """A Budget whose envelopes' windows opened a day ago and last ``days``: one envelope ``main`` of
    ``flavor`` and ``concurrency``, or ``envelopes`` as (name, flavor, concurrency)."""
    start = now() - timedelta(days=1)
    wanted = list(envelopes) if envelopes is not None else [("main", flavor, concurrency)]
    return {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"owner": owner, "envelopes": [
                {"name": env, "flavor": env_flavor, "concurrency": env_concurrency, "start": iso(start),
                 "end": iso(start + timedelta(days=days))} for env, env_flavor, env_concurrency in wanted]}}


def run(name: str, namespace: str, *, flavor: str, gpus: int, group: int | None = None) -> dict:
    """A Run of ``gpus`` GPUs of ``flavor`` (in groups of ``group`` when given)."""
    spec: dict[str, Any] = {"resources": {"gpuType": flavor, "totalGPUs": gpus}}
    if group is not None:
        spec["locality"] = {"groupGPUs": group}
    return {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def lease(name: str, namespace: str, *, owner: str, run_name: str, flavor: str, slots: list[str],
          budget_name: str, start: datetime | None = None) -> dict:
    return {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"owner": owner, "runRef": {"namespace": namespace, "name": run_name}, "group": 0,
                     "flavor": flavor, "slice": {"slots": slots, "role": "Active"},
                     "paidBy": {"budget": budget_name, "envelope": "main"},
                     "start": iso(start or now() - timedelta(minutes=1)), "reason": "Start"}}


def path_of(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    if obj["kind"] == "Node":
        return "/api/v1/nodes", f"/api/v1/nodes/{meta['name']}"
    plural = {"Budget": "budgets", "Run": "runs", "Reservation": "reservations", "GPULease": "gpuleases"}[obj["kind"]]
    base = f"{API}/namespaces/{meta['namespace']}/{plural}"
    return base, f"{base}/{meta['name']}"


def create(cp, objects: list[dict], threads: int = 16) -> None:
    """Create the objects (a namespace first where needed; a Node's status through its status subresource),
    in parallel; raises on any failure."""
    for ns in sorted({o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}):
        code, body = cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": ns}})
        assert code in (201, 409), body

    def one(obj: dict) -> None:
        collection, item = path_of(obj)
        body = {k: v for k, v in obj.items() if k != "status"}
        code, answer = cp.request("POST", collection, body)
        assert code == 201, (item, code, answer)
        if obj["kind"] == "Node":
            code, answer = cp.request("PATCH", item + "/status", {"status": obj["status"]},
                                      content_type="application/merge-patch+json")
            assert code == 200, (item, code, answer)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, objects))


def get(cp, obj_path: str) -> dict:
    code, body = cp.request("GET", obj_path)
    assert code == 200, (obj_path, code, body)
    return body


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.02) -> tuple[Any, float]:
    """Poll ``check`` until it returns something truthy; (that value, seconds it took)."""
    started = time.monotonic()
    while True:
        value = check()
        if value:
            return value, time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


# --- the reconciler as a process ---------------------------------------------------------------------------


class Reconciler:
    """``kubectl-runs reconcile ARGS`` in its own process, its stderr (logfmt, one line per action) kept."""

    def __init__(self, cp, *args: str, log_dir: Path, name: str = "reconcile", kubeconfig: str | None = None):
        self.log_path = Path(log_dir) / f"{name}-{time.monotonic_ns()}.log"
        env = dict(os.environ, KUBECONFIG=kubeconfig or cp.admin_kubeconfig, PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubectl_runs", "reconcile", *args],
            stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=str(ROOT),
        )

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def count(self, fragment: str) -> int:
        return sum(1 for line in self.lines() if fragment in line)

    def wait_log(self, fragment: str, count: int = 1, timeout: float = 60.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the reconciler exited ({self.proc.returncode}):\n" + "\n".join(self.lines()[-30:]))
            return self.count(fragment) >= count

        wait_for(f"{fragment!r} ×{count} in the reconciler's log", seen, timeout=timeout, every=0.05)

    def metrics(self) -> str:
        """The reconciler's own /metrics (started with ``--metrics-addr 127.0.0.1:0``)."""
        import urllib.request

        [url] = [m.group(1) for m in map(re.compile(r"msg=\"serving metrics\".* url=(\S+)").search, self.lines()) if m]
        with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
            return answer.read().decode()

    def writes(self) -> list[str]:
        return [line for line in self.lines() if "msg=write " in line]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode


def run_plugin_json(cp, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig), timeout=120, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
