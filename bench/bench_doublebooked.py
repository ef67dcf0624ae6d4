"""Benchmark: ``leases audit`` on a planted worst case for DoubleBooked — 100,000 leases overlapping on the same
slots (issue 11). The finding used to be one per *pair* of leases sharing a slot (quadratic: 2,000 such leases
gave 108,000 findings, 92,000 went past 9 GB); it is now one per episode of each contended slot, found in
O(n log n).

    .venv/bin/python -m bench.bench_doublebooked                 # 100,000 leases, 5 rounds
    .venv/bin/python -m bench.bench_doublebooked --leases 20000 --repeats 3

The file: 1,000 nodes of 8 GPUs, 100 leases per node, started a minute apart in the two days before the
snapshot's time and held for a day (``--open``: still held), so that on every node all 100 hold its slots at
once. Slot lists vary as a real
ledger's do (whole node, halves, quarters, single GPUs, in rotation), so a node's slots are held by different
sets of leases. The objects are shaped as the API server returns them and as ``bench/generate.py`` writes them
(uid, resourceVersion, labels, paidBy, status): one Run per node (the leases are its groups), one Budget whose
envelope funds them all — so that DoubleBooked is the only finding.

Measured as ``bench.run`` measures (one process, the typed decode of the same file as the baseline, the two
alternated, medians): ``leases audit -o json`` as a user runs it, from ``main([...])`` to its return. It then
checks the answer: every contended slot (all 8,000) is in exactly one finding, and the findings are few.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.run import OUT, command, decode_baseline, release_loaded

STAMP = datetime(2025, 11, 20, 12, 0, tzinfo=UTC)
GPUS = 8
PER_NODE = 100
# Slot lists in rotation: whole node, the two halves, the four quarters, and single GPUs.
SHAPES = [tuple(range(8)), (0, 1, 2, 3), (4, 5, 6, 7), (0, 1), (2, 3), (4, 5), (6, 7), (0,), (3,), (6,)]


def _uid(n: int) -> str:
    return str(uuid.UUID(int=0x5EED_0000_0000_4000_8000_0000_0000_0000 + n))


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def generate(leases: int, still_open: bool = False) -> dict:
    nodes = max(1, leases // PER_NODE)
    items: list[dict] = []
    for n in range(nodes):
        items.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": f"dbl-{n:05d}", "uid": _uid(5 * 10**6 + n), "resourceVersion": str(n),
                                   "labels": {"gpu.flavor": "H100-80GB", "fabric.domain": f"d{n // 32}",
                                              "kubernetes.io/hostname": f"dbl-{n:05d}"}},
                      "status": {"capacity": {"cpu": "192", "memory": "2063937Mi", "nvidia.com/gpu": str(GPUS)},
                                 "allocatable": {"cpu": "191500m", "memory": "2061889Mi",
                                                 "nvidia.com/gpu": str(GPUS)}}})
    first = STAMP - timedelta(days=2)
    items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget",
                  "metadata": {"name": "team", "namespace": "team", "uid": _uid(0), "resourceVersion": "1",
                               "generation": 1, "creationTimestamp": _iso(first - timedelta(days=30))},
                  "spec": {"owner": "org:ai:team", "envelopes": [{
                      "name": "all", "flavor": "H100-80GB", "concurrency": 10 * leases * GPUS,
                      "start": _iso(first - timedelta(days=60)), "end": _iso(STAMP + timedelta(days=60))}]}})
    for n in range(nodes):
        items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run",
                      "metadata": {"name": f"run-{n:05d}", "namespace": "team", "uid": _uid(1 + n),
                                   "resourceVersion": str(100 + n), "generation": 1,
                                   "creationTimestamp": _iso(first)},
                      "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": GPUS * PER_NODE}},
                      "status": {"phase": "Running"}})
    for i in range(leases):
        n, k = divmod(i, PER_NODE)
        n %= nodes
        began = first + timedelta(minutes=k, seconds=n % 60)
        start = _iso(began)
        status = {"closed": False} if still_open else {"closed": True, "ended": _iso(began + timedelta(days=1)),
                                                       "closureReason": "Completed"}
        items.append({
            "apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease",
            "metadata": {"name": f"run-{n:05d}-g{k}", "namespace": "team", "uid": _uid(10**7 + i),
                         "resourceVersion": str(10**6 + i), "generation": 1, "creationTimestamp": start,
                         "labels": {"jobtree.dev/run": f"run-{n:05d}", "jobtree.dev/group": str(k)}},
            "spec": {"owner": "org:ai:team", "runRef": {"namespace": "team", "name": f"run-{n:05d}"}, "group": k,
                     "flavor": "H100-80GB",
                     "slice": {"slots": [f"dbl-{n:05d}#{s}" for s in SHAPES[k % len(SHAPES)]], "role": "Active"},
                     "paidBy": {"namespace": "team", "budget": "team", "envelope": "all"},
                     "start": start, "reason": "Start"},
            "status": status,
        })
    items.sort(key=lambda item: (item["kind"] != "Node", item["kind"], item["metadata"].get("namespace", ""),
                                 item["metadata"]["name"]))  # each kind in the API server's order, as kubectl lists
    return {"apiVersion": "v1", "kind": "List",
            "metadata": {"annotations": {"jobtree.dev/snapshot-time": _iso(STAMP)}}, "items": items}


def fleet(leases: int, still_open: bool) -> tuple[Path, int]:
    """The file (cached in bench/out/) and its number of contended slots (every slot of every node)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"doublebooked-{leases}{'-open' if still_open else ''}.json"
    if not path.exists():
        path.write_text(json.dumps(generate(leases, still_open), separators=(",", ":")))
    return path, max(1, leases // PER_NODE) * GPUS


_SLOTS = re.compile(r"^holds (?:slot (\S+?) |slots ((?:\S+?, )*\S+?) |(\d+) slots \((\S+) … (\S+)\) )")


def reported_slots(findings: list[dict]) -> dict[str, int]:
    """Slots said per node, from each DoubleBooked finding's detail (``slot a``, ``slots a, b``, ``N slots
    (a … z)``)."""
    per_node: dict[str, int] = {}
    for finding in findings:
        assert finding["kind"] == "DoubleBooked", finding
        match = _SLOTS.match(finding["detail"])
        assert match, finding["detail"]
        one, several, count, first, _last = match.groups()
        said = [one] if one else several.split(", ") if several else [first] * int(count)
        node = said[0].rpartition("#")[0]
        per_node[node] = per_node.get(node, 0) + len(said)
    return per_node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--open", action="store_true",
                        help="the leases are still held at the snapshot's time (the ledger then funds all of them)")
    args = parser.parse_args()
    path, contended = fleet(args.leases, args.open)
    audit = command(["leases", "audit", "--snapshot", str(path), "-o", "json"])
    decode = decode_baseline(str(path))
    answer = json.loads(audit())  # warm-up, and the answer checked below
    release_loaded()
    decode()
    times: dict[str, list[float]] = {"audit": [], "decode": []}
    for round_ in range(args.repeats):
        order = ("audit", "decode") if round_ % 2 else ("decode", "audit")
        for key in order:
            began = time.perf_counter()
            result = (audit if key == "audit" else decode)()
            times[key].append(time.perf_counter() - began)
            del result
            release_loaded()
            gc.collect()
    findings = answer["findings"]
    per_node = reported_slots(findings)
    said = sum(per_node.values())
    audit_s, decode_s = statistics.median(times["audit"]), statistics.median(times["decode"])
    ratios = [a / d for a, d in zip(times["audit"], times["decode"], strict=True)]
    print(f"file: {path} ({path.stat().st_size / 1e6:,.0f} MB), {args.leases:,} leases on {len(per_node):,} nodes")
    print(f"leases audit -o json: median {audit_s:.3f} s; typed decode of the same file: median {decode_s:.3f} s")
    print(f"ratio (audit ÷ decode): {audit_s / decode_s:.2f} (per round {min(ratios):.2f}–{max(ratios):.2f}), "
          f"{args.repeats} rounds")
    print(f"DoubleBooked findings: {len(findings):,}; slots reported: {said:,} of {contended:,} contended "
          f"({'all' if said == contended else 'NOT all'})")
    if said != contended:
        sys.exit(1)


if __name__ == "__main__":
    main()
