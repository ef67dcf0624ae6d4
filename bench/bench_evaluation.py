"""The reconciler's status pass offline, with and without the shared plan inputs: what one Evaluation per batch
(kubectl_runs/engine/evaluation.py) saves, measured side by side in one process, on bench_reconcile's fleet.

    .venv/bin/python -m bench.bench_evaluation [--blocks 1,10] [--repeats 3]

The fleet is bench/bench_reconcile.py's (per block of 100 runs: 65 running with 20 open leases each, 30
succeeded with 700 closed leases, 5 pending; one Budget per namespace), decoded through the reconciler's own
cache (``Cache.view()``), with nothing stored: every Budget and Run gets its first status, all in one call of
``reconciler/status.status_writes`` (one batch of every object). Two ways, alternated each round:

- *shared*: the batch's Evaluation hands every plan the ledger, open leases, each run's leases, free capacity
  and funding inputs, each computed once (the loop since engine/evaluation.py);
- *per plan*: the batch shares the ledger and the open leases only, and each plan computes the rest itself —
  its leases from every open lease, the free capacity of its flavor from every open lease's slots, its
  funding inputs — exactly as ``plan_run(snapshot, run, at, leases=…, book=…)`` did for the reconciler
  before (runs × leases).

The two lists of writes are checked equal (as JSON) before anything is printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

import msgspec

from bench import bench_reconcile
from kubectl_runs.engine.plan import Plan, plan_run
from kubectl_runs.model import Run
from kubectl_runs.reconciler.cache import Cache, decode_entry
from kubectl_runs.reconciler.status import Evaluation, all_keys, status_writes

KINDS = ("Node", "Budget", "Run", "Reservation", "GPULease")


class PerPlan(Evaluation):
    """The batch shares the ledger and the open leases; every plan computes the rest itself."""

    def plan(self, run: Run) -> Plan:
        return plan_run(self.snapshot, run, self.at, leases=self.open, book=self.book)


def snapshot_of(blocks: int):
    bench_reconcile.NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)  # the fleet is built around it
    objects, _nodes = bench_reconcile.fleet(0, blocks, 0)
    cache = Cache()
    entries: dict[str, list] = {}
    for obj in objects:
        entries.setdefault(obj["kind"], []).append(decode_entry(obj["kind"], json.dumps(obj).encode()))
    for kind in KINDS:
        cache.replace(kind, entries.get(kind, []))
    snapshot, stored, bad = cache.view()
    return snapshot, stored, bad, bench_reconcile.NOW + timedelta(seconds=7)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="1,10", help="fleet sizes in blocks of 100 runs (comma-separated)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size (each: both ways, alternated)")
    args = parser.parse_args(argv)
    print("| fleet | shared (one Evaluation per batch) | per plan (before) | per plan ÷ shared | writes |")
    print("|---|---:|---:|---:|---:|")
    for blocks in (int(b) for b in args.blocks.split(",")):
        snapshot, stored, bad, at = snapshot_of(blocks)
        keys = sorted(all_keys(snapshot))
        times: dict[str, list[float]] = {"shared": [], "per plan": []}
        results = {}
        for round_ in range(args.repeats):
            ways = (("shared", Evaluation), ("per plan", PerPlan))
            for name, make in ways if round_ % 2 == 0 else ways[::-1]:
                began = time.perf_counter()
                results[name] = status_writes(snapshot, at, stored, keys, bad, make(snapshot, at))
                times[name].append(time.perf_counter() - began)
        if msgspec.json.encode(results["shared"]) != msgspec.json.encode(results["per plan"]):
            print(f"{blocks * 100} runs: the two ways wrote differently", file=sys.stderr)
            return 1
        shared, per_plan = statistics.median(times["shared"]), statistics.median(times["per plan"])
        print(f"| {len(snapshot.runs):,} runs, {len(snapshot.leases):,} leases, {len(snapshot.nodes):,} nodes | "
              f"{shared:.3f} s | {per_plan:.3f} s | **{per_plan / shared:.0f}×** | "
              f"{len(results['shared']):,} (identical) |")
    print(f"\nMedians of {args.repeats} rounds, both ways alternated in one process.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
