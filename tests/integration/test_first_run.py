"""A first run of ``kubectl runs reconcile`` as an admin meets it: before the CRDs are installed, and with leader
election pointing at a namespace that does not exist. Each ends at once with one line that says what to do
(exit 1), never with retry warnings or a silent wait."""

from __future__ import annotations

import os
import subprocess
import sys

from kubectl_runs.reconciler.preflight import check_crds, check_lease_namespace
from kubectl_runs.sources import Source
from kubectl_runs.sources.cluster import _api_client


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "retryIn" not in proc.stderr, proc.stderr
    return errors[0]


def test_reconcile_before_the_crds_names_them(reconcile_before_crds, controlplane):
    for proc in reconcile_before_crds:  # --once, then a watching replica
        assert proc.returncode == 1, proc.stderr
        line = _one_error_line(proc)
        assert line.startswith(f"error: the jobtree.dev CRDs are not installed on {controlplane.server}"), line
        assert line.endswith("kubectl apply -f crds/"), line
        assert proc.stdout == ""


def test_missing_leader_election_namespace_is_one_error_not_a_wait(cluster):
    proc = subprocess.run(
        [sys.executable, "-m", "kubectl_runs", "reconcile", "--leader-election-namespace", "no-such-ns-for-lease",
         "--metrics-addr", "0"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "KUBECONFIG": cluster.admin_kubeconfig},
    )
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc)
    assert "namespace no-such-ns-for-lease does not exist" in line, line
    assert "kubectl create namespace no-such-ns-for-lease" in line, line
    assert "--leader-election-namespace" in line and "--no-leader-elect" in line, line


def test_the_checks_pass_on_an_installed_cluster_and_store_nothing(cluster):
    api = _api_client(Source(kubeconfig=cluster.admin_kubeconfig))
    check_crds(api, 10)  # the CRDs are installed: no error
    cluster.kubectl("create", "namespace", "lease-preflight")
    try:
        check_lease_namespace(api, "lease-preflight", "kubectl-runs-reconciler", 10)
        # the check is a dry-run create: no Lease was stored
        got = cluster.kubectl("get", "lease", "-n", "lease-preflight", "kubectl-runs-reconciler", check=False)
        assert got.returncode != 0 and "NotFound" in got.stderr, got
    finally:
        cluster.kubectl("delete", "namespace", "lease-preflight", "--wait=false")
