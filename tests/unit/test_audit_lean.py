"""``leases audit`` reads a JSON snapshot's GPULeases lean (``GPULeaseHead``: of the metadata only the name and
namespace; sources/files.py). Its report must be the full load's, exactly, on generated fleets with every finding
kind and on every output format; two copies of a lease are judged by the full load; and what the lean read leaves
out is what the audit never reads."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from kubectl_runs.cli.main import main
from kubectl_runs.engine.audit import audit
from kubectl_runs.model import GPULease, GPULeaseHead
from kubectl_runs.sources.files import load_snapshot

BY = (("owner",), ("envelope", "flavor"), ("run",), ("node",))


def _fleet(tmp_path, seed: int) -> str:
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)  # bench/ is the repository's, not installed
    from bench.generate import generate

    path = str(tmp_path / f"fleet-{seed}.json")
    generate(path, nodes=64, envelopes=48, leases=1500, seed=seed)
    return path


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_lean_read_gives_the_full_reads_report(tmp_path, seed):
    path = _fleet(tmp_path, seed)
    full, lean = load_snapshot([path]), load_snapshot([path], lean=True)
    assert all(type(x) is GPULeaseHead for x in lean.leases) and all(type(x) is GPULease for x in full.leases)
    assert [x.key for x in lean.leases] == [x.key for x in full.leases]
    at = full.taken_at
    kinds = set()
    for days in (1, 30, 400):
        for by in BY:
            for namespace in (None, full.leases[0].metadata.namespace):
                since = at - timedelta(days=days)
                want = audit(full, at, since=since, until=at, by=by, namespace=namespace)
                got = audit(lean, at, since=since, until=at, by=by, namespace=namespace)
                assert msgspec.json.encode(got.report) == msgspec.json.encode(want.report)
                assert got.findings == want.findings
                kinds.update(f.kind for f in want.findings)
    assert len(kinds) >= 4, kinds  # the generated fleets plant findings of several kinds


def test_the_command_prints_what_a_full_read_prints(tmp_path):
    """Every format, with and without -n: the lean command against the same leases written as YAML (read in
    full)."""
    import yaml

    path = _fleet(tmp_path, 4)
    as_yaml = tmp_path / "fleet.yaml"
    as_yaml.write_text(yaml.safe_dump(json.loads(Path(path).read_text())))
    namespace = load_snapshot([path]).leases[0].metadata.namespace
    for args in (["-o", "json"], ["-o", "wide"], ["-o", "csv", "--by", "run"], ["--since", "400d", "-o", "yaml"],
                 ["-n", namespace, "-o", "json"], ["--every", "week", "-o", "csv"]):
        lean = _run(["leases", "audit", "--snapshot", path, *args])
        full = _run(["leases", "audit", "--snapshot", str(as_yaml), *args])
        assert lean[0] == full[0] and lean[1] == full[1], args
        assert lean[2].replace(path, "F") == full[2].replace(str(as_yaml), "F"), args


def _one_lease(path: str) -> dict:
    items = json.loads(Path(path).read_text())["items"]
    return next(i for i in items if i["kind"] == "GPULease")


def test_copies_of_a_lease_are_judged_by_the_full_load(tmp_path):
    """Copies that differ only where the lean record does not look (the uid) are still refused naming both files;
    identical copies are read once with the full load's note."""
    path = _fleet(tmp_path, 5)
    lease = _one_lease(path)
    other = tmp_path / "copy.json"
    other.write_text(json.dumps({"kind": "List", "items": [lease]}, indent=2))
    lean = load_snapshot([path, str(other)], lean=True)
    assert lean.leases == load_snapshot([path, str(other)]).leases  # read in full: GPULease, not the lean record
    assert "given more than once" in " ".join(lean.notes)
    changed = json.loads(json.dumps(lease))
    changed["metadata"]["uid"] = "another-uid"
    other.write_text(json.dumps({"kind": "List", "items": [changed]}))
    code, out, err = _run(["leases", "audit", "--snapshot", path, "--snapshot", str(other)])
    assert code == 1 and out == ""
    assert err.strip().endswith("with different content: a snapshot holds one copy of each object (remove the copy "
                                "that is wrong)") and str(other) in err and path in err


def test_fields_the_audit_reads_are_checked_those_it_skips_are_not(tmp_path, capsys):
    """The lean record declares every field the audit reads with the model's type: a bad one is refused as every
    command refuses it. A bad label is skipped by the lean read (the audit never reads labels); `plan`, which
    reads in full, still refuses the file (documented in docs/resources.md)."""
    path = _fleet(tmp_path, 6)
    document = json.loads(Path(path).read_text())
    lease = next(i for i in document["items"] if i["kind"] == "GPULease")
    lease["spec"]["slice"]["slots"] = "not-a-list"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    lean_error = _run(["leases", "audit", "--snapshot", str(bad)])
    plan_error = _run(["seeds", "verify", "--snapshot", str(bad)])
    assert lean_error[0] == 1 and "spec.slice.slots" in lean_error[2] and lean_error[2].count("\n") == 1
    assert lean_error[2] == plan_error[2]
    lease["spec"]["slice"]["slots"] = ["n#0"]
    lease["metadata"]["labels"] = {"jobtree.dev/run": 5}
    bad.write_text(json.dumps(document))
    code, _out, err = _run(["leases", "audit", "--snapshot", str(bad)])
    assert code in (0, 3) and "error" not in err
    code, _out, err = _run(["seeds", "verify", "--snapshot", str(bad)])
    assert code == 1 and "metadata.labels" in err


def test_lean_leases_out_of_order_or_beside_full_ones_load_as_a_full_load_does(tmp_path):
    """The loader checks the order of lean leases by comparing their metadata in C; a List out of order, or lean
    leases beside leases read in full (a YAML file), take the general path: the same leases in the same order
    as a full load."""
    import yaml

    path = _fleet(tmp_path, 7)
    document = json.loads(Path(path).read_text())
    leases = [i for i in document["items"] if i["kind"] == "GPULease"]
    others = [i for i in document["items"] if i["kind"] != "GPULease"]
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps({"kind": "List", "items": others + leases[::-1]}))
    lean = load_snapshot([str(shuffled)], lean=True)
    assert all(type(x) is GPULeaseHead for x in lean.leases)
    assert [x.key for x in lean.leases] == [x.key for x in load_snapshot([path]).leases]
    half = len(leases) // 2
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"kind": "List", "items": others + leases[:half]}))
    rest = tmp_path / "rest.yaml"
    rest.write_text(yaml.safe_dump({"kind": "List", "items": leases[half:]}))
    mixed = load_snapshot([str(first), str(rest)], lean=True)  # lean first: the C comparison meets a full record
    assert {type(x) for x in mixed.leases} == {GPULease, GPULeaseHead}
    assert [x.key for x in mixed.leases] == [x.key for x in load_snapshot([path]).leases]
    at = load_snapshot([path]).taken_at
    since = at - timedelta(days=30)
    want = audit(load_snapshot([path]), at, since=since, until=at)
    got = audit(mixed, at, since=since, until=at)
    assert msgspec.json.encode(got.report) == msgspec.json.encode(want.report)
