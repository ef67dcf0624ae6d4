"""Issue 27: the ledger keeper's pass (``reconcile --manage-leases``: ``plan_ledger``) offline, before and after,
side by side in one run, on the reconciler's fleet (``bench.generate.reconciler_fleet``: 1,000 runs / 20,000
leases, 10,000 runs / 200,000 leases).

    .venv/bin/python -m bench.bench_ledger [--runs 1000,10000] [--repeats 3] [--before REV] [--fairness]

*before* is the keeper of ``REV`` (default: the commit this branch was made from, ``c389874``), exported with
``git archive`` into a temporary directory; *after* is this checkout. Each measurement is its own process (the
code of one tree only), alternated before/after round by round: it loads the fleet file (``sources/files``),
times the typed decode of the same file (``bench.run.decode_baseline``, the baseline every benchmark divides by)
and then one ``plan_ledger(snapshot, at)`` at the fleet's instant + 7 s. Printed: the median pass of each, the
median decode, pass ÷ decode (each process's own decode), and whether the writes are identical (the JSON of every
write, causes included, hashed). ``--before-timeout`` stops a *before* pass that would take too long (printed as
"> N s"). ``--fairness`` also runs ``python -m bench.bench_fairness --days 7 --seed 1`` in both trees and checks
that everything it prints but its wall time is identical.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.generate import RECONCILER_NOW, reconciler_fleet

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
BASE = "c389874"  # main when issue 27's ledger work branched off
AT = RECONCILER_NOW + timedelta(seconds=7)

# Runs in a fresh process whose ``sys.path`` starts with one tree: only that tree's keeper is imported.
WORKER = r"""
import gc, hashlib, json, sys, time
from datetime import datetime
import msgspec
from bench.run import decode_baseline
from kubectl_runs.reconciler.ledger import plan_ledger
from kubectl_runs.sources.files import load_snapshot
path, at = sys.argv[1], datetime.fromisoformat(sys.argv[2])
decode = decode_baseline(path)
times = []
for _ in range(3):
    began = time.perf_counter(); decode(); times.append(time.perf_counter() - began)
snapshot = load_snapshot([path])
gc.collect()
began = time.perf_counter()
writes = plan_ledger(snapshot, at)
seconds = time.perf_counter() - began
digest = hashlib.sha256(msgspec.json.encode(writes)).hexdigest()
print(json.dumps({"pass": seconds, "decode": sorted(times)[1], "writes": len(writes), "digest": digest,
                  "runs": len(snapshot.runs), "leases": len(snapshot.leases), "nodes": len(snapshot.nodes)}))
"""


def export(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (kubectl_runs/ and bench/) under ``into``."""
    archive = into / "tree.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "archive", rev, "kubectl_runs", "bench"], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def fleet_file(runs: int) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"reconciler-{runs}.json"
    if not path.exists():
        items = reconciler_fleet(runs)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        tmp.replace(path)
    return path


def measure(tree: Path, path: Path, timeout: float | None) -> dict | None:
    env = dict(os.environ, PYTHONPATH=str(tree))
    try:
        done = subprocess.run([sys.executable, "-c", WORKER, str(path), AT.isoformat()], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise SystemExit(f"the pass failed in {tree}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fairness(tree: Path) -> tuple[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench.bench_fairness", "--days", "7", "--seed", "1"], cwd=tree,
                          env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - began
    outcome = re.sub(r"\nSimulated [^\n]*\n?$", "", done.stdout.rstrip() + "\n")
    outcome = re.sub(r"(?m)^.*wall.*$", "", outcome)  # the table's own wall-time row, if any
    return outcome, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="1000,10000", help="fleet sizes in runs (multiples of 100)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size (each: before and after)")
    parser.add_argument("--before", default=BASE, help=f"the revision measured as before (default {BASE})")
    parser.add_argument("--before-timeout", type=float, default=None, metavar="SECONDS",
                        help="stop a before pass after this long (default: no limit)")
    parser.add_argument("--before-repeats", type=int, default=None,
                        help="rounds of the before pass per size (default: --repeats)")
    parser.add_argument("--fairness", action="store_true",
                        help="also run bench_fairness --days 7 --seed 1 in both trees (outcomes must be identical)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        before_tree = export(args.before, Path(tmp))
        trees = {"before": before_tree, "after": ROOT}
        print(f"before = {args.before}, after = this checkout; at = {AT.isoformat()}; {os.cpu_count()} CPUs, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
        print("| fleet | pass before | pass after | before ÷ after | decode | before ÷ decode | after ÷ decode | "
              "writes |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for runs in (int(r) for r in args.runs.split(",")):
            path = fleet_file(runs)
            results: dict[str, list[dict | None]] = {"before": [], "after": []}
            before_rounds = args.repeats if args.before_repeats is None else args.before_repeats
            for round_ in range(args.repeats):
                order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
                for name in order:
                    if name == "before" and round_ >= before_rounds:
                        continue
                    timeout = args.before_timeout if name == "before" else None
                    results[name].append(measure(trees[name], path, timeout))
            after = [r for r in results["after"] if r is not None]
            before = [r for r in results["before"] if r is not None]
            a = statistics.median(r["pass"] for r in after)
            decode = statistics.median(r["decode"] for r in after + before)
            a_ratio = statistics.median(r["pass"] / r["decode"] for r in after)
            if before:
                b = statistics.median(r["pass"] for r in before)
                b_ratio = statistics.median(r["pass"] / r["decode"] for r in before)
                same = {r["digest"] for r in before + after}
                writes = f"{after[0]['writes']:,} ({'identical' if len(same) == 1 else 'DIFFERENT'})"
                b_text, speed, b_ratio_text = f"{b:.2f} s", f"**{b / a:.0f}×**", f"{b_ratio:.1f}"
            else:
                b_text = f"> {args.before_timeout:.0f} s (stopped)"
                speed, b_ratio_text = f"> {args.before_timeout / a:.0f}×", "–"
                writes = f"{after[0]['writes']:,}"
            first = after[0]
            print(f"| {first['runs']:,} runs, {first['leases']:,} leases, {first['nodes']:,} nodes | {b_text} | "
                  f"{a:.2f} s | {speed} | {decode:.2f} s | {b_ratio_text} | {a_ratio:.2f} | {writes} |", flush=True)
            if before and len({r["digest"] for r in before + after}) != 1:
                print("the writes differ between before and after", file=sys.stderr)
                return 1
        print(f"\nMedians: after {args.repeats} rounds, before {before_rounds} (each its own process, alternated); "
              f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}.")
        if args.fairness:
            out = {}
            for name in ("before", "after"):
                out[name] = fairness(trees[name])
            same = out["before"][0] == out["after"][0]
            print(f"\nbench_fairness --days 7 --seed 1: wall {out['before'][1]:.1f} s before, {out['after'][1]:.1f} s "
                  f"after ({out['before'][1] / out['after'][1]:.1f}×); outcomes "
                  f"{'identical' if same else 'DIFFERENT'}\n")
            print(out["after"][0])
            if not same:
                print(out["before"][0], file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
