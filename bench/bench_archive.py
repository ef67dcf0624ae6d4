"""Benchmark: the lease archive (issue 16) on a generated multi-year history (bench/history.py).

    .venv/bin/python -m bench.generate --history /tmp/h10m --leases 10000000      # once (~7 min, ≤ 1.1 GB)
    .venv/bin/python -m bench.generate --history /tmp/h1m --leases 1000000
    .venv/bin/python -m bench.bench_archive --history /tmp/h10m --small /tmp/h1m

Every measurement runs in a fresh process (its peak RSS is that process's, interpreter and imports included),
`rounds` times, and reports the median. Two kinds of figures, never mixed up:

* **product** — a `kubectl runs` command as a user runs it, from `main([...])` to its return: `leases audit
  --archive` (DuckDB selects the leases that can touch the window; the audit engine counts them, findings
  included), `leases archive --to`;
* **sql** — DuckDB alone over the archive's files (the queries a site can run, docs/archive.md): what the format
  allows, not what the command does;
* **rows** — the command's own DuckDB part without the findings (archive/relation.py, archive/breakdown.py): the
  window view over the archive and the snapshot's leases, the rows, totals and peaks (and with ``--every`` the
  periods), from the snapshot load to the report's rows. The product figure minus this is the findings'.

Archiving 1M leases from a JSON snapshot is measured side by side with the typed decode of that snapshot, in
the same process, alternated, as bench/run.py measures every command.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_seconds() -> float:
    """User + system CPU of this process and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_main(argv: list[str]) -> int:
    from kubectl_runs.cli.main import main
    from kubectl_runs.cli.options import LOADED

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    LOADED.clear()
    if code not in (0, 3):
        raise SystemExit(f"{' '.join(argv)}: exit {code}: {err.getvalue()[-500:]}")
    return code


def read_manifest(archive: str) -> dict:
    """The archive's manifest: ``_manifest.json``, else ``manifest.json`` (a history generated before issue 28)."""
    for name in ("_manifest.json", "manifest.json"):
        if (Path(archive) / name).exists():
            return json.loads((Path(archive) / name).read_text())
    raise SystemExit(f"{archive}: no _manifest.json: not a lease archive")


def files(archive: str) -> str:
    manifest = read_manifest(archive)
    return "[" + ", ".join(f"'{Path(archive) / p['file']}'" for p in manifest["partitions"]) + "]"


def sql(query: str) -> int:
    from kubectl_runs.archive import db

    con = db.connect()
    try:
        return con.execute(f"SELECT count(*) FROM ({query})").fetchone()[0]  # computed in full, counted
    finally:
        con.close()


def _window(fleet: str, days: int) -> tuple[str, str]:
    stamp = json.loads(Path(fleet).read_text())["metadata"]["annotations"]["jobtree.dev/snapshot-time"]
    until = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (until - timedelta(days=days)).isoformat(), until.isoformat()


def sql_audit(archive: str, since: str, until: str) -> str:
    """GPU-hours, leases and peak GPUs per owner over [since, until), leases clipped: the audit's rows in SQL."""
    lo, hi = f"TIMESTAMPTZ '{since}'", f"TIMESTAMPTZ '{until}'"
    return f"""
WITH w AS (SELECT owner, gpus, greatest(start, {lo}) AS s, least(ended, {hi}) AS e
           FROM read_parquet({files(archive)}) WHERE start < {hi} AND ended > {lo} AND ended > start),
ev AS (SELECT owner, s AS t, gpus AS d FROM w UNION ALL SELECT owner, e AS t, -gpus AS d FROM w),
run AS (SELECT owner, sum(d) OVER (PARTITION BY owner ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS held FROM ev),
peaks AS (SELECT owner, max(held) AS peak FROM run GROUP BY owner)
SELECT owner, sum(gpus * (epoch_us(e) - epoch_us(s))) / 3.6e9 AS gpu_hours, count(*) AS leases,
       any_value(peak) AS peak
FROM w JOIN peaks USING (owner) GROUP BY owner"""


def sql_months(archive: str) -> str:
    """Full history by month and owner: GPU-hours clipped to each month, leases, peak GPUs."""
    return f"""
WITH l AS (SELECT owner, gpus, start, ended FROM read_parquet({files(archive)}) WHERE ended > start),
m AS (SELECT range AS ms, range + INTERVAL 1 MONTH AS me FROM range(
        date_trunc('month', (SELECT min(start) FROM l)), (SELECT max(ended) FROM l), INTERVAL 1 MONTH)),
w AS (SELECT ms, owner, gpus, greatest(start, ms) AS s, least(ended, me) AS e FROM l JOIN m
      ON l.start < m.me AND l.ended > m.ms),
ev AS (SELECT ms, owner, s AS t, gpus AS d FROM w UNION ALL SELECT ms, owner, e AS t, -gpus AS d FROM w),
run AS (SELECT ms, owner, sum(d) OVER (PARTITION BY ms, owner ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS held
        FROM ev),
peaks AS (SELECT ms, owner, max(held) AS peak FROM run GROUP BY ms, owner)
SELECT strftime(ms, '%Y-%m'), owner, sum(gpus * (epoch_us(e) - epoch_us(s))) / 3.6e9, count(*), any_value(peak)
FROM w JOIN peaks USING (ms, owner) GROUP BY ms, owner"""


