"""Reports over several clusters (docs/commands.md, "Several clusters"): the merge of each cluster's Document
(views/clusters.py: a CLUSTER column, a headline per cluster, a total that says it is a sum, a failed cluster
named and never dropped), snapshot files grouped by the cluster they recorded, the exit codes, the JSON Schemas,
and that one cluster starts and prints as before. Against real API servers: tests/integration/test_clusters_live.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import run_cli
from jsonschema import Draft202012Validator

from kubectl_runs.engine import cluster_schemas
from kubectl_runs.render import Column, Document, Section, render
from kubectl_runs.sources.contexts import live_targets, recorded_cluster, snapshot_targets
from kubectl_runs.views import clusters as views

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
KUEUE = str(ROOT / "examples" / "kueue-fleet.yaml")


def stamped(tmp_path: Path, source: str, context: str | None, server: str | None = None) -> str:
    """``source`` saved as one cluster's snapshot, recording ``context`` and ``server`` as `snapshot save` does."""
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "snapshot", "save", "--snapshot", source],
                          capture_output=True, text=True, check=True, timeout=120)
    document = json.loads(done.stdout)
    annotations = document["metadata"]["annotations"]
    if context:
        annotations["jobtree.dev/snapshot-context"] = context
    if server:
        annotations["jobtree.dev/snapshot-server"] = server
    path = tmp_path / f"{context or 'bare'}-{Path(source).stem}.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> tuple[str, str]:
    directory = tmp_path_factory.mktemp("clusters")
    return (stamped(directory, EXAMPLE, "east", "https://east.example:6443"),
            stamped(directory, EXAMPLE, "west", "https://west.example:6443"))


# --- the merge (pure) -------------------------------------------------------------------------------------------


def _doc(name: str, figures: list[int]) -> Document:
    total = sum(figures)  # a column whose value depends on its own cluster's report (like audit's SHARE)
    return Document(
        data={"name": name, "figures": figures},
        rows=figures,
        columns=(Column("FIGURE", lambda f: f), Column("SHARE", lambda f: f / total, show=lambda f: f"{f / total:.0%}")),
        summary=(f"{name}: {len(figures)} figures", f"sum {total}"),
        sections=(Section("Findings", [f"{name}-finding"], (Column("WHAT", lambda x: x),)),),
        empty="No figures found.",
        notes=[f"{name} note"],
    )


def _text(doc: Document, fmt: str = "table") -> str:
    import io

    out, err = io.StringIO(), io.StringIO()
    render(doc, fmt, out, err)
    return out.getvalue() + err.getvalue()


def test_rows_get_a_cluster_column_and_keep_their_own_clusters_arithmetic():
    results = [views.ClusterResult("east", "https://e", _doc("east", [1, 3])),
               views.ClusterResult("west", None, _doc("west", [5]))]
    merged = views.merge(results, lambda reports: f"{sum(sum(r['figures']) for r in reports)} in all")
    assert _text(merged) == (
        "Cluster east (https://e): east: 2 figures\n"
        "  sum 4\n"
        "Cluster west: west: 1 figures\n"
        "  sum 5\n"
        "Total of 2 clusters (sums of the figures above; each cluster's arithmetic is its own):\n"
        "  9 in all\n"
        "\n"
        "CLUSTER  FIGURE  SHARE\n"
        "east          1    25%\n"
        "east          3    75%\n"
        "west          5   100%\n"
        "\n"
        "Findings:\n"
        "CLUSTER  WHAT\n"
        "east     east-finding\n"
        "west     west-finding\n"
        "warning: context east: east note\n"
        "warning: context west: west note\n"
    )
    assert merged.data == {"clusters": [{"context": "east", "server": "https://e", "report": results[0].document.data},
                                        {"context": "west", "server": None, "report": results[1].document.data}],
                           "errors": []}
    csv = _text(merged, "csv")
    assert csv.splitlines()[:3] == ["CLUSTER,FIGURE,SHARE", "east,1,0.25", "east,3,0.75"]


def test_a_cluster_that_could_not_be_read_is_named_never_dropped():
    results = [views.ClusterResult("east", "https://e", _doc("east", [2])),
               views.ClusterResult("west", "https://w", error="the server at https://w did not answer within 3s")]
    merged = views.merge(results, lambda reports: f"{len(reports)} read")
    assert merged.summary[2] == "Cluster west (https://w): not read: the server at https://w did not answer within 3s"
    assert merged.summary[3].endswith("arithmetic is its own; 1 cluster not read):")
    assert merged.summary[4] == "  1 read"
    assert [t.context for t in merged.rows] == ["east"]
    assert merged.data["errors"] == [{"context": "west", "message": "the server at https://w did not answer within 3s"}]
    nothing = views.merge([results[1]], None)
    assert nothing.data == {"clusters": [], "errors": merged.data["errors"]}
    assert nothing.rows == ()


