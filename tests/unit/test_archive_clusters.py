"""The lease archive over several clusters (schema version 2, docs/archive.md): each archived row records the
cluster it was read from, ``leases audit --archive`` over several clusters counts each cluster's rows in its own
report only, and archives of version 1 are still read (as one cluster) and written to (their new files are
version 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from builders import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")


def _saved(source: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "snapshot", "save", "--snapshot", source],
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def _write(path: Path, document: dict, context: str | None, rename: str = "") -> str:
    document = json.loads(json.dumps(document))
    if context:
        document["metadata"]["annotations"]["jobtree.dev/snapshot-context"] = context
    for item in document["items"]:
        if item["kind"] == "GPULease" and rename:
            item["metadata"]["name"] = rename + item["metadata"]["name"]
    path.write_text(json.dumps(document))
    return str(path)


@pytest.fixture(scope="module")
def fleets(tmp_path_factory):
    """east and west: the example fleet, west's leases renamed (other leases); each archived from its full
    snapshot, and each read "live" from a snapshot of its open leases only (the closed ones are in the archive)."""
    directory = tmp_path_factory.mktemp("archive-clusters")
    full = _saved(EXAMPLE)
    opened = json.loads(json.dumps(full))
    opened["items"] = [i for i in opened["items"]
                       if i["kind"] != "GPULease" or not (i.get("status") or {}).get("closed")]
    out = {}
    for name, rename in (("east", ""), ("west", "w-")):
        archive = directory / f"archive-{name}"
        done = subprocess.run([sys.executable, "-m", "kubectl_runs", "leases", "archive", "--to", str(archive),
                               "--snapshot", _write(directory / f"{name}-full.json", full, name, rename)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        out[name] = (str(archive), _write(directory / f"{name}-open.json", opened, name, rename))
    return out


def test_archived_rows_record_their_cluster(fleets):
    con = duckdb.connect()
    for name, (archive, _live) in fleets.items():
        clusters = con.execute(f"SELECT DISTINCT cluster FROM read_parquet('{archive}/month=*/*.parquet')").fetchall()
        assert clusters == [(name,)]
        kv = con.execute(f"SELECT DISTINCT value FROM parquet_kv_metadata('{archive}/month=*/*.parquet')").fetchall()
        assert kv == [(b"2",)]
        assert json.loads((Path(archive) / "_manifest.json").read_text())["schemaVersion"] == 2


def test_each_cluster_counts_only_its_own_archived_rows(capsys, fleets):
    (east_archive, east_live), (west_archive, west_live) = fleets["east"], fleets["west"]
    window = ("--since", "2025-01-01", "--by", "run")
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", east_live, "--snapshot", west_live,
                             "--archive", east_archive, "--archive", west_archive, *window, "-o", "json")
    assert (code, err) == (0, "")
    merged = json.loads(out)
    for entry, (archive, live) in zip(merged["clusters"], (fleets["east"], fleets["west"]), strict=True):
        code, alone, _ = run_cli(capsys, "leases", "audit", "--snapshot", live, "--archive", archive, *window,
                                 "-o", "json")
        assert entry["report"] == json.loads(alone)
    assert merged["clusters"][0]["report"]["totals"]["leases"] == 20  # 10 open + 10 archived, not 30


def _as_version_1(archive: Path) -> None:
    """Rewrite an archive as an earlier kubectl-runs wrote it: no cluster column, version 1 everywhere."""
    import hashlib

    manifest = json.loads((archive / "_manifest.json").read_text())
    con = duckdb.connect()
    for part in manifest["partitions"]:
        file = archive / part["file"]
        con.execute(f"COPY (SELECT * EXCLUDE (cluster) FROM read_parquet('{file}')) TO '{file}.x' (FORMAT parquet, "
                    "KV_METADATA {'kubectl-runs.lease-archive.schema-version': '1'})")
        Path(f"{file}.x").replace(file)
        part["bytes"] = file.stat().st_size
        part["sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
    manifest["schemaVersion"] = 1
    (archive / "_manifest.json").write_text(json.dumps(manifest))


def test_an_archive_of_version_1_is_read_as_one_cluster_and_written_as_version_2(capsys, fleets, tmp_path):
    east_archive, east_live = fleets["east"]
    old = tmp_path / "old"
    subprocess.run(["cp", "-r", east_archive, str(old)], check=True)
    _as_version_1(old)
    window = ("--since", "2025-01-01", "-o", "json")
    _, before, _ = run_cli(capsys, "leases", "audit", "--snapshot", east_live, "--archive", east_archive, *window)
    code, after, err = run_cli(capsys, "leases", "audit", "--snapshot", east_live, "--archive", str(old), *window)
    assert (code, err, json.loads(after)) == (0, "", json.loads(before))
    assert run_cli(capsys, "leases", "archive", "--verify", str(old))[0] == 0
    # over several clusters its rows cannot be given to one: a note says so, never a silent drop
    code, _, err = run_cli(capsys, "leases", "audit", "--snapshot", east_live, "--snapshot", fleets["west"][1],
                             "--archive", str(old), *window)
    assert code == 0
    assert err == (f"note: --archive {old}: 10 archived leases record no cluster (archived before schema version 2, "
                   "or from a source whose context was not known): they are not counted in a report over several "
                   "clusters; audit them with one --context\n")
    # written to again: the rewritten month files are version 2, the old rows with cluster ''
    west_full = str(Path(fleets["west"][1]).with_name("west-full.json"))
    code, _, err = run_cli(capsys, "leases", "archive", "--to", str(old), "--snapshot", west_full)
    assert code == 0, err
    con = duckdb.connect()
    manifest = json.loads((old / "_manifest.json").read_text())
    assert manifest["schemaVersion"] == 2
    files = [str(old / p["file"]) for p in manifest["partitions"]]
    rows = con.execute(f"SELECT cluster, count(*) FROM read_parquet({files}) GROUP BY cluster ORDER BY cluster").fetchall()
    assert rows == [("", 10), ("west", 10)]
    assert run_cli(capsys, "leases", "archive", "--verify", str(old))[0] == 0
