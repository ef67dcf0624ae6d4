"""docs/archive.md's Spark SQL, taken from the page and run as written — the page's command, ``spark-sql`` of
PySpark in local mode, on the page's SQL with only its path ``/archive`` replaced — on the lease archives of
examples/fleet.yaml and of a generated fleet of several months (bench/generate.py). Spark must find the
partition column ``month`` in the directory names, skip ``_manifest.json``, and give each owner exactly the
GPU-hours (to the 4 decimals of the JSON output) and leases of ``leases audit --archive … --by owner
--hours-only -o json`` over the page's window, November 2025; and per month the manifest's leases."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "archive.md"
SINCE, UNTIL = "2025-11-01", "2025-12-01"  # the window of the page's queries
SPARK_TIMEOUT = 15 * 60  # seconds; one spark-sql run took 40-80 s on two busy cores


def spark_section() -> tuple[str, list[str]]:
    """The page's Spark SQL (the sql block after **Spark SQL**) and its command (the sh block after it)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("**Spark SQL**"):text.index("**Trino**")]
    sql = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
    [command] = [line.split("#")[0].strip() for line in re.search(r"```sh\n(.*?)```", section, re.S).group(1)
                 .splitlines() if line.strip()]
    return sql, shlex.split(command)


def kubectl_runs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def results(stdout: str) -> list[list[list[str]]]:
    """spark-sql's output with headers (hive.cli.print.header): one table per statement that returns rows, each
    a header row and then its rows (tab-separated); a statement without rows prints "Response code"."""
    tables: list[list[list[str]]] = []
    for line in stdout.splitlines():
        if line == "Response code":
            continue
        cells = line.split("\t")
        if tables and len(cells) == len(tables[-1][0]) and cells != tables[-1][0]:
            tables[-1].append(cells)
        else:
            tables.append([cells])
    return tables


@pytest.fixture(scope="module")
def fleets(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fleets")
    generated = base / "generated.json"
    done = subprocess.run([sys.executable, "-m", "bench.generate", "--nodes", "64", "--envelopes", "64",
                           "--leases", "2000", "--seed", "5", "-o", str(generated)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return {"example": ROOT / "examples" / "fleet.yaml", "generated": generated}


@pytest.mark.parametrize("fleet", ["example", "generated"])
def test_the_docs_spark_sql_gives_the_audits_hours(spark, fleets, tmp_path, fleet):
    archive = tmp_path / "archive"
    done = kubectl_runs("leases", "archive", "--snapshot", str(fleets[fleet]), "--to", str(archive))
    assert done.returncode == 0, done.stderr
    assert (archive / "_manifest.json").is_file() and not (archive / "manifest.json").exists()
    manifest = json.loads((archive / "_manifest.json").read_text())
    months = {p["month"]: p["leases"] for p in manifest["partitions"]}
    assert len(months) >= (2 if fleet == "example" else 4), months
    # `month` is not a column of the files: Spark can only have it from the directory names
    columns = duckdb.connect().execute(
        f"DESCRIBE SELECT * FROM read_parquet('{archive / manifest['partitions'][0]['file']}', "
        "hive_partitioning = false)").fetchall()
    assert "month" not in [c[0] for c in columns] and "owner" in [c[0] for c in columns]

    # what leases audit says of the archive alone: a snapshot without leases (else its open leases count too)
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    done = kubectl_runs("leases", "audit", "--snapshot", str(empty), "--archive", str(archive), "--since", SINCE,
                        "--until", UNTIL, "--at", f"{UNTIL}T00:00:00Z", "--by", "owner", "--hours-only",
                        "-o", "json")
    assert (done.returncode, done.stderr) == (0, "")
    audit = json.loads(done.stdout)
    want = {row["owner"]: (row["gpuHours"], row["leases"]) for row in audit["rows"]}
    assert len(want) >= (4 if fleet == "example" else 5) and audit["totals"]["leases"] >= 10

    # the page's SQL and command, run as written: only the archive's path is the test's
    sql, command = spark_section()
    assert sql.count("'/archive'") == 1
    workdir = tmp_path / "spark"  # spark-sql leaves metastore_db/, derby.log and spark-warehouse/ here
    workdir.mkdir()
    (workdir / "gpu-hours.sql").write_text(sql.replace("'/archive'", f"'{archive}'"))
    assert command[0] == "spark-sql" and command[-2:] == ["-f", "gpu-hours.sql"], command
    done = subprocess.run(command, capture_output=True, text=True, timeout=SPARK_TIMEOUT, cwd=workdir, env=spark.env)
    assert done.returncode == 0, done.stderr[-6000:]
    by_owner, by_month = results(done.stdout)
    assert by_owner[0] == ["owner", "gpu_hours", "leases"] and by_month[0] == ["month", "leases"], done.stdout

    got = {owner: (round(float(hours), 4), int(leases)) for owner, hours, leases in by_owner[1:]}
    assert got == want
    hours = [float(h) for _o, h, _n in by_owner[1:]]
    assert hours == sorted(hours, reverse=True)  # ORDER BY gpu_hours DESC
    assert round(sum(hours), 4) == audit["totals"]["gpuHours"]
    assert sum(n for _h, n in got.values()) == audit["totals"]["leases"]
    assert {month: int(n) for month, n in by_month[1:]} == months
    print(f"\n{fleet}: Spark {spark.version}, {len(got)} owners, {audit['totals']['leases']} leases, "
          f"{audit['totals']['gpuHours']} GPU-hours in {SINCE}..{UNTIL}; months {months}")
    for owner, (h, n) in sorted(got.items(), key=lambda kv: -kv[1][0]):
        print(f"  {owner:32} spark {h:>14.4f} {n:>5}   audit {want[owner][0]:>14.4f} {want[owner][1]:>5}")


def test_the_docs_name_the_pyspark_the_test_runs():
    """The version pinned in scripts/spark.sh is the one docs/archive.md tells users to install."""
    pinned = re.search(r"^version=(\S+)", (ROOT / "scripts" / "spark.sh").read_text(), re.M).group(1)
    text = DOC.read_text(encoding="utf-8")
    assert f"pip install pyspark=={pinned}" in text and f"PySpark {pinned}" in text
    assert set(re.findall(r"pyspark==([\d.]+)", text)) == {pinned}
