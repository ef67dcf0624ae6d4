"""Kueue's real CRDs (sigs.k8s.io/kueue v0.12.3 from the Go module proxy) and the Kaiwo test CRD on a real API
server: the live source lists their objects when the CRDs exist and none (no error) before; `snapshot save`
keeps them; the queue reports give the same JSON live as on the snapshot saved from the cluster. A cluster of
Kueue alone (no jobtree.dev CRDs, a control plane of its own) saves what it has, says what it lacks, and reads
back with the live answers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
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


ABSENT = "jobtree.dev/snapshot-absent-kinds"
QUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "Cohort", "LocalQueue", "Workload", "WorkloadPriorityClass",
               "KaiwoJob", "KaiwoService")


def test_without_the_crds_there_are_no_queue_objects_and_no_error(kueue_plane):
    """jobtree.dev without Kueue: the save succeeds, one note names the kinds not installed, and so does the
    snapshot's annotation."""
    before = kueue_plane.before_crds
    assert before.returncode == 0, before.stderr
    saved = json.loads(before.stdout)
    kinds = {i["kind"] for i in saved["items"]}
    assert kinds.isdisjoint({"ClusterQueue", "Workload", "KaiwoJob"})
    assert saved["metadata"]["annotations"][ABSENT] == ",".join(QUEUE_KINDS)
    assert before.stderr == (
        f"note: not installed on {kueue_plane.server}, so the snapshot holds none: ResourceFlavor, ClusterQueue, "
        "Cohort, LocalQueue, Workload, WorkloadPriorityClass (kueue.x-k8s.io); KaiwoJob, KaiwoService "
        "(kaiwo.silogen.ai)\n")


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
    """Without RBAC on the Kueue kinds (nor on the pods, Events, ResourceQuotas and LimitRanges `pending` reads)
    `snapshot save` notes each refused kind and saves what it may read."""
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
    assert len(notes) == 8 + 4
    assert any("the snapshot holds no pods" in n for n in notes)
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


