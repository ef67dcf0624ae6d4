"""Issue 27: the ledger keeper as the live loop runs it (``reconcile --manage-leases``: one pass per batch),
before and after, side by side in one run, on bench/scale_fleet.py's fleet (the fleet of bench_scale: nothing to
write as loaded; a new 4-GPU Run in ``team0`` fits at once).

    .venv/bin/python -m bench.bench_keeper [--runs 1000,10000] [--repeats 3] [--before REV]

*before* is the keeper of ``REV`` (default ``c18063b``, main before this round) exported with ``git archive``;
*after* is this checkout. Each measurement is its own process (one tree's code only), before and after
alternated round by round. A process loads the fleet, then runs the passes a loop runs one after the other, each
timed (CPU seconds of the process, ``time.process_time``, and wall seconds):

- *first*: the pass over the fleet as loaded (start-up);
- *again*: the next batch's pass one second later, nothing changed but Runs' own status coming back (the
  snapshot's Run tuple is a new one: our status writes), what an echo batch or a periodic resync runs;
- *new Run*: a pass two seconds later with a new 4-GPU Run (it mints 4 GPULeases), what a user's new Run waits
  for.

The keeper is the tree's ``Keeper`` when it has one (the loop's, with its memory between passes), else
``plan_ledger``. The writes of every pass are hashed: before and after must write the very same.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.bench_ledger import export

ROOT = Path(__file__).resolve().parents[1]
BASE = "c18063b"
PASSES = ("first", "again", "new Run")

WORKER = r"""
import dataclasses, hashlib, json, sys, time
from datetime import UTC, datetime, timedelta
import msgspec
from bench import scale_fleet
from kubectl_runs.model import Run
from kubectl_runs.sources.files import load_file
import kubectl_runs.reconciler.ledger as ledger
now = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
doc = scale_fleet.snapshot_document(int(sys.argv[1]) // 100, now, None)
snap = load_file("fleet.json", msgspec.json.encode(doc))
del doc
keeper = ledger.Keeper() if hasattr(ledger, "Keeper") else ledger.plan_ledger
echo = dataclasses.replace(snap, runs=tuple(msgspec.structs.replace(r) for r in snap.runs))
probe = msgspec.convert({"kind": "Run", "metadata": {"name": "probe", "namespace": "team0",
                                                      "creationTimestamp": "2026-11-24T05:00:08Z"},
                         "spec": {"resources": {"gpuType": scale_fleet.FLAVOR, "totalGPUs": 4},
                                  "locality": {"groupGPUs": 1}}}, Run)
arrived = dataclasses.replace(echo, runs=echo.runs + (probe,))
out = {}
for name, view, seconds in (("first", snap, 7), ("again", echo, 8), ("new Run", arrived, 9)):
    cpu, wall = time.process_time(), time.perf_counter()
    writes = keeper(view, now + timedelta(seconds=seconds))
    out[name] = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, "writes": len(writes),
                 "digest": hashlib.sha256(msgspec.json.encode(writes)).hexdigest()[:16]}
print(json.dumps(out))
"""


def measure(tree: Path, runs: int) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-c", WORKER, str(runs)], cwd=tree, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the passes failed in {tree}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="1000,10000", help="fleet sizes in runs (multiples of 100)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size (each: before and after)")
    parser.add_argument("--before", default=BASE, help=f"the revision measured as before (default {BASE})")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-keeper-") as tmp:
        trees = {"before": export(args.before, Path(tmp)), "after": ROOT}
        print(f"before = {args.before}, after = this checkout; {os.cpu_count()} CPUs, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; medians of {args.repeats} rounds, CPU seconds "
              "(wall in brackets)\n")
        print("| fleet | pass | before | after | before ÷ after (CPU) | writes |")
        print("|---|---|---:|---:|---:|---|")
        for runs in (int(r) for r in args.runs.split(",")):
            results: dict[str, list[dict]] = {"before": [], "after": []}
            for round_ in range(args.repeats):
                for name in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                    results[name].append(measure(trees[name], runs))
            for step in PASSES:
                b = [r[step] for r in results["before"]]
                a = [r[step] for r in results["after"]]
                digests = {r["digest"] for r in a + b}
                same = "identical" if len(digests) == 1 else f"DIFFERENT ({len(digests)} digests)"
                cpu_b, cpu_a = statistics.median(r["cpu"] for r in b), statistics.median(r["cpu"] for r in a)
                wall_b, wall_a = statistics.median(r["wall"] for r in b), statistics.median(r["wall"] for r in a)
                print(f"| {runs:,} runs | {step} | {cpu_b:.3f} s ({wall_b:.3f}) | {cpu_a:.3f} s ({wall_a:.3f}) | "
                      f"**{cpu_b / cpu_a:.1f}×** | {a[0]['writes']} ({same}) |", flush=True)
                if len(digests) != 1:
                    return 1
        print(f"\nload average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
