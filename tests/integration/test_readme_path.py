"""README.md's path to a running reconciler, run as written on a fresh real API server: the block under
"The reconciler" is read from README.md and each line is run by bash, with ``kubectl`` (which finds the plugin
``kubectl-runs`` on PATH, as krew or pip puts it there) and ``helm`` (built from its Go module) on PATH. The
kustomize line and the Helm line are alternatives, so each gets its own control plane; then the laptop line runs
the reconciler, and the objects of the example fleet (loaded without status) get their status from it.

The one change made to a line: the laptop line's ``--metrics-addr :8080`` gets a free port, so the test does not
depend on port 8080 being free on the machine."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_plugin
from controlplane import ControlPlane
from fleet import read_objects, upload

README = ROOT / "README.md"


def readme_block() -> list[str]:
    """The command lines of the first sh block after the heading "## The reconciler" (comments dropped)."""
    text = README.read_text()
    start = text.index("## The reconciler")
    body = text[text.index("```sh\n", start) + len("```sh\n"):]
    body = body[:body.index("```")]
    lines = []
    for line in body.splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            lines.append(command)
    return lines


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tool_dir(tmp_path: Path, helm: bool) -> Path:
    """A PATH directory with kubectl, the plugin kubectl-runs (this checkout) and helm."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    plugin = bin_dir / "kubectl-runs"
    plugin.write_text(f"#!/bin/sh\nexec {sys.executable} -m kubectl_runs \"$@\"\n")
    plugin.chmod(0o755)
    if helm:
        (bin_dir / "helm").symlink_to(helm_binary())
    return bin_dir


def helm_binary() -> str:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/helm.sh failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _shell(line: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"README line failed: {line}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _load_fleet_without_status(cp) -> list[dict]:
    objects = [o for o in read_objects(str(ROOT / "examples" / "fleet.yaml")) if o["kind"] in ("Node", "Budget", "Run")]
    for obj in objects:
        if obj["kind"] != "Node":
            obj.pop("status", None)
    upload(cp, objects)
    return objects


def _run_laptop_line(line: str, cp, env: dict, budgets: list[dict]) -> None:
    """Start the README's laptop reconciler and wait until every Budget has the status `budgets usage` gives."""
    port = _free_port()
    command = line.replace("--metrics-addr :8080", f"--metrics-addr 127.0.0.1:{port}")
    assert command != line, "the README's laptop line no longer names --metrics-addr :8080"
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        missing = budgets
        while time.monotonic() < deadline and missing:
            missing = [b for b in budgets if not _status_of(cp, b)]
            time.sleep(0.5)
        assert not missing, f"no status on {[b['metadata']['name'] for b in missing]}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "level=error" not in err, err
    usage = json.loads(run_plugin("budgets", "usage", "-o", "json", kubeconfig=cp.admin_kubeconfig).stdout)
    report = {(row["namespace"], row["budget"], row["envelope"]): (row["usedGPUs"], row["headroomGPUs"])
              for row in usage["envelopes"]}
    written = {(b["metadata"]["namespace"], b["metadata"]["name"], e["name"]): (e["usedGPUs"], e["headroomGPUs"])
               for b in budgets for e in _status_of(cp, b)["envelopes"]}
    assert written == report and len(report) == sum(len(b["spec"]["envelopes"]) for b in budgets)


def _status_of(cp, budget: dict) -> dict:
    meta = budget["metadata"]
    code, body = cp.request("GET", f"/apis/jobtree.dev/v1alpha1/namespaces/{meta['namespace']}/budgets/{meta['name']}")
    assert code == 200, body
    return body.get("status") or {}


@pytest.mark.parametrize("install", ["kustomize", "helm"])
def test_readme_path_to_a_running_reconciler(install, controlplane, tmp_path):
    lines = readme_block()
    chosen = [line for line in lines if line.startswith("kubectl apply -k" if install == "kustomize" else "helm ")]
    laptop = [line for line in lines if line.startswith("kubectl runs reconcile")]
    assert len(chosen) == 1 and len(laptop) == 1, lines
    bin_dir = _tool_dir(tmp_path, helm=install == "helm")
    with ControlPlane() as cp:  # a fresh API server: the two installs are alternatives
        env = {**os.environ, "KUBECONFIG": cp.admin_kubeconfig, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
        _shell(chosen[0], env)
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   *(f"crd/{plural}.jobtree.dev" for plural in ("budgets", "runs", "reservations", "gpuleases")))
        deploy = cp.kubectl("get", "deployment", "-n", "kubectl-runs-system", "kubectl-runs-reconciler", "-o", "json")
        container = json.loads(deploy.stdout)["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == "ghcr.io/jobtree-dev/kubectl-runs:v0.1.0"
        budgets = [o for o in _load_fleet_without_status(cp) if o["kind"] == "Budget"]
        _run_laptop_line(laptop[0], cp, env, budgets)