def test_no_rows_anywhere_says_so_once():
    empty = Document(data={}, rows=[], columns=(Column("X", lambda x: x),), empty="No budgets found.")
    merged = views.merge([views.ClusterResult("a", None, empty), views.ClusterResult("b", None, empty)], None)
    assert merged.empty == "No budgets found in any of the 2 clusters read."


def test_totals_are_sums_of_each_clusters_own_figures():
    east = {"envelopes": [{"windowActive": True, "concurrency": 8, "usedGPUs": 6, "headroomGPUs": 2, "unfundedGPUs": 1},
                          {"windowActive": False, "concurrency": 4, "usedGPUs": 0, "headroomGPUs": 0,
                           "unfundedGPUs": 0}], "findings": [{}]}
    west = {"envelopes": [{"windowActive": True, "concurrency": 16, "usedGPUs": 16, "headroomGPUs": 0,
                           "unfundedGPUs": 3}], "findings": []}
    assert views.budgets_total([east, west]) == (
        "3 envelopes, 1 finding; GPUs in open windows: 22 of 24 used, 2 headroom; 4 unfunded")
    assert views.audit_total([{"totals": {"gpuHours": 1.25, "leases": 2}, "findings": []},
                              {"totals": {"gpuHours": 10, "leases": 1}}]) == "3 leases, 11.2 GPU-hours"
    assert views.pending_total([{"gpus": {"total": 8, "heldByLeases": 4, "heldByPodsOutsideLeases": 1, "free": 3},
                                 "rows": [{"gpus": 4}]}, {"gpus": {"total": 2, "free": 2}, "rows": []}]) == (
        "GPUs: 10 in all; 4 held by leases, 1 by pods outside leases; 5 free; pending: 1 consumer asking 4 GPUs")
    assert views.queues_total([{"clusterQueues": [{"clusterQueue": "a", "reserved": 2, "nominalQuota": 4,
                                                   "pending": 1, "available": 2},
                                                  {"clusterQueue": "a", "reserved": 0, "nominalQuota": 4}]},
                               {"clusterQueues": [{"clusterQueue": "a", "reserved": 1, "nominalQuota": 1}]}]) == (
        "2 queues, 3 flavor rows; GPUs: 3 reserved of 9 nominal; 1 pending; 2 available now")


# --- which clusters -----------------------------------------------------------------------------------------------


def test_snapshot_files_are_grouped_by_the_cluster_they_recorded(tmp_path, two):
    east, west = two
    assert recorded_cluster(east) == ("east", "https://east.example:6443")
    assert recorded_cluster(EXAMPLE) == (None, None)
    yaml_file = tmp_path / "west.yaml"
    yaml_file.write_text("apiVersion: v1\nkind: List\nmetadata:\n  annotations:\n"
                         "    jobtree.dev/snapshot-context: west\n    jobtree.dev/snapshot-server: 'https://w:6443'\n"
                         "items: []\n")
    assert recorded_cluster(str(yaml_file)) == ("west", "https://w:6443")
    targets = snapshot_targets([east, west, str(yaml_file)])
    assert [(t.context, t.server, t.snapshots) for t in targets] == [
        ("east", "https://east.example:6443", (east,)), ("west", "https://west.example:6443", (west, str(yaml_file)))]
    assert snapshot_targets([east, EXAMPLE]) is None  # one cluster recorded: merged as before
    assert snapshot_targets([EXAMPLE, EXAMPLE]) is None


def test_a_file_that_records_no_cluster_among_several_clusters_is_a_usage_error(capsys, two):
    code, out, err = run_cli(capsys, "--snapshot", two[0], "--snapshot", two[1], "--snapshot", EXAMPLE,
                             "budgets", "usage")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: --snapshot {EXAMPLE} records no cluster, while the other snapshots are of east, west")


def test_contexts_come_from_the_kubeconfig(tmp_path):
    config = tmp_path / "config"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "b",
        "clusters": [{"name": "ca", "cluster": {"server": "https://a:6443"}},
                     {"name": "cb", "cluster": {"server": "https://b:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "ca", "user": "u"}},
                     {"name": "b", "context": {"cluster": "cb", "user": "u"}}]}))
    every = live_targets(str(config), [], True)
    assert [(t.context, t.server) for t in every] == [("a", "https://a:6443"), ("b", "https://b:6443")]
    assert [t.context for t in live_targets(str(config), ["b", "a", "b"], False)] == ["b", "a"]
    with pytest.raises(Exception, match=r"--context c: no such context in the kubeconfig \(contexts: a, b\)"):
        live_targets(str(config), ["a", "c"], False)


