"""The Kueue/Kaiwo adapter: snapshots holding kueue.x-k8s.io and kaiwo.silogen.ai objects load into their own
typed model (kubectl_runs.kueue.model), on the JSON fast path as in YAML; `snapshot save` keeps them; errors
name the object and the field path; quantities are counted as Kueue counts them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kubectl_runs.cli.main import main
from kubectl_runs.kueue.model import ClusterQueue, KaiwoJob, Workload, quantity, show_quantity
from kubectl_runs.sources.files import SnapshotError, load_snapshot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kueue-fleet.yaml"


def run_cli(args, capsys, stdin=None):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_example_loads_every_kind_sorted():
    snapshot = load_snapshot([str(EXAMPLE)])
    queues = snapshot.queues
    assert [f.name for f in queues.flavors] == ["a100", "h100", "mi300x"]
    assert [cq.name for cq in queues.cluster_queues] == ["team-a", "team-b", "team-c"]
    assert [c.name for c in queues.cohorts] == ["research"]
    assert [lq.key for lq in queues.local_queues] == ["team-a/default", "team-b/default", "team-c/default",
                                                      "team-d/default"]
    assert [w.key for w in queues.workloads][:3] == ["team-a/a-eval-3", "team-a/a-eval-4", "team-a/a-train-1"]
    assert {pc.name: pc.value for pc in queues.priority_classes} == {"high": 1000, "low": 100}
    assert [j.key for j in queues.kaiwo_jobs] == ["team-b/mi-finetune", "team-b/mi-pretrain"]
    assert snapshot.notes == ()  # nothing ignored: every kind in the file is read
    assert len(snapshot.nodes) == 4 and snapshot.budgets == ()


def test_typed_records_hold_what_the_reports_read():
    queues = load_snapshot([str(EXAMPLE)]).queues
    team_a = next(cq for cq in queues.cluster_queues if cq.name == "team-a")
    assert isinstance(team_a, ClusterQueue)
    assert team_a.spec.cohort == "research"
    quota = team_a.spec.resource_groups[0].flavors[0].resources[0]
    assert (quota.name, quota.nominal_quota, quota.borrowing_limit, quota.lending_limit) == ("nvidia.com/gpu", 8, 4, 4)
    assert team_a.spec.preemption.within_cluster_queue == "LowerPriority"
    by_name = {w.name: w for w in queues.workloads}
    admitted, pending = by_name["a-train-1"], by_name["a-eval-3"]
    assert isinstance(admitted, Workload)
    assert admitted.quota_reserved and admitted.admitted and not admitted.pending
    assert pending.pending and not pending.quota_reserved
    assert pending.condition("QuotaReserved").message.endswith("4 more needed")
    assert pending.spec.pod_sets[0].count == 2
    assert admitted.status.admission.pod_set_assignments[0].flavors == {"nvidia.com/gpu": "h100"}
    job = queues.kaiwo_jobs[0]
    assert isinstance(job, KaiwoJob) and job.spec.gpu_vendor == "amd"


def test_json_fast_path_and_snapshot_save_round_trip(capsys, tmp_path):
    """`snapshot save --snapshot` re-encodes the typed records with their apiVersions; reading the JSON back (the
    typed-List fast path) gives the same objects."""
    code, out, err = run_cli(["snapshot", "save", "--snapshot", str(EXAMPLE)], capsys)
    assert code == 0, err
    document = json.loads(out)
    versions = {(i["kind"], i["apiVersion"]) for i in document["items"]}
    assert ("ClusterQueue", "kueue.x-k8s.io/v1beta1") in versions
    assert ("Cohort", "kueue.x-k8s.io/v1alpha1") in versions
    assert ("KaiwoJob", "kaiwo.silogen.ai/v1alpha1") in versions
    saved = tmp_path / "saved.json"
    saved.write_text(out)
    assert load_snapshot([str(saved)]).queues == load_snapshot([str(EXAMPLE)]).queues


def test_namespace_narrowing_keeps_cluster_scoped_kinds():
    queues = load_snapshot([str(EXAMPLE)]).in_namespace("team-b").queues
    assert len(queues.cluster_queues) == 3 and len(queues.flavors) == 3 and len(queues.priority_classes) == 2
    assert {w.namespace for w in queues.workloads} == {"team-b"}
    assert [lq.key for lq in queues.local_queues] == ["team-b/default"]


BAD_WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: w1, namespace: ml}
spec:
  queueName: default
  podSets:
  - name: main
    count: two
"""


