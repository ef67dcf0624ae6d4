"""``kubectl runs …`` through the real kubectl, with the single-file build as the plugin: the same answers as the
Python package, kubectl's plugin conventions (flags after the plugin name, exit codes passed through), errors in
one line, the kubernetes client working inside the frozen executable, and completion through kubectl.

Snapshot cases read examples/fleet.yaml at AT; the expected output is what the installed package prints for the
same arguments, so these tests pin the frozen build to the sources rather than to the example's numbers
(tests/unit pins the numbers).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_runs import __version__
from kubectl_runs.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = "2025-11-20T12:00:00Z"
USAGE_KEYS = {
    "namespace", "budget", "owner", "envelope", "flavor", "windowActive", "concurrency", "usedGPUs",
    "headroomGPUs", "ownedGPUs", "sharedGPUs", "borrowedGPUs", "unfundedGPUs", "spareGPUs", "consumedGPUHours",
    "maxGPUHours", "gpuHoursHeadroom",
}


def python_package(*args: str) -> subprocess.CompletedProcess:
    """The same command from the sources (python -m kubectl_runs)."""
    return subprocess.run(
        [sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize(
    "args",
    [
        ["budgets", "usage", "--snapshot", EXAMPLE, "--at", AT],
        ["budgets", "usage", "--snapshot", EXAMPLE, "--at", AT, "-o", "wide"],
        ["budgets", "usage", "--snapshot", EXAMPLE, "--at", AT, "-o", "json"],
        ["budgets", "usage", "--snapshot", EXAMPLE, "--at", AT, "-o", "csv", "--owner", "org:ai:rai"],
        ["-o", "yaml", "--snapshot", EXAMPLE, "budgets", "usage", "--at", AT],
    ],
    ids=["table", "wide", "json", "csv-owner", "flags-before-words"],
)
def test_budgets_usage_matches_the_package(plugin, args):
    frozen = plugin.kubectl_runs(*args)
    source = python_package(*args)
    assert (frozen.returncode, frozen.stderr) == (0, source.stderr)
    assert frozen.stdout == source.stdout
    assert frozen.stdout.strip()


def test_budgets_usage_json_shape(plugin):
    done = plugin.kubectl_runs("budgets", "usage", "--snapshot", EXAMPLE, "--at", AT, "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["at"] == AT
    assert {"at", "envelopes", "aggregates", "findings"} <= set(report)
    assert report["envelopes"], "the example fleet has envelopes"
    assert all(set(e) == USAGE_KEYS for e in report["envelopes"])


def test_snapshot_from_stdin(plugin):
    """``--snapshot -`` through kubectl: the plugin's stdin is the user's."""
    with open(EXAMPLE, encoding="utf-8") as handle:
        done = subprocess.run(
            [plugin.kubectl, "runs", "budgets", "usage", "--snapshot", "-", "--at", AT, "-o", "json"],
            stdin=handle, capture_output=True, text=True, env=plugin.env, timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["at"] == AT


def test_bad_flag_is_usage_error(plugin):
    done = plugin.kubectl_runs("budgets", "usage", "--snapshot", EXAMPLE, "--bogus")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "error: no such option '--bogus'.\nSee 'kubectl runs budgets usage --help' for usage.\n"
    assert "Traceback" not in done.stderr


def test_bad_output_format_is_usage_error(plugin):
    done = plugin.kubectl_runs("budgets", "usage", "--snapshot", EXAMPLE, "-o", "xml")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "xml" in done.stderr


def test_missing_snapshot_file_fails_in_one_line(plugin):
    done = plugin.kubectl_runs("budgets", "usage", "--snapshot", "no/such/file.yaml")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1, done.stderr


OBJECT_COMMANDS = [("plan", ["plan"]), ("explain", ["explain"]), ("seeds", ["seeds", "verify"])]


@pytest.mark.parametrize(("command", "words"), OBJECT_COMMANDS, ids=[" ".join(w) for _, w in OBJECT_COMMANDS])
def test_missing_object_fails_in_one_line(plugin, command, words):
    """A Run (plan, explain) or Reservation (seeds verify) that does not exist: exit 1, one line on stderr."""
    if command not in COMMANDS:
        pytest.skip(f"`{command}` is not registered yet")
    done = plugin.kubectl_runs(*words, "no-such-object", "-n", "rai-sys", "--snapshot", EXAMPLE, "--at", AT)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "no-such-object" in done.stderr
    assert "not found" in done.stderr


def test_unreachable_cluster_is_one_line_not_an_import_error(plugin, tmp_path):
    """A live command against a server that refuses connections: the kubernetes client inside the frozen
    executable is importable and working, and the failure is one line with exit 1."""
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        "clusters: [{name: dead, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: u}}]\n"
    )
    done = plugin.kubectl_runs("budgets", "usage", "--kubeconfig", str(kubeconfig), "--request-timeout", "5s")
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "127.0.0.1:1" in done.stderr
    for symptom in ("ImportError", "ModuleNotFoundError", "internal error", "Traceback"):
        assert symptom not in done.stderr


def test_version_names_the_build(plugin):
    done = plugin.kubectl_runs("version")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"kubectl-runs {re.escape(__version__)} \(commit [0-9a-f]{{7,}}(-dirty)?, Python 3\.\d+\.\d+, "
        r"(linux|darwin)/(x86_64|amd64|aarch64|arm64)\)\n",
        done.stdout,
    ), done.stdout
    info = json.loads(plugin.kubectl_runs("version", "-o", "json").stdout)
    assert info["frozen"] is True
    assert info["version"] == __version__


def test_help_through_kubectl(plugin):
    done = plugin.kubectl_runs("--help")
    assert done.returncode == 0
    assert done.stdout.startswith("Usage: kubectl runs")
    assert "budgets" in done.stdout


def test_kubectl_completes_plugin_arguments(plugin):
    """kubectl's own completion (``kubectl __complete``) asks kubectl_complete-runs for `kubectl runs bud<TAB>`."""
    done = plugin.run(plugin.kubectl, "__complete", "runs", "bud")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("budgets\t")
    assert lines[-1] == ":4"


def test_kubectl_completes_flag_values(plugin):
    done = plugin.run(plugin.kubectl, "__complete", "runs", "budgets", "usage", "-o", "")
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == [
        "table", "wide", "json", "yaml", "csv", ":4",
    ]


def test_build_leaves_out_what_is_never_imported(plugin):
    """kubectl-runs.spec leaves out what kubectl-runs never imports: test, GUI and packaging modules, and the
    kubernetes client's typed API classes and models (the client itself is in)."""
    from PyInstaller.archive.readers import CArchiveReader

    modules = set(CArchiveReader(str(plugin.binary)).open_embedded_archive("PYZ.pyz").toc)
    assert "kubectl_runs.cli.main" in modules
    assert "kubernetes.client.api_client" in modules and "kubernetes.config.kube_config" in modules
    for left_out in ("tkinter", "unittest", "pytest", "setuptools", "kubernetes.client.api.core_v1_api",
                     "kubernetes.client.models.v1_pod"):
        assert left_out not in modules