# --- the commands ----------------------------------------------------------------------------------------------


def _json(capsys, *args):
    code, out, err = run_cli(capsys, *args, "-o", "json")
    return code, json.loads(out), err


@pytest.mark.parametrize("argv, single", [
    (["budgets", "usage"], "budgets-usage"),
    (["leases", "audit", "--by", "envelope"], "leases-audit"),
    (["leases", "audit", "--hours-only"], "leases-audit"),
    (["leases", "audit", "--every", "week", "--since", "30d"], "leases-audit"),
    (["pending"], "pending"),
])
def test_each_clusters_report_is_the_report_of_that_cluster_alone(capsys, two, argv, single):
    east, west = two
    code, merged, err = _json(capsys, "--snapshot", east, "--snapshot", west, *argv)
    assert (code, err) == (0, "")
    _, alone, _ = _json(capsys, "--snapshot", east, *argv)
    assert [c["context"] for c in merged["clusters"]] == ["east", "west"]
    assert [c["server"] for c in merged["clusters"]] == ["https://east.example:6443", "https://west.example:6443"]
    assert all(c["report"] == alone for c in merged["clusters"])
    assert merged["errors"] == []
    stem = f"{single.split('-')[0]}-{single.split('-')[1]}-clusters" if "-" in single else f"{single}-clusters"
    Draft202012Validator(json.loads((cluster_schemas.DIRECTORY / f"{stem}.schema.json").read_text())).validate(merged)


def test_queues_usage_over_two_kueue_snapshots(capsys, tmp_path):
    east, west = stamped(tmp_path, KUEUE, "east"), stamped(tmp_path, KUEUE, "west")
    code, merged, _ = _json(capsys, "--snapshot", east, "--snapshot", west, "queues", "usage")
    assert code == 0 and [c["server"] for c in merged["clusters"]] == [None, None]
    schema = json.loads((cluster_schemas.DIRECTORY / "queues-usage-clusters.schema.json").read_text())
    Draft202012Validator(schema).validate(merged)
    code, out, _ = run_cli(capsys, "--snapshot", east, "--snapshot", west, "queues", "usage")
    assert out.startswith("Cluster east: ClusterQueues: ")
    assert "\nCLUSTER  CLUSTERQUEUE  FLAVOR" in out


def test_strict_findings_in_any_cluster_exit_3(capsys, two):
    code, out, _ = run_cli(capsys, "--snapshot", two[0], "--snapshot", two[1], "leases", "audit", "--strict")
    assert code == 3
    assert out.startswith("Cluster east (https://east.example:6443): Leases ")


def test_one_cluster_commands_refuse_several_contexts(capsys, two):
    code, _, err = run_cli(capsys, "--context", "a", "--context", "b", "seeds", "verify")
    assert code == 2 and "this command reads one cluster" in err
    code, _, err = run_cli(capsys, "--snapshot", two[0], "plan", "east/rai-sys/pretrain-32")
    assert code == 2 and "CONTEXT/NAMESPACE/NAME names a cluster" in err
    code, _, err = run_cli(capsys, "--context", "a", "--context", "b", "--snapshot", two[0], "budgets", "usage")
    assert code == 2 and "--snapshot is read instead of a cluster" in err


def test_every_multi_cluster_schema_is_what_the_types_generate():
    for stem in cluster_schemas.CLUSTER_SCHEMAS:
        committed = (cluster_schemas.DIRECTORY / f"{stem}.schema.json").read_text()
        assert committed == cluster_schemas.text(stem), "regenerate: python -m kubectl_runs.engine.cluster_schemas"
        Draft202012Validator.check_schema(json.loads(committed))


PROBE = """
import io, json, sys, contextlib
from kubectl_runs.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.startswith("kubectl_runs"))}))
"""


@pytest.mark.parametrize("args", [["--help"], ["budgets", "usage", "--help"], ["budgets", "usage", "--snapshot", EXAMPLE],
                                  ["--context", "only", "budgets", "usage", "--snapshot", EXAMPLE]])
def test_one_cluster_imports_none_of_the_multi_cluster_machinery(args):
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    result = json.loads(done.stdout)
    assert result["code"] == 0
    machinery = {"kubectl_runs.cli.clusters", "kubectl_runs.views.clusters", "kubectl_runs.engine.cluster_schemas"}
    assert not machinery & set(result["modules"])
