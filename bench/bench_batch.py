"""Issue 27: the per-batch cost of the live reconcile loop, the old way (every batch rebuilds the snapshot from
the whole cache and the ledger from every lease) and the new (the cache's view built again only for the kinds
that changed, reconciler/books.py funding again only the envelopes that changed), side by side in one run, at
1,000 and 10,000 runs of bench/scale_fleet.py's fleet — offline: the objects go into a reconciler ``Cache``
without a server.

    .venv/bin/python -m bench.bench_batch [--runs 1000,10000] [--batches 3] [--no-ledger]

Each batch is what the loop does after its previous batch: 64 Runs' stored status changed (our own status writes
coming back: *echo*, as in a cold start, or when a Run is created or edited) and, in *echo+lease*, one GPULease
opened too; the clock moves a second between rounds. The batch takes the view, makes the Evaluation and
computes the status writes of 64 Runs (``status_writes``); with ``--manage-leases`` the loop also runs the
ledger keeper's pass (``plan_ledger``): not changed here, so it is timed once per round and added to both. *old* is
the code before issue 27's batch work reproduced in place: ``full_view`` is the old ``Cache.view`` (sort and
decode every kind) and its Evaluation has no Books (``accounting.ledger`` over every lease). Both ways are run
on the same cache, alternately, and their status writes are checked equal. Printed: the median batch of each (CPU
seconds of the process, so that other work on a shared machine does not count; and the batch's wall time),
its parts, and old ÷ new; also a batch of 512 (the deep-queue batch of reconciler/queue.py) the new way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from datetime import UTC, datetime, timedelta

from bench import scale_fleet
from kubectl_runs.model import Snapshot
from kubectl_runs.reconciler.books import Books
from kubectl_runs.reconciler.cache import Cache, decode_entry
from kubectl_runs.reconciler.ledger import plan_ledger
from kubectl_runs.reconciler.status import Evaluation, Stored, status_writes

NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
KINDS = ("Node", "Budget", "Run", "Reservation", "GPULease")
FIELDS = {"Node": "nodes", "Budget": "budgets", "Run": "runs", "Reservation": "reservations", "GPULease": "leases"}
BATCH = 64


def full_view(cache: Cache):
    """The old ``Cache.view()``: every kind sorted and its records, stored statuses and refused objects gathered
    again (main before issue 27's batch work)."""
    records, stored, bad = {}, {}, {}
    for kind in KINDS:
        entries = cache.entries(kind)
        entries.sort(key=lambda e: (e.namespace, e.name))
        good = []
        for entry in entries:
            if entry.bad is not None:
                bad[(kind, entry.namespace, entry.name)] = entry.bad
                continue
            good.append(entry.record)
            if entry.status is not None:
                stored[(kind, entry.namespace, entry.name)] = Stored(status=entry.status)
        records[FIELDS[kind]] = tuple(good)
    return Snapshot(**records), stored, bad


def load(runs: int) -> tuple[Cache, list]:
    cache = Cache()
    by_kind: dict[str, list] = {kind: [] for kind in KINDS}
    for o in scale_fleet.fleet(range(runs // 100), NOW):
        o["metadata"]["resourceVersion"] = "1"
        by_kind[o["kind"]].append(decode_entry(o["kind"], json.dumps(o).encode()))
    for kind in KINDS:
        cache.replace(kind, by_kind[kind])
    return cache, sorted(cache.entries("Run"), key=lambda e: (e.namespace, e.name))


def change(cache: Cache, runs: list, batch: int, version: int, size: int, lease: bool) -> list:
    """Between two batches: ``size`` Runs' status written (the echo of the last batch's writes) and, with
    ``lease``, one lease opened in the namespace of the first. Returns the keys of the next batch."""
    chosen = [runs[(batch * size + i) % len(runs)] for i in range(size)]
    for entry in chosen:
        status = {"phase": "Pending", "version": version}
        cache.upsert(dataclasses.replace(entry, resource_version=str(version), status=status), notify=False)
    if lease:
        ns = chosen[0].namespace
        node = scale_fleet.node_name(int(ns.removeprefix("team")), scale_fleet.NODES_PER_BLOCK - 1)
        item = scale_fleet.lease(f"bench-{version}", ns, chosen[0].name, 0, [f"{node}#{version % 8}"], NOW)
        item["metadata"]["resourceVersion"] = str(version)
        cache.upsert(decode_entry("GPULease", json.dumps(item).encode()), notify=False)
    return [("Run", e.namespace, e.name) for e in chosen]


def one_batch(cache: Cache, keys: list, at: datetime, *, old: bool, books: Books) -> dict:
    """CPU seconds of this process (``time.process_time``: what another process on a shared machine does not
    add) of each part, and the wall seconds of the batch."""
    times = {}
    wall = time.perf_counter()
    began = time.process_time()
    snapshot, stored, bad = full_view(cache) if old else cache.view()
    times["view"] = time.process_time() - began
    began = time.process_time()
    evaluation = Evaluation(snapshot, at) if old else Evaluation(snapshot, at, books)
    times["writes"] = status_writes(snapshot, at, stored, keys, bad, evaluation)
    times["status"] = time.process_time() - began
    times["wall"] = time.perf_counter() - wall
    times["snapshot"] = snapshot
    return times


SCENARIOS = {"echo": False, "echo+lease": True}


def measure(runs: int, batches: int, ledger: bool) -> dict:
    began = time.perf_counter()
    cache, run_entries = load(runs)
    out: dict = {"loaded": time.perf_counter() - began, "ledger": [], "new512": []}
    books = Books()
    Evaluation(cache.view()[0], NOW, books)  # the first batch of the new way is the old one: from the second on
    version = 10
    for batch in range(batches):
        at = NOW + timedelta(seconds=7 + batch)
        for scenario, lease in SCENARIOS.items():
            for way in ("old", "new"):
                version += 1
                keys = change(cache, run_entries, batch, version, BATCH, lease)  # the same Runs both ways
                if way == "new":  # the same batch the old way too, for the equality check (not timed)
                    want = one_batch(cache, keys, at, old=True, books=books)["writes"]
                result = one_batch(cache, keys, at, old=way == "old", books=books)
                if way == "new" and result["writes"] != want:
                    raise SystemExit(f"runs={runs} batch={batch}: the new way's status writes differ from the old's")
                out.setdefault((scenario, way), []).append(result)
        if ledger:  # the keeper's pass is the same code both ways: once per round, on the last view
            began = time.process_time()
            plan_ledger(result["snapshot"], at)
            out["ledger"].append(time.process_time() - began)
        version += 1
        keys = change(cache, run_entries, 1000 + batch, version, 512, False)
        out["new512"].append(one_batch(cache, keys, at, old=False, books=books))
    out["carried"] = books.carried
    out["envelopes"] = len(cache.view()[0].envelopes_by_key)
    return out


def median(results: list, part: str) -> float:
    return statistics.median(r[part] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1000,10000")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--no-ledger", action="store_true", help="leave out the ledger keeper's pass")
    args = parser.parse_args()
    ledger = not args.no_ledger
    with open("/proc/loadavg") as f:
        load_text = f.read().split()[:3]
    print(f"bench_batch: median of {args.batches} batches of {BATCH} Runs; "
          f"load average {' '.join(load_text)} at start, {os.cpu_count()} CPUs")
    print("CPU seconds of the benchmark's process (time.process_time); wall: the batch's wall seconds, ledger pass aside")
    header = f"{'runs':>6} {'changed':>11} {'way':>4} {'view':>8} {'eval+status':>12} {'batch':>8} {'wall':>8}"
    if ledger:
        header += f" {'batch+ledger':>13}"
    print(header)
    for runs in [int(x) for x in args.runs.split(",")]:
        found = measure(runs, args.batches, ledger)
        pass_ = statistics.median(found["ledger"]) if ledger else 0.0
        for scenario in SCENARIOS:
            rows = {}
            for way in ("old", "new"):
                results = found[(scenario, way)]
                view, status = median(results, "view"), median(results, "status")
                rows[way] = view + status
                line = (f"{runs:>6} {scenario:>11} {way:>4} {view:>7.3f}s {status:>11.3f}s {view + status:>7.3f}s "
                        f"{median(results, 'wall'):>7.3f}s")
                if ledger:
                    line += f" {view + status + pass_:>12.3f}s"
                print(line)
            ratio = f"{runs:>6} {scenario:>11} old÷new: batch {rows['old'] / rows['new']:.1f}×"
            if ledger:
                ratio += f", batch+ledger {(rows['old'] + pass_) / (rows['new'] + pass_):.2f}×"
            print(ratio)
        big = found["new512"]
        print(f"{runs:>6} ledger pass (plan_ledger, unchanged): {pass_:.3f}s; new, a batch of 512 Runs (echo): view "
              f"{median(big, 'view'):.3f}s + eval+status {median(big, 'status'):.3f}s; Evaluations that kept the "
              f"previous one's lease values: {found['carried']}; fleet loaded in {found['loaded']:.0f}s")
    with open("/proc/loadavg") as f:
        print(f"load average at the end: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