def sql_double_booked(archive: str) -> str:
    """docs/archive.md's DoubleBooked query: per slot, the episodes during which two or more leases hold it (a
    sweep per slot in order of start, no self-join)."""
    return double_booked_sql(f"read_parquet({files(archive)})")


def double_booked_sql(source: str) -> str:
    """The DoubleBooked query of docs/archive.md, reading the archive from ``source`` (a table expression)."""
    text = (ROOT / "docs" / "archive.md").read_text()
    query = text[text.index("WITH held AS", text.index("-- DoubleBooked")):]
    query = query[:query.index(";")]
    return query.replace("read_parquet('/archive/month=*/*.parquet')", source)


# --- the measurements (each in its own process) -------------------------------------------------------------------


def measure(name: str, args: dict, rounds: int) -> dict:
    kind, job = JOBS[name]
    seconds = []
    for _ in range(rounds):
        gc.collect()
        began = time.perf_counter()
        job(**args)
        seconds.append(time.perf_counter() - began)
    return {"name": name, "kind": kind, "seconds": seconds, "median": statistics.median(seconds), "rss": rss_mb()}


def _audit(fleet: str, archive: str, extra: list[str]) -> None:
    run_main(["leases", "audit", "--snapshot", fleet, "--archive", archive, "-o", "json", *extra])


