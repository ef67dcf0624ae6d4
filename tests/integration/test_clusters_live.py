"""One report over two real clusters (issue 30, "Several clusters"): two kube-apiservers with their own etcd, on
their own ports, one kubeconfig with a context for each (``east``: the example fleet; ``west``: the example fleet
without namespace rai-sys, so the two answers differ). Each cluster's report must be exactly that cluster's
report alone; a cluster that stops answering in the middle of the command (SIGSTOP: it accepts connections and
says nothing) or is gone is one stderr line and exit code 4, with the other cluster's rows still printed."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_plugin
from controlplane import DEFAULT_USERS, ControlPlane, skip_reason
from fleet import read_objects, upload
from jsonschema import Draft202012Validator

SCHEMAS = ROOT / "docs" / "schemas"
AT = "2025-11-20T12:00:00Z"


def _crds(cp) -> None:
    cp.kubectl("apply", "-f", str(ROOT / "crds"))
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def _entry(cp, name: str) -> tuple[dict, dict, dict]:
    ca = base64.b64encode(Path(cp.ca_file).read_bytes()).decode()
    return ({"name": name, "cluster": {"server": cp.server, "certificate-authority-data": ca}},
            {"name": name, "user": {"token": cp.tokens["admin"]}},
            {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}})


@pytest.fixture(scope="module")
def fleets(tmp_path_factory):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    objects = read_objects(str(ROOT / "examples" / "fleet.yaml"))
    with ControlPlane(users=DEFAULT_USERS) as east, ControlPlane(users=DEFAULT_USERS) as west:
        for cp in (east, west):
            _crds(cp)
        upload(east, objects)
        upload(west, [o for o in objects if o["metadata"].get("namespace") != "rai-sys"])
        entries = [_entry(east, "east"), _entry(west, "west")]
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "east", "preferences": {},
                  "clusters": [e[0] for e in entries], "users": [e[1] for e in entries],
                  "contexts": [e[2] for e in entries]}
        path = tmp_path_factory.mktemp("clusters") / "kubeconfig"
        path.write_text(json.dumps(config))
        os.chmod(path, 0o600)
        yield east, west, str(path)


def runs(kubeconfig: str, *args: str):
    return run_plugin(*args, "--at", AT, kubeconfig=kubeconfig)


def validate(stem: str, document: dict) -> None:
    Draft202012Validator(json.loads((SCHEMAS / f"{stem}.schema.json").read_text())).validate(document)


@pytest.mark.parametrize("argv, stem", [
    (["budgets", "usage"], "budgets-usage-clusters"),
    (["leases", "audit", "--by", "envelope"], "leases-audit-clusters"),
    (["pending"], "pending-clusters"),
    (["queues", "usage"], "queues-usage-clusters"),
])
def test_each_cluster_is_its_own_report(fleets, argv, stem):
    east, west, kubeconfig = fleets
    both = runs(kubeconfig, *argv, "--context", "east", "--context", "west", "-o", "json")
    assert (both.returncode, both.stderr) == (0, ""), both.stderr
    merged = json.loads(both.stdout)
    validate(stem, merged)
    assert [(c["context"], c["server"]) for c in merged["clusters"]] == [("east", east.server), ("west", west.server)]
    assert merged["errors"] == []
    for entry in merged["clusters"]:
        alone = runs(kubeconfig, *argv, "--context", entry["context"], "-o", "json")
        assert alone.returncode == 0, alone.stderr
        assert entry["report"] == json.loads(alone.stdout)  # nothing mixed across clusters
    every = runs(kubeconfig, *argv, "--all-contexts", "-o", "json")
    assert json.loads(every.stdout) == merged


def test_the_table_has_a_cluster_column_a_headline_each_and_a_summed_total(fleets):
    east, west, kubeconfig = fleets
    done = runs(kubeconfig, "budgets", "usage", "--context", "east", "--context", "west")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Cluster east ({east.server}): Budgets at 2025-11-20 12:00Z: 9 envelopes")
    assert any(line.startswith(f"Cluster west ({west.server}): Budgets at 2025-11-20 12:00Z: ") for line in lines)
    assert "Total of 2 clusters (sums of the figures above; each cluster's arithmetic is its own):" in lines
    header = next(line for line in lines if line.startswith("CLUSTER"))
    assert header.split()[:3] == ["CLUSTER", "NAMESPACE", "BUDGET"]
    rows = [line.split()[:2] for line in lines if line.startswith(("east ", "west "))]
    assert ["east", "rai-sys"] in rows and ["west", "rai-sys"] not in rows


def test_one_context_prints_exactly_what_it_printed_before(fleets):
    _, _, kubeconfig = fleets
    for argv in (["budgets", "usage"], ["leases", "audit"], ["pending"], ["plan", "rai-sys/pretrain-32"]):
        before = runs(kubeconfig, *argv)  # the current context: east
        assert before.returncode == 0, before.stderr
        assert runs(kubeconfig, *argv, "--context", "east").stdout == before.stdout


def test_plan_and_explain_of_context_namespace_name(fleets):
    _, _, kubeconfig = fleets
    for command in ("plan", "explain"):
        named = runs(kubeconfig, command, "east/rai-sys/pretrain-32", "-o", "json")
        alone = runs(kubeconfig, command, "rai-sys/pretrain-32", "--context", "east", "-o", "json")
        assert (named.returncode, named.stdout) == (0, alone.stdout), named.stderr
    gone = runs(kubeconfig, "plan", "west/rai-sys/pretrain-32")  # namespace rai-sys is not in west
    assert gone.returncode == 1 and gone.stderr.startswith("error: run rai-sys/pretrain-32 not found")


def test_snapshots_of_two_clusters_are_reported_per_cluster_as_live(fleets, tmp_path):
    east, west, kubeconfig = fleets
    files = []
    for name, cp in (("east", east), ("west", west)):
        saved = runs(kubeconfig, "snapshot", "save", "--context", name, "-f", str(tmp_path / f"{name}.json"))
        assert saved.returncode == 0, saved.stderr
        annotations = json.loads((tmp_path / f"{name}.json").read_text())["metadata"]["annotations"]
        assert annotations["jobtree.dev/snapshot-context"] == name
        assert annotations["jobtree.dev/snapshot-server"] == cp.server
        files += ["--snapshot", str(tmp_path / f"{name}.json")]
    live = json.loads(runs(kubeconfig, "budgets", "usage", "--all-contexts", "-o", "json").stdout)
    offline = run_plugin("budgets", "usage", *files, "--at", AT, "-o", "json")
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout) == live


def test_one_archive_of_two_clusters_gives_each_cluster_its_own_rows(fleets, tmp_path):
    """Both clusters archived into one directory (as two CronJobs onto one volume would): the rows record their
    context, and the audit over both clusters counts each cluster's archived rows in its own report only — each
    equal to that cluster's audit with an archive of its own."""
    _, _, kubeconfig = fleets
    shared = str(tmp_path / "shared")
    for name in ("east", "west"):
        own = str(tmp_path / name)
        for directory in (shared, own):
            done = runs(kubeconfig, "leases", "archive", "--to", directory, "--context", name)
            assert done.returncode == 0, done.stderr
    window = ("--since", "2025-01-01", "--by", "envelope", "-o", "json")
    both = runs(kubeconfig, "leases", "audit", "--all-contexts", "--archive", shared, *window)
    assert (both.returncode, both.stderr) == (0, ""), both.stderr
    merged = json.loads(both.stdout)
    validate("leases-audit-clusters", merged)
    for entry in merged["clusters"]:
        alone = runs(kubeconfig, "leases", "audit", "--context", entry["context"], "--archive",
                     str(tmp_path / entry["context"]), *window)
        assert entry["report"] == json.loads(alone.stdout)


