"""``kubectl runs reconcile`` from the single-file executable through kubectl, with a kubeconfig, against a real
API server holding the example fleet: --dry-run prints what the package computes, --once writes it and a second
--dry-run has nothing left to do, and the watching reconciler (with its metrics server: prometheus-client is in
the build) writes a new run's status and stops on SIGTERM with exit code 0."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from controlplane import ControlPlane, skip_reason  # noqa: E402
from fleet import install_example  # noqa: E402

CLOCK_KEYS = ("updatedAt", "lastTransitionTime", "earliestStart")  # depend on the second each process ran at


@pytest.fixture(scope="module")
def cluster():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with ControlPlane() as cp:
        install_example(cp, ROOT)
        yield cp


def _without_clock(value):
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in CLOCK_KEYS}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def test_dry_run_once_and_watch_from_the_binary(plugin, cluster):
    env = {"KUBECONFIG": cluster.admin_kubeconfig}
    frozen = plugin.kubectl_runs("reconcile", "--dry-run", env=env)
    assert frozen.returncode == 0, frozen.stderr
    package = subprocess.run([sys.executable, "-m", "kubectl_runs", "reconcile", "--dry-run"], capture_output=True,
                             text=True, timeout=120, cwd=ROOT, env={"KUBECONFIG": cluster.admin_kubeconfig,
                                                                     "PATH": "/usr/bin:/bin"})
    assert package.returncode == 0, package.stderr
    actions = json.loads(frozen.stdout)
    assert actions and {a["action"] for a in actions} == {"PatchStatus"}
    assert _without_clock(actions) == _without_clock(json.loads(package.stdout))

    once = plugin.kubectl_runs("reconcile", "--once", env=env)
    assert once.returncode == 0, once.stderr
    assert once.stderr.count("msg=write ") == len(actions)
    again = plugin.kubectl_runs("reconcile", "--dry-run", env=env)
    assert (again.returncode, again.stdout.strip()) == (0, "[]")

    watch = subprocess.Popen([plugin.kubectl, "runs", "reconcile", "--no-leader-elect", "--metrics-addr",
                              "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env={**plugin.env, **env}, cwd=ROOT)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not any("msg=synced" in line for line in lines):
            assert time.monotonic() < deadline, "\n".join(lines)
            lines.append(watch.stderr.readline())
        [url] = [m.group(1) for m in (re.search(r"url=(\S+)", line) for line in lines) if m]
        with urllib.request.urlopen(url + "/readyz", timeout=10) as answer:
            assert answer.status == 200
        created = cluster.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": "from-e2e", "namespace": "rai-sys"},
            "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": 8}}}))
        assert created.returncode == 0
        while True:
            assert time.monotonic() < deadline, "\n".join(lines)
            status = cluster.request("GET", "/apis/jobtree.dev/v1alpha1/namespaces/rai-sys/runs/from-e2e")[1]
            if status.get("status", {}).get("plan"):
                break
            time.sleep(0.1)
    finally:
        watch.send_signal(signal.SIGTERM)
        _out, rest = watch.communicate(timeout=30)
    assert watch.returncode == 0, rest
    assert "msg=signal signal=SIGTERM" in rest and "msg=stopped" in rest