# --- Kueue alone ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue_only_plane():
    """A control plane with Kueue's and Kaiwo's CRDs and the example's objects, and no jobtree.dev CRD; what
    `snapshot save` says there before any CRD is installed."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with ControlPlane(users=DEFAULT_USERS) as cp:
        cp.bare = run_plugin("snapshot", "save", kubeconfig=cp.admin_kubeconfig)
        install_example(cp, EXAMPLE)
        yield cp


def test_a_cluster_without_any_crd_is_still_an_error(kueue_only_plane):
    """Neither jobtree.dev nor Kueue: most likely the wrong context; the error says how to install ours."""
    bare = kueue_only_plane.bare
    assert (bare.returncode, bare.stdout) == (1, "")
    assert bare.stderr.startswith(f"error: the jobtree.dev CRDs are not installed on {kueue_only_plane.server}")
    assert bare.stderr.endswith("kubectl apply -f crds/\n") and bare.stderr.count("\n") == 1


def test_a_kueue_only_cluster_saves_and_reads_back_the_live_answers(kueue_only_plane, tmp_path):
    cp = kueue_only_plane
    path = tmp_path / "kueue-only.json"
    saved = run_plugin("snapshot", "save", "-f", str(path), kubeconfig=cp.admin_kubeconfig)
    assert saved.returncode == 0, saved.stderr
    document = json.loads(path.read_text())
    assert saved.stderr.splitlines() == [
        f"note: not installed on {cp.server}, so the snapshot holds none: Budget, Run, Reservation, GPULease "
        "(jobtree.dev)",
        f"saved {len(document['items'])} objects to {path}",
    ]
    assert document["metadata"]["annotations"][ABSENT] == "Budget,Run,Reservation,GPULease"
    jsonschema.validate(document, json.loads((ROOT / "docs" / "schemas" / "snapshot.schema.json").read_text()))
    counts: dict[str, int] = {}
    for item in document["items"]:
        counts[item["kind"]] = counts.get(item["kind"], 0) + 1
    assert counts == {"Node": 4, "ResourceFlavor": 3, "ClusterQueue": 3, "Cohort": 1, "LocalQueue": 4,
                      "Workload": 8, "WorkloadPriorityClass": 2, "KaiwoJob": 2}
    commands = [
        ("queues", "usage"),
        ("queues", "usage", "--cohort", "research", "--flavor", "h100"),
        *(("explain", "workload", key) for key in (
            "team-a/a-train-1", "team-a/a-train-2", "team-a/a-eval-3", "team-a/a-eval-4", "team-b/b-ft-1",
            "team-b/b-mi-1", "team-b/b-mi-2", "team-c/c-small-1")),
        ("explain", "kaiwojob", "mi-finetune", "-n", "team-b"),
    ]
    for args in commands:
        live = run_plugin(*args, "-o", "json", kubeconfig=cp.admin_kubeconfig)
        offline = run_plugin(*args, "-o", "json", "--snapshot", str(path))
        assert live.returncode == offline.returncode == 0, (args, live.stderr, offline.stderr)
        assert live.stdout == offline.stdout, args
        assert live.stderr == offline.stderr == "", args
    # and to stdout: the same objects
    to_stdout = run_plugin("snapshot", "save", "--at", "2025-11-20T12:00:00Z", kubeconfig=cp.admin_kubeconfig)
    assert to_stdout.returncode == 0 and to_stdout.stderr.count("\n") == 1, to_stdout.stderr
    assert len(json.loads(to_stdout.stdout)["items"]) == len(document["items"])


def test_the_jobtree_reports_still_say_the_crds_are_missing(kueue_only_plane):
    """Only `snapshot save` saves what is there: `budgets usage` live needs our CRDs and says so."""
    done = run_plugin("budgets", "usage", kubeconfig=kueue_only_plane.admin_kubeconfig)
    assert done.returncode == 1
    assert done.stderr.startswith("error: the jobtree.dev CRDs are not installed on "), done.stderr


def test_a_failed_save_leaves_no_partial_file_and_the_old_file_as_it_was(kueue_only_plane, tmp_path):
    """A user who may not list Nodes: the save fails after nothing was written; the file of that name that
    was there is untouched, and no temporary file is left beside it."""
    path = tmp_path / "fleet.json"
    path.write_text("the earlier snapshot\n")
    done = run_plugin("snapshot", "save", "-f", str(path), kubeconfig=kueue_only_plane.kubeconfig_for("nobody"))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("error: forbidden: "), done.stderr
    assert path.read_text() == "the earlier snapshot\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.json"]


def test_kueue_without_kaiwo_names_both_groups_absent(kueue_only_plane):
    """Last (it removes Kaiwo's CRDs): Kueue alone, neither jobtree.dev nor Kaiwo — one note names both groups."""
    cp = kueue_only_plane
    cp.kubectl("delete", "crd", "kaiwojobs.kaiwo.silogen.ai", "kaiwoservices.kaiwo.silogen.ai", "--wait=true")
    deadline = time.monotonic() + 60
    while cp.request("GET", "/apis/kaiwo.silogen.ai/v1alpha1/kaiwojobs")[0] != 404:
        assert time.monotonic() < deadline, "Kaiwo's kinds are still served"
        time.sleep(0.5)
    saved = run_plugin("snapshot", "save", kubeconfig=cp.admin_kubeconfig)
    assert saved.returncode == 0, saved.stderr
    assert saved.stderr == (
        f"note: not installed on {cp.server}, so the snapshot holds none: Budget, Run, Reservation, GPULease "
        "(jobtree.dev); KaiwoJob, KaiwoService (kaiwo.silogen.ai)\n")
    document = json.loads(saved.stdout)
    assert document["metadata"]["annotations"][ABSENT] == "Budget,Run,Reservation,GPULease,KaiwoJob,KaiwoService"
    assert not any(i["kind"].startswith("Kaiwo") for i in document["items"])
    assert sum(i["kind"] == "Workload" for i in document["items"]) == 8
