"""The end-to-end tier: the single-file executable built by scripts/dist, placed on PATH as ``kubectl-runs``
(with the ``kubectl_complete-runs`` helper), driven through the real ``kubectl`` binary as a user would.

The build takes about a minute on two cores; ``scripts/dist --reuse`` keeps it in a cache outside the repo
keyed by a hash of the package sources, the build recipe and the installed packages, so repeated runs (and
fresh clones on the same machine) reuse it. These tests are skipped where kubectl is absent, and that skip
becomes a failure where KUBECTL_RUNS_REQUIRE_CONTROLPLANE is set (CI), as for the integration tier.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 30 * 60  # seconds; a cold build takes about one minute here


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


def _unavailable(reason: str) -> None:
    if os.environ.get("KUBECTL_RUNS_REQUIRE_CONTROLPLANE"):
        pytest.fail(f"e2e tier required here: {reason}")
    pytest.skip(reason)


@dataclass(frozen=True)
class Plugin:
    """``kubectl runs …`` with only the built executable and kubectl on PATH."""

    binary: Path
    bindir: Path
    kubectl: str
    env: dict[str, str]

    def kubectl_runs(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
        return self.run(self.kubectl, "runs", *args, env=env, timeout=timeout)

    def run(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 120):
        return subprocess.run(
            list(argv), capture_output=True, text=True, env={**self.env, **(env or {})}, timeout=timeout,
            cwd=ROOT,
        )


@pytest.fixture(scope="session")
def built_binary() -> Path:
    """dist/kubectl-runs, built now or reused from the cache (scripts/dist --reuse)."""
    if os.environ.get("KUBECTL_RUNS_E2E_BINARY"):  # test a binary built elsewhere (the release workflow)
        return Path(os.environ["KUBECTL_RUNS_E2E_BINARY"]).resolve()
    done = subprocess.run(
        [str(ROOT / "scripts" / "dist"), "--reuse"], capture_output=True, text=True, timeout=BUILD_TIMEOUT,
        cwd=ROOT,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/dist failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return ROOT / "dist" / "kubectl-runs"


@pytest.fixture(scope="session")
def plugin(built_binary, tmp_path_factory) -> Plugin:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        _unavailable("kubectl is not on PATH")
    bindir = tmp_path_factory.mktemp("plugin-bin")
    os.symlink(built_binary, bindir / "kubectl-runs")
    shutil.copy2(ROOT / "completions" / "kubectl_complete-runs", bindir / "kubectl_complete-runs")
    home = tmp_path_factory.mktemp("home")
    env = {
        # Only the plugin directory, kubectl's and the system's: no virtualenv with another kubectl-runs.
        "PATH": os.pathsep.join([str(bindir), os.path.dirname(kubectl), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "KUBECONFIG": str(home / "no-kubeconfig"),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LANG": "C.UTF-8",
    }
    return Plugin(binary=built_binary, bindir=bindir, kubectl=kubectl, env=env)