def _archive_vs_decode(snapshot: str, rounds: int) -> dict:
    """Alternate the typed decode of ``snapshot`` and ``leases archive --to`` a fresh directory from it."""
    from bench.run import decode_baseline

    decode = decode_baseline(snapshot)
    decodes, archives = [], []
    cpu_decodes, cpu_archives = [], []  # CPU seconds (this process and its children): less bent by other load
    scratch = Path(tempfile.mkdtemp(prefix="bench-archive-"))
    try:
        for i in range(rounds):
            gc.collect()
            began, cpu = time.perf_counter(), cpu_seconds()
            value = decode()
            decodes.append(time.perf_counter() - began)
            cpu_decodes.append(cpu_seconds() - cpu)
            del value
            gc.collect()
            target = scratch / f"a{i}"
            began, cpu = time.perf_counter(), cpu_seconds()
            run_main(["leases", "archive", "--to", str(target), "--snapshot", snapshot, "-o", "json"])
            archives.append(time.perf_counter() - began)
            cpu_archives.append(cpu_seconds() - cpu)
            shutil.rmtree(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"name": "archive-1m-vs-decode", "kind": "product", "decode": decodes, "seconds": archives,
            "median": statistics.median(archives), "decode_median": statistics.median(decodes),
            "ratio": statistics.median(a / d for a, d in zip(archives, decodes, strict=True)), "rss": rss_mb(),
            "cpu_decode": cpu_decodes, "cpu_archive": cpu_archives,
            "cpu_ratio": statistics.median(a / d for a, d in zip(cpu_archives, cpu_decodes, strict=True)),
            "child_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}  # none so far


def _rows(fleet: str, archive: str, since: str | None = None, every: str | None = None) -> None:
    """The archive audit's rows, totals and peaks (and periods) by owner, as archive/audit.py computes them,
    without the findings: the snapshot loaded, the window's view and entries defined, the rows counted."""
    from kubectl_runs.archive import breakdown, db, reader, relation
    from kubectl_runs.engine.audit_periods import boundaries
    from kubectl_runs.sources.files import load_snapshot

    snapshot = load_snapshot([fleet])
    at = snapshot.taken_at
    lo = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else at - timedelta(days=30)
    con = db.connect()
    try:
        relation.define(con, [reader.open_archive(archive)], snapshot.leases, lo, at)
        breakdown.define_entries(con, ("owner",), None)
        if every is None:
            breakdown.rows(con, ("owner",), None)
        else:
            spans = [(start, min(end, at)) for _label, start, end in boundaries(lo, at, every) if start < min(end, at)]
            breakdown.period_rows(con, ("owner",), None, every, spans)
    finally:
        con.close()


JOBS = {
    "audit-30d-owner": ("product", lambda fleet, archive: _audit(fleet, archive, ["--by", "owner"])),
    "audit-full-every-month": ("product", lambda fleet, archive, since: _audit(
        fleet, archive, ["--since", since, "--every", "month", "--by", "owner"])),
    "audit-full-doublebooked": ("product", lambda fleet, archive, since: _audit(fleet, archive, ["--since", since])),
    "audit-one-slot": ("product", lambda fleet, archive, since: _audit(fleet, archive, ["--since", since])),
    "rows-30d-owner": ("rows", lambda fleet, archive: _rows(fleet, archive)),
    "rows-full-every-month": ("rows", lambda fleet, archive, since: _rows(fleet, archive, since, "month")),
    "audit-full-hours": ("product", lambda fleet, archive, since: _audit(fleet, archive, ["--since", since,
                                                                               "--hours-only"])),
    "sql-30d-owner-peaks": ("sql", lambda archive, since, until: sql(sql_audit(archive, since, until))),
    "sql-full-gpu-hours": ("sql", lambda archive: sql(
        f"SELECT sum(gpus * (epoch_us(ended) - epoch_us(start))) / 3.6e9, count(*) "
        f"FROM read_parquet({files(archive)}) WHERE ended > start")),
    "sql-full-month-owner-peaks": ("sql", lambda archive: sql(sql_months(archive))),
    "sql-doublebooked": ("sql", lambda archive: sql(sql_double_booked(archive))),
}


def child(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    if spec["name"] == "archive-1m-vs-decode":
        result = _archive_vs_decode(spec["args"]["snapshot"], spec["rounds"])
    else:
        result = measure(spec["name"], spec["args"], spec["rounds"])
    print(json.dumps(result))


def _add(results: list[dict], result: dict | None, history: str) -> None:
    if result is not None:
        results.append({**result, "history": history})


ONLY: set[str] = set()  # --only: the measurements to run (default: all)


def in_child(name: str, rounds: int, **args) -> dict | None:
    if ONLY and name not in ONLY:
        return None
    spec = json.dumps({"name": name, "rounds": rounds, "args": args})
    done = subprocess.run([sys.executable, "-m", "bench.bench_archive", "--child", spec], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    line = f"{name:28} {result['kind']:8} median {result['median']:8.3f} s  peak RSS {result['rss']:8,.0f} MB"
    if "ratio" in result:
        line += (f"  decode {result['decode_median']:.3f} s  archive ÷ decode {result['ratio']:.2f}"
                 f"  (CPU seconds archive ÷ decode {result.get('cpu_ratio', 0):.2f})")
    print(line, file=sys.stderr, flush=True)
    return result


# --- fixtures --------------------------------------------------------------------------------------------------


def one_slot_archive(out: Path, leases: int) -> tuple[str, str, str]:
    """``leases`` closed leases all on slot one-0#0, a minute apart, each held for a day: one pile-up, the one
    finding (their run is in the fleet: without it every lease would be an UnknownRun finding as well)."""
    from kubectl_runs.archive import store
    from kubectl_runs.model import GPULease, GPULeaseSpec, GPULeaseStatus, ObjectMeta, ObjectRef, Slice

    end = datetime(2025, 11, 1, tzinfo=UTC)
    first = end - timedelta(minutes=leases + 24 * 60)
    made = [GPULease(
        metadata=ObjectMeta(name=f"pile-{i:06d}", namespace="pile", uid=f"00000000-0000-4000-8000-{i:012d}"),
        spec=GPULeaseSpec(owner="org:pile", run_ref=ObjectRef(namespace="pile", name="r"), group=0, flavor="H100-80GB",
                          slice=Slice(slots=("one-0#0",), role="Active"), start=first + timedelta(minutes=i),
                          reason="Start"),
        status=GPULeaseStatus(closed=True, ended=first + timedelta(minutes=i, days=1), closure_reason="Completed"))
        for i in range(leases)]
    store.archive(out / "archive", made, archived_at=end)
    fleet = {"apiVersion": "v1", "kind": "List",
             "metadata": {"annotations": {"jobtree.dev/snapshot-time": end.strftime("%Y-%m-%dT%H:%M:%SZ")}},
             "items": [{"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": "one-0", "labels": {"gpu.flavor": "H100-80GB", "fabric.domain": "d"}},
                        "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
                       {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r", "namespace": "pile"},
                        "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": 1}}, "status": {"phase": "Running"}}]}
    (out / "fleet.json").write_text(json.dumps(fleet))
    return str(out / "fleet.json"), str(out / "archive"), first.isoformat()


def snapshot_of(history: str, out: Path) -> str:
    """The JSON snapshot holding the present of ``history`` and every archived lease (what a cluster that
    never archived would hold)."""
    import msgspec

    from kubectl_runs.archive import reader
    from kubectl_runs.timeutil import EARLIEST, LATEST

    fleet = json.loads((Path(history) / "fleet.json").read_text())
    leases = reader.leases_between([reader.open_archive(Path(history) / "archive")], EARLIEST, LATEST)
    encoder = msgspec.json.Encoder()
    # Every GPULease, the fleet's open ones and the archived ones, in one run by (namespace, name): as the API
    # server (and ``snapshot save``) lists them.
    present = [item for item in fleet["items"] if item["kind"] == "GPULease"]
    keyed = [((item["metadata"].get("namespace", "default"), item["metadata"]["name"]), item) for item in present]
    keyed += [((lease.metadata.namespace, lease.metadata.name), lease) for lease in leases]
    keyed.sort(key=lambda pair: pair[0])
    path = out / "snapshot.json"
    with open(path, "wb") as handle:
        handle.write(b'{"apiVersion":"v1","kind":"List","metadata":' + json.dumps(fleet["metadata"]).encode()
                     + b',"items":[')
        handle.write(b",".join(json.dumps(item).encode() for item in fleet["items"] if item["kind"] != "GPULease"))
        for i in range(0, len(keyed), 100_000):
            handle.write(b"," + b",".join(json.dumps(item).encode() if isinstance(item, dict) else encoder.encode(item)
                                          for _key, item in keyed[i:i + 100_000]))
        handle.write(b"]}")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.bench_archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", help="a bench.generate --history DIR (10M leases)")
    parser.add_argument("--small", help="a bench.generate --history DIR of about 1M leases")
    parser.add_argument("--snapshot", metavar="FILE",
                        help="only the writer: archive-1m-vs-decode on this JSON snapshot (as snapshot_of makes "
                        "of --small), no history needed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--product-limit", type=int, default=1_500_000,
                        help="run the full-history product commands only on histories up to this many leases")
    parser.add_argument("--only", default="", metavar="NAMES",
                        help=f"comma-separated measurements to run (of {', '.join(JOBS)}, archive-1m-vs-decode)")
    args = parser.parse_args(argv)
    if args.snapshot:
        print(f"snapshot {args.snapshot}: {os.path.getsize(args.snapshot) / 1e6:,.0f} MB", file=sys.stderr, flush=True)
        results = [in_child("archive-1m-vs-decode", args.rounds, snapshot=args.snapshot)]
        print(json.dumps(results, indent=1))
        return 0
    if not args.history or not args.small:
        parser.error("--history and --small are required (or --snapshot FILE for the writer alone)")
    ONLY.update(name for name in args.only.split(",") if name)
    results = []
    for label, history in (("history", args.history), ("small", args.small)):
        fleet, archive = f"{history}/fleet.json", f"{history}/archive"
        manifest = read_manifest(archive)
        leases, size = manifest["leases"], sum(p["bytes"] for p in manifest["partitions"])
        since = manifest["firstStart"]
        print(f"{label}: {history}: {leases:,} leases, {size / 1e6:,.1f} MB, {size / leases:.1f} bytes a lease",
              file=sys.stderr, flush=True)
        results.append({"name": f"{label}-size", "leases": leases, "bytes": size})
        lo, hi = _window(fleet, 30)
        _add(results, in_child("audit-30d-owner", args.rounds, fleet=fleet, archive=archive), label)
        _add(results, in_child("rows-30d-owner", args.rounds, fleet=fleet, archive=archive), label)
        _add(results, in_child("sql-30d-owner-peaks", args.rounds, archive=archive, since=lo, until=hi), label)
        _add(results, in_child("rows-full-every-month", 1, fleet=fleet, archive=archive, since=since), label)
        _add(results, in_child("sql-full-gpu-hours", args.rounds, archive=archive), label)
        _add(results, in_child("audit-full-hours", args.rounds, fleet=fleet, archive=archive, since=since), label)
        _add(results, in_child("sql-full-month-owner-peaks", 1, archive=archive), label)
        if leases <= args.product_limit:
            _add(results, in_child("audit-full-every-month", 1, fleet=fleet, archive=archive, since=since),
                 label)
            _add(results, in_child("audit-full-doublebooked", 1, fleet=fleet, archive=archive, since=since),
                 label)
            _add(results, in_child("sql-doublebooked", 1, archive=archive), label)
    scratch = Path(tempfile.mkdtemp(prefix="bench-archive-"))
    try:
        if not ONLY or "audit-one-slot" in ONLY:
            fleet, archive, since = one_slot_archive(scratch / "one-slot", 100_000)
            _add(results, in_child("audit-one-slot", args.rounds, fleet=fleet, archive=archive, since=since),
                 "one slot, 100,000 leases")
        if not ONLY or "archive-1m-vs-decode" in ONLY:
            snapshot = snapshot_of(args.small, scratch)
            print(f"snapshot of {args.small}: {os.path.getsize(snapshot) / 1e6:,.0f} MB", file=sys.stderr,
                  flush=True)
            _add(results, in_child("archive-1m-vs-decode", args.rounds, snapshot=snapshot), "small")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
