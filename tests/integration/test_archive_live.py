"""``leases archive --prune`` against the real API server (no mocks): deploy/overlays/lease-archive applied, the
archiver's own ServiceAccount token used; closed leases are archived, re-read, then deleted with preconditions;
open leases stay; a process SIGKILLed between the archive's commit and the deletes, or between two deletes, loses
nothing and counts nothing twice — the re-run converges and the audit over cluster + archive is the audit of
before. The overlay's RBAC: read and delete GPULeases, nothing else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT
from fleet import upload
from test_rbac_deploy import sa_kubeconfig

from kubectl_runs.archive import reader
from kubectl_runs.archive.store import CRASH_ENV
from kubectl_runs.timeutil import EARLIEST, LATEST

NS = "kubectl-runs-system"
SA = f"system:serviceaccount:{NS}:kubectl-runs-archiver"
AT = "2025-11-20T12:00:00Z"


def leases(namespace: str, closed: int, open_: int) -> list[dict]:
    out = []
    for i in range(closed + open_):
        spec = {"owner": "org:ai:archive", "runRef": {"namespace": namespace, "name": f"run-{i % 3}"},
                "group": i % 2, "flavor": "H100-80GB",
                "slice": {"slots": [f"gpu-a-0{1 + i % 3}#{i % 8}"], "role": "Active"},
                "start": f"2025-1{0 + (i % 2)}-{10 + i:02d}T0{i % 10}:00:00Z", "reason": "Start"}
        obj = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease",
               "metadata": {"name": f"lease-{i:02d}", "namespace": namespace}, "spec": spec}
        if i < closed:
            obj["status"] = {"closed": True, "ended": f"2025-11-{10 + i:02d}T1{i % 10}:00:00Z",
                             "closureReason": "Completed"}
        out.append(obj)
    return out


def plugin(kubeconfig: str, *args: str, crash: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["KUBECONFIG"] = kubeconfig
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def live_names(cluster, namespace: str) -> list[str]:
    done = cluster.kubectl("get", "gpuleases.jobtree.dev", "-n", namespace, "-o", "json")
    return sorted(item["metadata"]["name"] for item in json.loads(done.stdout)["items"])


def archived(directory) -> list[tuple[str, str, str]]:
    got = reader.leases_between([reader.open_archive(directory)], EARLIEST, LATEST)
    return sorted((x.metadata.namespace, x.metadata.name, x.metadata.uid) for x in got)


USED: list[str] = []  # namespaces this module put leases in


@pytest.fixture(autouse=True)
def cleaned(cluster):
    """The session's cluster is shared with the other live tests, which read the example fleet: every lease
    this module creates is deleted again after each test (namespaces cannot be: no namespace controller runs)."""
    yield
    while USED:
        cluster.kubectl("delete", "gpuleases.jobtree.dev", "--all", "-n", USED.pop(), "--wait=false")


def put(cluster, namespace: str, closed: int, open_: int) -> None:
    USED.append(namespace)
    upload(cluster, leases(namespace, closed, open_))


@pytest.fixture(scope="module")
def archiver(cluster, tmp_path_factory):
    cluster.kubectl("apply", "-k", str(ROOT / "deploy" / "overlays" / "lease-archive"))
    token = cluster.kubectl("create", "token", "kubectl-runs-archiver", "-n", NS, "--duration=1h").stdout.strip()
    return sa_kubeconfig(cluster, token, tmp_path_factory.mktemp("sa") / "archiver.kubeconfig")


def test_the_archiver_may_read_and_delete_leases_and_nothing_else(cluster, archiver):
    def can(verb: str, resource: str) -> bool:
        done = cluster.kubectl("auth", "can-i", verb, resource, "--as", SA, "-A", check=False)
        return done.stdout.strip() == "yes"

    assert can("delete", "gpuleases.jobtree.dev") and can("list", "gpuleases.jobtree.dev")
    assert can("list", "nodes") and can("list", "budgets.jobtree.dev")
    for verb, resource in (("create", "gpuleases.jobtree.dev"), ("patch", "gpuleases.jobtree.dev"),
                           ("update", "gpuleases.jobtree.dev"), ("patch", "gpuleases.jobtree.dev/status"),
                           ("delete", "runs.jobtree.dev"), ("delete", "budgets.jobtree.dev"), ("delete", "nodes")):
        assert not can(verb, resource), (verb, resource)


def test_prune_deletes_only_archived_closed_leases(cluster, archiver, tmp_path):
    namespace = "archive-live"
    put(cluster, namespace, closed=10, open_=3)
    audit_args = ("leases", "audit", "-n", namespace, "--at", AT, "--since", "2025-09-01", "-o", "json")
    before = plugin(archiver, *audit_args)
    assert before.returncode == 0, before.stderr
    target = str(tmp_path / "archive")
    done = plugin(archiver, "leases", "archive", "-n", namespace, "--at", AT, "--to", target, "--prune", "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["added"], report["pruned"], report["open"], report["pruneLeft"]) == (10, 10, 3, [])
    assert live_names(cluster, namespace) == ["lease-10", "lease-11", "lease-12"]  # the open ones
    assert [k[1] for k in archived(target)] == [f"lease-{i:02d}" for i in range(10)]
    after = plugin(archiver, *audit_args, "--archive", target)
    assert (after.returncode, after.stdout) == (0, before.stdout)
    again = plugin(archiver, "leases", "archive", "-n", namespace, "--at", AT, "--to", target, "--prune", "-o", "json")
    assert (json.loads(again.stdout)["added"], json.loads(again.stdout)["pruned"]) == (0, 0)


@pytest.mark.parametrize("crash", ["done", "deleted:1", "deleted:6"])
def test_killed_between_write_and_delete_loses_and_doubles_nothing(cluster, archiver, tmp_path, crash):
    namespace = f"archive-kill-{crash.replace(':', '-')}"
    put(cluster, namespace, closed=8, open_=2)
    audit_args = ("leases", "audit", "-n", namespace, "--at", AT, "--since", "2025-09-01", "-o", "json")
    before = plugin(archiver, *audit_args)
    names = live_names(cluster, namespace)
    target = str(tmp_path / "archive")
    killed = plugin(archiver, "leases", "archive", "-n", namespace, "--at", AT, "--to", target, "--prune", crash=crash)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    deleted = {"done": 0, "deleted:1": 1, "deleted:6": 6}[crash]
    assert len(live_names(cluster, namespace)) == len(names) - deleted
    assert len(archived(target)) == 8  # the archive was committed before any delete
    # nothing lost, nothing twice: cluster + archive audit as before, in the middle of the crash already
    middle = plugin(archiver, *audit_args, "--archive", target)
    assert (middle.returncode, middle.stdout) == (0, before.stdout)

    again = plugin(archiver, "leases", "archive", "-n", namespace, "--at", AT, "--to", target, "--prune", "-o", "json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["added"], report["alreadyArchived"], report["pruned"]) == (0, 8 - deleted, 8 - deleted)
    assert live_names(cluster, namespace) == ["lease-08", "lease-09"]
    assert len(set(archived(target))) == len(archived(target)) == 8
    assert not reader.verify(target).problems and not reader.verify(target).stray
    after = plugin(archiver, *audit_args, "--archive", target)
    assert (after.returncode, after.stdout) == (0, before.stdout)


def test_prune_needs_delete_rights_and_a_cluster(cluster, tmp_path):
    namespace = "archive-noperm"
    put(cluster, namespace, closed=2, open_=0)
    cluster.kubectl("create", "rolebinding", "reader-reads", "-n", namespace, "--clusterrole=kubectl-runs-reader",
                    "--user=reader")
    done = plugin(cluster.kubeconfig_for("reader"), "leases", "archive", "-n", namespace, "--to",
                  str(tmp_path / "a"), "--prune")
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: forbidden: ")
    assert "gpuleases" in done.stderr and "delete" in done.stderr
    assert live_names(cluster, namespace) == ["lease-00", "lease-01"]
    assert len(archived(tmp_path / "a")) == 2  # archived, not deleted: the next run with the rights prunes them
    done = plugin(cluster.kubeconfig_for("reader"), "leases", "archive", "--snapshot",
                  str(ROOT / "examples" / "fleet.yaml"), "--to", str(tmp_path / "b"), "--prune")
    assert done.returncode == 2 and "--prune deletes leases from the cluster" in done.stderr
