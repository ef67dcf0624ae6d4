"""The single-file build through kubectl against a real kube-apiserver (tests/controlplane): this project's
CRDs applied, the example fleet uploaded, real kubeconfigs with TLS and tokens. It shows that the frozen
executable carries a working kubernetes client (TLS, CA bundle, pagination, error mapping), not just an
importable one, and that live and saved answers agree.

Skipped where the control plane cannot be built (no Go), except where KUBECTL_RUNS_REQUIRE_CONTROLPLANE is
set (CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = "2025-11-20T12:00:00Z"
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from controlplane import ControlPlane, skip_reason  # noqa: E402
from fleet import install_example, read_objects  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with ControlPlane() as cp:
        install_example(cp, ROOT)
        yield cp


def python_package(*args: str, kubeconfig: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={"KUBECONFIG": kubeconfig, "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(
    "args",
    [["budgets", "usage", "--at", AT], ["budgets", "usage", "--at", AT, "-o", "json"],
     ["budgets", "usage", "--at", AT, "-n", "rai-sys", "-o", "wide"]],
    ids=["table", "json", "namespace-wide"],
)
def test_live_report_matches_the_package(plugin, cluster, args):
    kubeconfig = cluster.kubeconfig_for("reader")
    frozen = plugin.kubectl_runs(*args, env={"KUBECONFIG": kubeconfig})
    source = python_package(*args, kubeconfig=kubeconfig)
    assert frozen.returncode == 0, frozen.stderr
    assert (frozen.stdout, frozen.stderr) == (source.stdout, source.stderr)


def test_saved_snapshot_gives_the_live_answer(plugin, cluster, tmp_path):
    env = {"KUBECONFIG": cluster.kubeconfig_for("admin")}
    saved = plugin.kubectl_runs("snapshot", "save", env=env)
    assert saved.returncode == 0, saved.stderr
    assert json.loads(saved.stdout)["kind"] == "List"
    path = tmp_path / "saved.json"
    path.write_text(saved.stdout)
    live = plugin.kubectl_runs("budgets", "usage", "--at", AT, "-o", "json", env=env)
    offline = plugin.kubectl_runs("budgets", "usage", "--at", AT, "-o", "json", "--snapshot", str(path))
    assert live.returncode == offline.returncode == 0, live.stderr + offline.stderr
    assert json.loads(live.stdout) == json.loads(offline.stdout)
    assert json.loads(live.stdout)["envelopes"]


def test_forbidden_is_one_line(plugin, cluster):
    done = plugin.kubectl_runs("budgets", "usage", env={"KUBECONFIG": cluster.kubeconfig_for("nobody")})
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("error: forbidden: ")
    assert done.stderr.count("\n") == 1, done.stderr


def test_run_names_complete_from_the_cluster(plugin, cluster):
    """`kubectl runs plan -n rai-sys <TAB>` lists the Runs of rai-sys from the API server."""
    from kubectl_runs.cli.main import COMMANDS

    if "plan" not in COMMANDS:
        pytest.skip("`plan` is not registered yet")
    env = {"KUBECONFIG": cluster.kubeconfig_for("reader")}
    done = plugin.run(plugin.kubectl, "__complete", "runs", "plan", "-n", "rai-sys", "", env=env)
    names = [line.split("\t")[0] for line in done.stdout.splitlines()]
    expected = sorted(o["metadata"]["name"] for o in read_objects(EXAMPLE)
                      if o["kind"] == "Run" and o["metadata"]["namespace"] == "rai-sys")
    assert names == [*expected, ":4"]