def _apiserver_pid(cp) -> int:
    return cp._apiserver.pid  # the harness's process: stopped and continued here, never replaced


def test_a_cluster_stopped_mid_command_is_one_error_line_and_exit_4(fleets):
    """west's API server is frozen (SIGSTOP) while the command runs: it accepts the connection and never answers,
    so the request limit of --request-timeout fires for west only; east's rows are printed."""
    _, west, kubeconfig = fleets
    os.kill(_apiserver_pid(west), signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = runs(kubeconfig, "budgets", "usage", "--context", "east", "--context", "west",
                    "--request-timeout", "3s")
        elapsed = time.monotonic() - started
        as_json = runs(kubeconfig, "leases", "audit", "--all-contexts", "--request-timeout", "2s", "-o", "json")
    finally:
        os.kill(_apiserver_pid(west), signal.SIGCONT)
    assert done.returncode == 4
    assert elapsed < 30  # parallel, bounded by the limit: not the default 60 s read timeout
    errors = done.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"error: context west: the server at {west.server} ")
    assert "within 3s (--request-timeout)" in errors[0]
    assert "\neast     rai-sys " in done.stdout
    assert f"Cluster west ({west.server}): not read: the server at {west.server}" in done.stdout
    document = json.loads(as_json.stdout)
    assert as_json.returncode == 4
    validate("leases-audit-clusters", document)
    assert [c["context"] for c in document["clusters"]] == ["east"]
    assert [e["context"] for e in document["errors"]] == ["west"]
    assert as_json.stderr.count("\n") == 1


def test_a_cluster_that_is_gone_is_one_error_line_and_exit_4_and_all_gone_is_exit_1(fleets, tmp_path):
    _, west, kubeconfig = fleets
    west.stop()  # last test of the module: the fixture's exit stops it again (a no-op)
    done = runs(kubeconfig, "pending", "--all-contexts")
    assert done.returncode == 4
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: context west: ")
    assert "\neast " in done.stdout
    config = json.loads(Path(kubeconfig).read_text())
    config["contexts"].append({"name": "nowhere", "context": {"cluster": "west", "user": "west"}})
    only_west = tmp_path / "kubeconfig"
    only_west.write_text(json.dumps(config))
    failed = runs(str(only_west), "budgets", "usage", "--context", "west", "--context", "nowhere")
    assert failed.returncode == 1
    assert [line.split(":")[1] for line in failed.stderr.splitlines()] == [" context west", " context nowhere"]
