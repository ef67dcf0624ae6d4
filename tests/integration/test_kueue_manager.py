"""Kueue's own manager (sigs.k8s.io/kueue v0.12.3 cmd/kueue, built from the Go module proxy by scripts/kueue.sh)
running against the real API server: admission, ClusterQueue status and the QuotaReserved messages are Kueue's
own. For each workload Kueue leaves pending, `explain workload` names the flavor and resource Kueue's condition
names and its shortfall is Kueue's "N more needed"; `queues usage` agrees with the ClusterQueue status Kueue
writes (flavorsReservation, flavorsUsage).

The manager runs as a plain process: its CRDs applied server-side, leader election and internal cert
management off, loopback ports, only the batch/job integration, VisibilityOnDemand off, the admin kubeconfig, and
self-signed serving certificates. Kueue reads its metrics certificate from the fixed path
/etc/kueue/metrics/certs; where that cannot be written the test is skipped (KUBECTL_RUNS_REQUIRE_KUEUE_MANAGER=1
makes that a failure).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_plugin
from controlplane import DEFAULT_USERS, ControlPlane, skip_reason
from kueue_fleet import ROOT, install_crds, upload

METRICS_CERTS = Path("/etc/kueue/metrics/certs")
REQUIRE = "KUBECTL_RUNS_REQUIRE_KUEUE_MANAGER"
K = "kueue.x-k8s.io/v1beta1"
GPU, AMD = "nvidia.com/gpu", "amd.com/gpu"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _certs(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt"), "-days", "30",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    shutil.copy(directory / "tls.crt", directory / "ca.crt")


def _manager_binary() -> Path:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "kueue.sh"), "manager"], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/kueue.sh manager failed: {proc.stderr.strip()[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def node(name, product, resource):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"gpu.product": product}},
            "status": {"allocatable": {resource: "8"}, "capacity": {resource: "8"}}}


def rq(name, nominal, borrowing=None, lending=None):
    out = {"name": name, "nominalQuota": nominal}
    if borrowing is not None:
        out["borrowingLimit"] = borrowing
    if lending is not None:
        out["lendingLimit"] = lending
    return out


def workload(ns, name, pods, per_pod, resource, priority=100):
    requests = {resource: str(per_pod)}
    return {"apiVersion": K, "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": "default", "priority": priority, "podSets": [{"name": "main", "count": pods,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "main", "image": "busybox", "resources": {"requests": requests,
                                                                           "limits": requests}}]}}}]}}


QUEUES = [
    node("h100-01", "h100", GPU), node("h100-02", "h100", GPU), node("mi300-01", "mi300x", AMD),
    {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": "h100"},
     "spec": {"nodeLabels": {"gpu.product": "h100"}}},
    {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": "mi300x"},
     "spec": {"nodeLabels": {"gpu.product": "mi300x"}}},
    {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": "team-a"}, "spec": {
        "cohort": "research", "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": "h100", "resources": [rq(GPU, 8, borrowing=4, lending=4)]}]}]}},
    {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": "team-b"}, "spec": {
        "cohort": "research", "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": [GPU], "flavors": [{"name": "h100", "resources": [rq(GPU, 8, lending=4)]}]},
            {"coveredResources": [AMD], "flavors": [{"name": "mi300x", "resources": [rq(AMD, 8)]}]}]}},
    {"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "default", "namespace": "team-a"},
     "spec": {"clusterQueue": "team-a"}},
    {"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "default", "namespace": "team-b"},
     "spec": {"clusterQueue": "team-b"}},
]
# Admitted one at a time, in this order (each waits for the one before): team-a holds 8 + 4 = 12 (4 borrowed from
# team-b's lendable half), team-b holds 4 nvidia and 4 amd.
ADMITTED = [
    workload("team-a", "a-1", 1, 8, GPU), workload("team-a", "a-2", 1, 4, GPU),
    workload("team-b", "b-1", 1, 4, GPU), workload("team-b", "b-amd-1", 1, 4, AMD),
]
# Left pending, with what Kueue says: nothing is left in h100 (team-a's borrowing limit is reached; team-b's
# lendable half is lent), 4 amd are free in mi300x; 16 amd is beyond team-b's maximum (8, its nominal quota, no
# one to borrow from); 32 nvidia is beyond team-a's maximum in h100 (12: the 4 it keeps, plus the cohort's pool of
# 4 + 4 lendable, within its borrowing limit's 8 − 4 + 4).
PENDING = {
    "team-a/a-3": (workload("team-a", "a-3", 2, 2, GPU), "h100", GPU, 4),
    "team-a/a-huge": (workload("team-a", "a-huge", 4, 8, GPU), "h100", GPU, None),
    "team-b/b-2": (workload("team-b", "b-2", 1, 6, GPU), "h100", GPU, 6),
    "team-b/b-amd-2": (workload("team-b", "b-amd-2", 1, 8, AMD), "mi300x", AMD, 4),
    "team-b/b-amd-big": (workload("team-b", "b-amd-big", 2, 8, AMD), "mi300x", AMD, None),
}


def _get(cp, path):
    status, body = cp.request("GET", path)
    assert status == 200, (path, status, body)
    return body


def _wait(what, check, timeout=90.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _condition(obj, kind):
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


@pytest.fixture(scope="module")
def kueue_manager(tmp_path_factory):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    created_certs = False
    if not (METRICS_CERTS / "tls.crt").exists():
        try:
            _certs(METRICS_CERTS)
            created_certs = True
        except (OSError, subprocess.CalledProcessError) as exc:
            if os.environ.get(REQUIRE):
                raise
            pytest.skip(f"Kueue reads its metrics certificate from {METRICS_CERTS}, which cannot be written here "
                        f"({exc}); set {REQUIRE}=1 to make this an error")
    binary = _manager_binary()
    work = tmp_path_factory.mktemp("kueue-manager")
    _certs(work / "webhook-certs")
    config = work / "config.yaml"
    config.write_text(json.dumps({
        "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{_port()}"},
        "metrics": {"bindAddress": f"127.0.0.1:{_port()}"},
        "webhook": {"port": _port(), "host": "127.0.0.1", "certDir": str(work / "webhook-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
    }))
    with ControlPlane(users=DEFAULT_USERS) as cp:
        install_crds(cp)
        cp.kubectl("create", "namespace", "kueue-system")
        log = open(work / "kueue.log", "wb")  # noqa: SIM115 (open for the manager's lifetime)
        manager = subprocess.Popen(
            [str(binary), f"--config={config}", f"--kubeconfig={cp.admin_kubeconfig}",
             "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            upload(cp, QUEUES)
            try:
                for name in ("team-a", "team-b"):
                    _wait(f"ClusterQueue {name} Active", lambda n=name: (_condition(
                        _get(cp, f"/apis/{K}/clusterqueues/{n}"), "Active") or {}).get("status") == "True")
                for wl in ADMITTED:
                    upload(cp, [wl])
                    meta = wl["metadata"]
                    path = f"/apis/{K}/namespaces/{meta['namespace']}/workloads/{meta['name']}"
                    _wait(f"{meta['name']} admitted",
                          lambda p=path: (_condition(_get(cp, p), "Admitted") or {}).get("status") == "True")
                for wl, *_ in PENDING.values():
                    upload(cp, [wl])
                for key in PENDING:
                    ns, name = key.split("/")
                    path = f"/apis/{K}/namespaces/{ns}/workloads/{name}"
                    _wait(f"{key} pending with Kueue's message", lambda p=path: (
                        (_condition(_get(cp, p), "QuotaReserved") or {}).get("status") == "False"))
                _wait("ClusterQueue status written", lambda: all(
                    _get(cp, f"/apis/{K}/clusterqueues/{n}").get("status", {}).get("flavorsReservation")
                    for n in ("team-a", "team-b")))
            except AssertionError:
                log.flush()
                tail = (work / "kueue.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"Kueue's manager did not get there; its log ends:\n{tail}") from None
            cp.manager_log = work / "kueue.log"
            yield cp
        finally:
            os.killpg(manager.pid, 15)
            try:
                manager.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(manager.pid, 9)
                manager.wait()
            log.close()
            if created_certs:
                shutil.rmtree(METRICS_CERTS.parent, ignore_errors=True)


_MORE = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\d+) more needed")
_MAX = re.compile(r"insufficient quota for (\S+) in flavor (\S+), request > maximum capacity \((\d+) > (\d+)\)")


@pytest.mark.parametrize("key", list(PENDING))
def test_our_explanation_names_what_kueue_names(kueue_manager, key):
    """Kueue's QuotaReserved=False message, read from the Workload its manager wrote, against `explain workload`
    on the same cluster: the same flavor and resource, our shortfall = its "N more needed" (or, past the maximum
    capacity, the same maximum), and the same whole message."""
    cp = kueue_manager
    _wl, flavor, resource, more = PENDING[key]
    ns, name = key.split("/")
    kueue_says = _condition(_get(cp, f"/apis/{K}/namespaces/{ns}/workloads/{name}"), "QuotaReserved")["message"]
    done = run_plugin("explain", "workload", key, "-o", "json", kubeconfig=cp.admin_kubeconfig)
    assert done.returncode == 0, done.stderr
    ours = json.loads(done.stdout)
    print(f"{key}: Kueue says {kueue_says!r}; we say {ours['message']!r}, shortfalls {ours['shortfalls']}")
    assert ours["kueue"]["message"] == kueue_says
    assert ours["message"] == kueue_says, (ours["message"], kueue_says)
    assert ours["kueue"]["matches"] is True
    if more is not None:
        match = _MORE.search(kueue_says)
        assert match and (match.group(1), match.group(2), int(match.group(3))) == (resource, flavor, more)
        (shortfall,) = ours["shortfalls"]
        assert (shortfall["flavor"], shortfall["resource"], shortfall["quotaShort"]) == (flavor, resource, more)
        assert ours["mayUse"] == {"main": flavor}
        assert (ours["beyondCapacity"], ours["neverAdmitted"]) == ([], False)
    else:
        match = _MAX.search(kueue_says)
        assert match and (match.group(1), match.group(2)) == (resource, flavor)
        (tried,) = [f for f in ours["flavors"] if f["flavor"] == flavor]
        assert tried["verdict"] == "TooBig"
        assert tried["reasons"] == [match.group(0)]
        # the maximum as a field: the number after ">" in Kueue's own message
        (beyond,) = ours["beyondCapacity"]
        assert (beyond["flavor"], beyond["resource"]) == (flavor, resource)
        assert (beyond["request"], beyond["maximumCapacity"]) == (int(match.group(3)), int(match.group(4)))
        assert ours["neverAdmitted"] is True
        table = run_plugin("explain", "workload", key, kubeconfig=cp.admin_kubeconfig)
        assert table.returncode == 0, table.stderr
        assert f"it can never be admitted by ClusterQueue {ours['clusterQueue']} as configured" in " ".join(
            table.stdout.split()), table.stdout


def test_queues_usage_agrees_with_the_cluster_queue_status_kueue_writes(kueue_manager):
    cp = kueue_manager
    done = run_plugin("queues", "usage", "-o", "json", kubeconfig=cp.admin_kubeconfig)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["clusterQueues"]
    for row in rows:
        assert row["kueueReserved"] == row["reserved"], row
        assert row["kueueAdmitted"] == row["admitted"], row
    assert [(r["clusterQueue"], r["flavor"], r["reserved"], r["available"], r["pendingWorkloads"]) for r in rows] == [
        ("team-a", "h100", 12, 0, 2), ("team-b", "h100", 4, 0, 1), ("team-b", "mi300x", 4, 4, 2)]


def test_the_same_live_as_on_the_saved_snapshot(kueue_manager, tmp_path):
    """No jobtree.dev CRD on this cluster: the queue reports need none, and `snapshot save` saves what is there
    (one note names our kinds as not installed)."""
    cp = kueue_manager
    saved = run_plugin("snapshot", "save", "-f", str(tmp_path / "s.json"), kubeconfig=cp.admin_kubeconfig)
    assert saved.returncode == 0, saved.stderr
    note, done = saved.stderr.splitlines()
    assert note.endswith("so the snapshot holds none: Budget, Run, Reservation, GPULease (jobtree.dev)"), note
    assert done.startswith("saved ")
    for args in (("queues", "usage"), *(("explain", "workload", key) for key in PENDING)):
        live = run_plugin(*args, "-o", "json", kubeconfig=cp.admin_kubeconfig)
        offline = run_plugin(*args, "-o", "json", "--snapshot", str(tmp_path / "s.json"))
        assert live.returncode == offline.returncode == 0, (args, live.stderr, offline.stderr)
        assert json.loads(live.stdout) == json.loads(offline.stdout), args
