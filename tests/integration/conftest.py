"""The integration tier: this project's CRDs on a real kube-apiserver backed by etcd (tests/controlplane),
reached over HTTPS with real kubeconfigs, tokens and RBAC. Skipped only where Go is absent, and never when
KUBECTL_RUNS_REQUIRE_CONTROLPLANE is set (CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controlplane import DEFAULT_USERS, ControlPlane, skip_reason  # noqa: E402
from fleet import install_example  # noqa: E402

EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = "2025-11-20T12:00:00Z"


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


def run_plugin(*args: str, kubeconfig: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``kubectl-runs ARGS`` as a user runs it: a separate process, KUBECONFIG from the environment."""
    full_env = dict(os.environ if env is None else env)
    if kubeconfig:
        full_env["KUBECONFIG"] = kubeconfig
    return subprocess.run(
        [sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True, env=full_env, timeout=120
    )


@pytest.fixture(scope="session")
def controlplane():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # "team" may read the jobtree.dev kinds of namespace rai-sys only (and nodes): a namespace-bound user.
    with ControlPlane(users={**DEFAULT_USERS, "team": ()}) as cp:
        yield cp


@pytest.fixture(scope="session")
def before_crds(controlplane):
    """What a report says against a server that does not have the CRDs yet (run before they are applied)."""
    return run_plugin("budgets", "usage", kubeconfig=controlplane.admin_kubeconfig)


@pytest.fixture(scope="session")
def reconcile_before_crds(controlplane):
    """What ``reconcile`` says on its first run against a server without the CRDs: once, and watching."""
    kubeconfig = controlplane.admin_kubeconfig
    return (run_plugin("reconcile", "--once", kubeconfig=kubeconfig),
            run_plugin("reconcile", "--no-leader-elect", "--metrics-addr", "0", kubeconfig=kubeconfig))


@pytest.fixture(scope="session")
def cluster(controlplane, before_crds, reconcile_before_crds):
    """The control plane with crds/ applied and Established, the read-only ClusterRole bound to ``reader``,
    and the example fleet loaded (objects, then their status through the status subresource)."""
    cp = controlplane
    install_example(cp, ROOT)
    cp.kubectl("create", "rolebinding", "team-reads-runs", "-n", "rai-sys", "--clusterrole=kubectl-runs-reader",
               "--user=team")
    cp.kubectl("create", "clusterrole", "node-reader", "--verb=get,list,watch", "--resource=nodes")
    cp.kubectl("create", "clusterrolebinding", "team-reads-nodes", "--clusterrole=node-reader", "--user=team")
    return cp