def test_a_bad_field_names_file_object_and_path(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(BAD_WORKLOAD)
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([str(path)])
    assert str(caught.value) == f"{path}: Workload ml/w1: spec.podSets[0].count: expected int, got str"
    cluster_scoped = tmp_path / "cq.json"
    cluster_scoped.write_text(json.dumps({"kind": "ClusterQueue", "metadata": {"name": "cq"},
                                          "spec": {"resourceGroups": "x"}}))
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([str(cluster_scoped)])
    assert str(caught.value) == f"{cluster_scoped}: ClusterQueue cq: spec.resourceGroups: expected array, got str"


def test_two_different_copies_of_a_cluster_scoped_object_are_refused(tmp_path):
    """Issue 11's rule for every kind a snapshot holds: identical copies are read once, differing copies are
    refused naming both files (a snapshot holds what the API server would store: one copy)."""
    from kubectl_runs.sources.files import SnapshotError

    first = {"kind": "ResourceFlavor", "metadata": {"name": "h100"}, "spec": {"nodeLabels": {"a": "1"}}}
    second = {"kind": "ResourceFlavor", "metadata": {"name": "h100"}, "spec": {"nodeLabels": {"a": "2"}}}
    (tmp_path / "1.json").write_text(json.dumps(first))
    (tmp_path / "2.json").write_text(json.dumps(second))
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([str(tmp_path)])
    assert caught.value.message == (
        f"{tmp_path / '2.json'}: ResourceFlavor h100 is also in {tmp_path / '1.json'} with different content: a "
        "snapshot holds one copy of each object (remove the copy that is wrong)")
    (tmp_path / "2.json").write_text(json.dumps(first))
    flavors = load_snapshot([str(tmp_path)]).queues.flavors
    assert [f.spec.node_labels for f in flavors] == [{"a": "1"}]


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        ("8", "nvidia.com/gpu", 8),
        (8, "amd.com/gpu", 8),
        ("500m", "cpu", 500),
        ("2", "cpu", 2000),
        (2, "cpu", 2000),
        ("1Gi", "memory", 1 << 30),
        ("1.5k", "memory", 1500),
        ("1e3", "pods", 1000),
        ("100m", "memory", 1),  # rounded up to a whole unit, as Quantity.Value() does
        ("nonsense", "nvidia.com/gpu", 0),
        (None, "nvidia.com/gpu", 0),
    ],
    ids=["gpu-string", "gpu-int", "millicores", "cores", "int-cores", "binary", "decimal", "exponent", "round-up",
         "not-a-quantity", "absent"],
)
def test_quantities_in_kueue_units(value, resource, expected):
    assert quantity(value, resource) == expected


def test_quantities_shown_as_kueue_shows_them():
    assert show_quantity(4, "nvidia.com/gpu") == "4"
    assert show_quantity(1500, "cpu") == "1500m"
    assert show_quantity(2000, "cpu") == "2"


def test_budget_reports_ignore_the_queue_objects(capsys):
    """A Kueue snapshot has no Budgets: `budgets usage` says so and notes nothing about ignored kinds."""
    code, out, err = run_cli(["budgets", "usage", "--snapshot", str(EXAMPLE)], capsys)
    assert code == 0
    assert out == ""
    assert err == "No budgets found.\n"


def test_stdin_snapshot_with_queue_objects():
    data = EXAMPLE.read_bytes()
    snapshot = load_snapshot(["-"], stdin=io.BytesIO(data))
    assert len(snapshot.queues.workloads) == 8
