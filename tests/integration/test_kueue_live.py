"""Kueue's real CRDs (sigs.k8s.io/kueue v0.12.3 from the Go module proxy) and the Kaiwo test CRD on a real API
server: the live source lists their objects when the CRDs exist and none (no error) before; `snapshot save`
keeps them; the queue reports give the same JSON live as on the snapshot saved from the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_plugin
from controlplane import DEFAULT_USERS, ControlPlane, skip_reason
from kueue_fleet import install_example

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kueue-fleet.yaml"


@pytest.fixture(scope="module")
def kueue_plane():
    """A control plane of its own (the session's holds the jobtree.dev example; these objects would change its
    snapshots), first without any Kueue CRD."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with ControlPlane(users=DEFAULT_USERS) as cp:
        cp.kubectl("apply", "-f", str(ROOT / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        before = run_plugin("snapshot", "save", kubeconfig=cp.admin_kubeconfig)
        install_example(cp, EXAMPLE)
        cp.before_crds = before
        yield cp


def test_without_the_crds_there_are_no_queue_objects_and_no_error(kueue_plane):
    before = kueue_plane.before_crds
    assert before.returncode == 0, before.stderr
    kinds = {i["kind"] for i in json.loads(before.stdout)["items"]}
    assert kinds.isdisjoint({"ClusterQueue", "Workload", "KaiwoJob"})


def test_snapshot_save_lists_every_queue_kind(kueue_plane, tmp_path):
    saved = run_plugin("snapshot", "save", kubeconfig=kueue_plane.admin_kubeconfig)
    assert saved.returncode == 0, saved.stderr
    assert saved.stderr == ""
    items = json.loads(saved.stdout)["items"]
    counts: dict[str, int] = {}
    for item in items:
        counts[item["kind"]] = counts.get(item["kind"], 0) + 1
    assert counts == {"Node": 4, "ResourceFlavor": 3, "ClusterQueue": 3, "Cohort": 1, "LocalQueue": 4,
                      "Workload": 8, "WorkloadPriorityClass": 2, "KaiwoJob": 2}
    workload = next(i for i in items if i["kind"] == "Workload" and i["metadata"]["name"] == "a-train-1")
    assert workload["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert workload["status"]["admission"]["clusterQueue"] == "team-a"  # status came through the subresource


def test_reader_role_reads_the_queue_kinds(kueue_plane):
    """deploy/rbac-readonly.yaml grants the Kueue and Kaiwo kinds: a reader bound to it saves them all."""
    cp = kueue_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "rbac-readonly.yaml"))
    cp.kubectl("create", "clusterrolebinding", "reader-reads", "--clusterrole=kubectl-runs-reader", "--user=reader")
    saved = run_plugin("snapshot", "save", kubeconfig=cp.kubeconfig_for("reader"))
    assert saved.returncode == 0, saved.stderr
    assert saved.stderr == ""
    assert sum(i["kind"] == "Workload" for i in json.loads(saved.stdout)["items"]) == 8


def test_a_user_who_may_not_read_kueue_still_saves_the_rest(kueue_plane):
    """Without RBAC on the Kueue kinds `snapshot save` notes each refused kind and saves what it may read."""
    cp = kueue_plane
    cp.kubectl("create", "clusterrole", "nodes-only", "--verb=get,list", "--resource=nodes")
    cp.kubectl("create", "clusterrole", "jobtree-only", "--verb=get,list",
               "--resource=budgets.jobtree.dev,runs.jobtree.dev,reservations.jobtree.dev,gpuleases.jobtree.dev")
    cp.kubectl("create", "clusterrolebinding", "nobody-nodes", "--clusterrole=nodes-only", "--user=nobody")
    cp.kubectl("create", "clusterrolebinding", "nobody-jobtree", "--clusterrole=jobtree-only", "--user=nobody")
    saved = run_plugin("snapshot", "save", kubeconfig=cp.kubeconfig_for("nobody"))
    assert saved.returncode == 0, saved.stderr
    assert {i["kind"] for i in json.loads(saved.stdout)["items"]} == {"Node"}
    notes = saved.stderr.splitlines()
    assert len(notes) == 8
    assert all(n.startswith("note: forbidden: ") and "the snapshot holds no" in n for n in notes)


def test_queues_usage_and_explain_the_same_live_as_on_the_saved_snapshot(kueue_plane, tmp_path):
    """Every report on the real CRDs' objects, live and from `snapshot save` of the same cluster: identical JSON."""
    cp = kueue_plane
    saved = run_plugin("snapshot", "save", "-f", str(tmp_path / "saved.json"), kubeconfig=cp.admin_kubeconfig)
    assert saved.returncode == 0, saved.stderr
    commands = [
        ("queues", "usage"),
        ("queues", "usage", "--cohort", "research", "--flavor", "h100"),
        ("explain", "workload", "team-a/a-eval-3"),
        ("explain", "workload", "c-small-1", "-n", "team-c"),
        ("explain", "workload", "a-train-1", "-A"),
        ("explain", "kaiwojob", "mi-finetune", "-n", "team-b"),
    ]
    for args in commands:
        live = run_plugin(*args, "-o", "json", kubeconfig=cp.admin_kubeconfig)
        offline = run_plugin(*args, "-o", "json", "--snapshot", str(tmp_path / "saved.json"))
        assert live.returncode == offline.returncode == 0, (args, live.stderr, offline.stderr)
        assert json.loads(live.stdout) == json.loads(offline.stdout), args
        assert live.stderr == offline.stderr == ""
    usage = json.loads(run_plugin("queues", "usage", "-o", "json", kubeconfig=cp.admin_kubeconfig).stdout)
    assert [(r["clusterQueue"], r["flavor"], r["reserved"], r["pending"], r["headroom"]) for r in
            usage["clusterQueues"]] == [
        ("team-a", "h100", 12, 6, 0), ("team-b", "h100", 4, 0, 0), ("team-b", "mi300x", 8, 16, 8),
        ("team-c", "h100", 0, 4, 0), ("team-c", "a100", 0, 0, 8)]
    explained = json.loads(run_plugin("explain", "kaiwojob", "team-b/mi-finetune", "-o", "json",
                                      kubeconfig=cp.admin_kubeconfig).stdout)
    assert explained["workload"] == "team-b/b-mi-2" and explained["kueue"]["matches"] is True
