"""``kubectl runs leases archive`` end to end on the example fleet: what a run says and prints as JSON (valid
against docs/schemas/leases-archive.schema.json), a second run adding nothing, ``--before``, ``--verify``, bad
input as one line naming the file with exit code 1, usage errors with exit code 2; and the DuckDB example of
docs/archive.md run on the archive it writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from builders import run_cli
from jsonschema import Draft202012Validator

from kubectl_runs.model import GPULease
from kubectl_runs.sources.files import load_snapshot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")


def schema(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((ROOT / "docs" / "schemas" / f"{name}.schema.json").read_text()))


def test_archive_then_again(capsys, tmp_path):
    target = str(tmp_path / "arch")
    code, out, err = run_cli(capsys, "leases", "archive", "--to", target, "--snapshot", EXAMPLE)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Added 10 closed leases (2 months rewritten: 2025-10, 2025-11); 10 open leases left."
    assert re.fullmatch(rf"Archive {re.escape(target)}: 10 leases in 2 months, [\d.]+ KiB, leases from "
                        r"2025-10-28 00:00Z to 2025-11-16 00:00Z \(generation 1\)", lines[1])
    assert lines[3].split() == ["MONTH", "LEASES", "SIZE"]
    assert [line.split()[:2] for line in lines[4:]] == [["2025-10", "1"], ["2025-11", "9"]]

    code, out, err = run_cli(capsys, "leases", "archive", "--to", target, "--snapshot", EXAMPLE, "-o", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert not list(schema("leases-archive").iter_errors(report))
    assert (report["added"], report["alreadyArchived"], report["open"], report["generation"], report["leases"]) == \
        (0, 10, 10, 1, 10)
    assert [p["leases"] for p in report["partitions"]] == [1, 9]


def test_before(capsys, tmp_path):
    target = str(tmp_path / "arch")
    code, out, _ = run_cli(capsys, "leases", "archive", "--to", target, "--snapshot", EXAMPLE,
                           "--before", "2025-11-10", "-o", "json")
    report = json.loads(out)
    assert code == 0 and (report["added"], report["endedAfterBefore"], report["months"]) == (1, 9, ["2025-10"])
    code, out, _ = run_cli(capsys, "leases", "archive", "--to", target, "--snapshot", EXAMPLE, "--before", "5d",
                           "-o", "json")  # 5 days before the snapshot's time 2025-11-20T12:00Z: 8 ended before it
    report = json.loads(out)
    assert code == 0 and (report["added"], report["alreadyArchived"], report["endedAfterBefore"]) == (7, 1, 2)


def test_verify(capsys, tmp_path):
    target = tmp_path / "arch"
    run_cli(capsys, "leases", "archive", "--to", str(target), "--snapshot", EXAMPLE)
    code, out, err = run_cli(capsys, "leases", "archive", "--verify", str(target))
    assert (code, err) == (0, "")
    assert out.splitlines()[0].endswith("(generation 1): verified")
    code, out, err = run_cli(capsys, "leases", "archive", "--verify", str(target), "-o", "json")
    report = json.loads(out)
    assert not list(schema("leases-archive-verify").iter_errors(report))
    assert (report["verified"], report["problems"], report["stray"], report["leases"]) == (True, [], [], 10)

    file = target / report["partitions"][1]["file"]
    file.write_bytes(file.read_bytes()[:-100])
    (target / "month=2025-11" / ".leases-000002.parquet.tmp").write_bytes(b"")
    code, out, err = run_cli(capsys, "leases", "archive", "--verify", str(target), "-o", "json")
    assert code == 1
    assert json.loads(out)["verified"] is False
    assert err.splitlines() == [
        "warning: 1 file not in the manifest (left by an interrupted archive run; the next run deletes them): "
        "month=2025-11/.leases-000002.parquet.tmp",
        f"error: {file}: {file.stat().st_size} bytes; the manifest says {file.stat().st_size + 100} "
        "(truncated or rewritten)",
    ]


@pytest.mark.parametrize(
    ("setup", "args", "line"),
    [
        (None, ["--verify", "{d}/missing"], "error: {d}/missing: no such directory (not a lease archive)"),
        ("foreign", ["--verify", "{d}"], "error: {d}/_manifest.json: not found: {d} is not a lease archive"),
        ("foreign", ["--to", "{d}", "--snapshot", EXAMPLE],
         "error: {d}: not a lease archive (no _manifest.json) and not empty: holds notes.txt"),
        ("file", ["--to", "{d}/f", "--snapshot", EXAMPLE], "error: {d}/f: not a directory"),
        ("newer", ["--verify", "{d}"], "error: {d}/_manifest.json: schema version 3; this kubectl-runs reads versions 1 and 2"),
        (None, ["--to", "{d}/a", "--snapshot", EXAMPLE, "--before", "soon"],
         "error: --before: 'soon' is not a time: use RFC 3339 (2025-11-01T00:15:00Z), a date, or a duration back "
         "from --at (7d, 24h)"),
    ],
    ids=["missing", "foreign-verify", "foreign-write", "not-a-directory", "newer-manifest", "bad-before"],
)
def test_bad_input_is_one_line(capsys, tmp_path, setup, args, line):
    d = str(tmp_path)
    if setup == "foreign":
        (tmp_path / "notes.txt").write_text("mine")
    elif setup == "file":
        (tmp_path / "f").write_text("x")
    elif setup == "newer":
        run_cli(capsys, "leases", "archive", "--to", d, "--snapshot", EXAMPLE)
        manifest = json.loads((tmp_path / "_manifest.json").read_text())
        manifest["schemaVersion"] = 3
        (tmp_path / "_manifest.json").write_text(json.dumps(manifest))
    code, out, err = run_cli(capsys, "leases", "archive", *[a.format(d=d) for a in args])
    assert (code, out, err) == (1, "", line.format(d=d) + "\n")


@pytest.mark.parametrize("args", [[], ["--to", "x", "--verify", "y"], ["--verify", "y", "--before", "1d"]])
def test_usage(capsys, args):
    code, out, err = run_cli(capsys, "leases", "archive", *args)
    assert code == 2 and out == ""
    assert err.splitlines()[1] == "See 'kubectl runs leases archive --help' for usage."


def test_the_duckdb_example_of_the_docs_runs_on_the_archive(capsys, tmp_path):
    """docs/archive.md's first DuckDB query, on the archive of the example fleet: GPU-hours per owner over
    November 2025, the closed leases clipped to the month, as Python computes them here."""
    import duckdb

    run_cli(capsys, "leases", "archive", "--to", str(tmp_path), "--snapshot", EXAMPLE)
    text = (ROOT / "docs" / "archive.md").read_text()
    block = re.search(r"\*\*DuckDB\*\*.*?```sql\n(.*?)```", text, re.S).group(1)
    first, second = [q.strip() for q in block.split(";") if q.strip()][:2]
    got = dict((owner, round(hours, 6)) for owner, hours, _n in
               duckdb.connect().execute(first.replace("/archive", str(tmp_path))).fetchall())
    want: dict[str, float] = {}
    lo, hi = "2025-11-01T00:00:00+00:00", "2025-12-01T00:00:00+00:00"
    from datetime import datetime

    lo_at, hi_at = datetime.fromisoformat(lo), datetime.fromisoformat(hi)
    for lease in load_snapshot([EXAMPLE]).leases:
        assert isinstance(lease, GPULease)
        st = lease.status
        if not st.closed or st.ended is None or st.ended <= lo_at or lease.spec.start >= hi_at:
            continue
        seconds = (min(st.ended, hi_at) - max(lease.spec.start, lo_at)).total_seconds()
        want[lease.spec.owner] = want.get(lease.spec.owner, 0.0) + lease.gpus * seconds / 3600
    assert got == {k: round(v, 6) for k, v in want.items()}
    assert duckdb.connect().execute(second.replace("/archive", str(tmp_path))).fetchall() == []  # no DoubleBooked


def test_an_archive_with_the_old_manifest_name(capsys, tmp_path):
    """An archive written before issue 28 (its manifest named manifest.json, which Spark read as a Parquet file):
    audited and verified as it is; the next `leases archive --to` renames it _manifest.json and says so."""
    target = str(tmp_path / "arch")
    run_cli(capsys, "leases", "archive", "--to", target, "--snapshot", EXAMPLE)
    window = ["--since", "2025-10-01", "--until", "2025-12-01", "--at", "2025-12-01T00:00:00Z", "--hours-only"]
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    audit = ["leases", "audit", "--snapshot", str(empty), "--archive", target, *window, "-o", "json"]
    want = run_cli(capsys, *audit)
    assert want[0] == 0 and json.loads(want[1])["totals"]["leases"] == 10
    verified = run_cli(capsys, "leases", "archive", "--verify", target, "-o", "json")
    (tmp_path / "arch" / "_manifest.json").rename(tmp_path / "arch" / "manifest.json")
    assert run_cli(capsys, *audit) == want
    assert run_cli(capsys, "leases", "archive", "--verify", target, "-o", "json") == verified

    code, out, err = run_cli(capsys, "leases", "archive", "--to", target, "--snapshot", EXAMPLE)
    assert (code, err) == (0, "warning: renamed the archive's manifest.json _manifest.json, the name Spark, Hive and "
                              "Trino skip when they read the archive's files (docs/archive.md)\n")
    assert out.startswith("Added 0 closed leases; 10 leases already archived, 10 open leases left.\n")
    assert sorted(p.name for p in (tmp_path / "arch").iterdir()) == ["_manifest.json", "month=2025-10",
                                                                      "month=2025-11"]
    assert run_cli(capsys, *audit) == want
    assert run_cli(capsys, "leases", "archive", "--verify", target, "-o", "json") == verified
