"""Benchmark: ``kubectl runs leases audit`` over a generated history of GPU leases (default 1,000,000).

Prints, measured side by side in one run (absolute times on shared machines are noise; DESIGN.md):

* ``decode``  — the fastest decode of the same file written here: read the bytes, msgspec-decode the ``List``
  straight into the project's typed records with the garbage collector paused (NOTES.md). This is the 1.0.
* ``decode-min`` — for reference, a decode into minimal lease-only Structs (the floor for any loader that
  keeps the fields the audit reads).
* ``load``    — the project's loader (``load_snapshot``: decode + de-duplicate + sort by namespace/name).
* ``engine``  — ``audit(snapshot, …)`` alone, on the loaded snapshot (the arithmetic; target ≤ 0.5 × decode).
* ``command`` — the whole command ``kubectl-runs leases audit --snapshot FILE -o json`` in a fresh process,
  with its peak RSS (target ≤ 1.5 × decode).

Each timing is the best of ``--repeat`` runs, each in a fresh process. The history is generated once (cached
next to ``--out``), reproducibly from ``--seed``; it is a fleet of 8-GPU nodes over ~90 days, leases listed in
(namespace, name) order as the API server lists them, with a few problems planted so that every finding kind
is exercised.

    .venv/bin/python bench/bench_audit.py                 # 1,000,000 leases, default window and all history
    .venv/bin/python bench/bench_audit.py --leases 200000 --repeat 3
    .venv/bin/python bench/bench_audit.py --generator own   # the simpler history generated in this file
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
START = datetime(2025, 9, 1, tzinfo=UTC)
DAYS = 90
MONTHS = ("2025-09-01", "2025-10-01", "2025-11-01", "2025-12-01")
FLAVORS = ("H100-80GB", "MI300X")
TEAMS = tuple(f"org:ai:g{g}:t{t}" for g in range(4) for t in range(6))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate(leases: int, seed: int = 7) -> dict:
    """A ``List`` snapshot with ``leases`` GPULeases, their Runs, Budgets and Nodes (one node per ~1,000
    leases). Runs arrive over 90 days and take 1–8 groups of 8 GPUs (whole nodes) or one group of 4; each group
    is a lease on the unit (a node, or a half node) that frees first; ~5 % of groups add a 2-GPU spare lease
    on a half node; ~2 % are minted unfunded; the last lease on each unit is still open at the snapshot time."""
    rng = random.Random(seed)
    t0 = START.timestamp()
    t_end = t0 + DAYS * 86400
    month_starts = [datetime.fromisoformat(m + "T00:00:00+00:00").timestamp() for m in MONTHS]
    n_nodes = max(10, leases // 1000)
    nodes = [f"gpu-{i:05d}" for i in range(n_nodes)]
    flavor_of = {name: FLAVORS[i % 2] for i, name in enumerate(nodes)}
    items: list[dict] = []
    for i, name in enumerate(nodes):
        items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpu.flavor": flavor_of[name], "fabric.domain": f"d{i // 32}",
                                                  "region": "us-west"}},
            "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}},
        })
    for ti, owner in enumerate(TEAMS):
        envelopes = [
            {"name": f"{flavor.lower()}-m{m}", "flavor": flavor, "concurrency": 4 * n_nodes,
             "start": MONTHS[m] + "T00:00:00Z", "end": MONTHS[m + 1] + "T00:00:00Z"}
            for m in range(3) for flavor in FLAVORS
        ]
        items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget",
                      "metadata": {"name": "budget", "namespace": f"team-{ti:02d}"},
                      "spec": {"owner": owner, "envelopes": envelopes}})

    # Units: whole nodes (80 %) and half nodes (20 %), per flavor, as heaps of (free-at, unit).
    heaps: dict[tuple[str, bool], list] = {(f, half): [] for f in FLAVORS for half in (False, True)}
    for i, name in enumerate(nodes):
        if i % 5 == 4:
            heaps[(flavor_of[name], True)].extend([(t0, name, 0), (t0, name, 4)])
        else:
            heaps[(flavor_of[name], False)].append((t0, name, 0))
    for heap in heaps.values():
        heapq.heapify(heap)

    made: list[dict] = []
    runs: list[dict] = []
    arrival = t0
    mean_gap = DAYS * 86400 / (leases / 2.8)
    run_no = 0
    full = 0
    while len(made) < leases:
        arrival += rng.expovariate(1 / mean_gap)
        if arrival >= t_end:
            arrival = t0 + rng.random() * DAYS * 86400
        ti = rng.randrange(len(TEAMS))
        ns = f"team-{ti:02d}"
        flavor = FLAVORS[rng.randrange(2)]
        half = rng.random() < 0.2
        groups = 1 if half else rng.choice((1, 1, 2, 4, 4, 8))
        duration = min(rng.lognormvariate(7.3, 1.0), 2 * 86400)
        run = f"run-{run_no:07d}"
        run_no += 1
        gpus = 4 if half else 8
        runs.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": run, "namespace": ns},
                     "spec": {"resources": {"gpuType": flavor, "totalGPUs": gpus * groups}},
                     "status": {"phase": "Succeeded"}})
        heap = heaps[(flavor, half)]
        for group in range(groups):
            free, node, first = heapq.heappop(heap)
            start = float(int(max(free, arrival) + rng.randrange(0, 120)))
            if start >= t_end:  # the fleet is full until the snapshot: this group never started
                heapq.heappush(heap, (free, node, first))
                full += 1
                if full > 10_000:
                    raise RuntimeError(f"the generated fleet is full after {len(made):,} leases")
                break
            # A lease ends by the close of the envelope window it is charged to (the next one is a new lease).
            month_end = min(m for m in month_starts if m > start)
            end = float(int(min(start + duration * rng.uniform(0.9, 1.1), month_end)))
            heapq.heappush(heap, (end, node, first))
            made.append(_lease(f"{run}-g{group}", ns, TEAMS[ti], run, group, flavor,
                               [f"{node}#{first + k}" for k in range(gpus)], start, end, month_starts, rng))
            if half and rng.random() < 0.05 and len(made) < leases:
                spare_heap = heaps[(flavor, True)]
                sfree, snode, sfirst = heapq.heappop(spare_heap)
                sstart = float(int(max(sfree, start)))
                heapq.heappush(spare_heap, (end if end > sstart else sstart + 60, snode, sfirst))
                if end > sstart:
                    made.append(_lease(f"{run}-g{group}-spare", ns, TEAMS[ti], run, group, flavor,
                                       [f"{snode}#{sfirst}", f"{snode}#{sfirst + 1}"], sstart, end, month_starts,
                                       rng, role="Spare"))
            if len(made) >= leases:
                break
    # Leases still running at the snapshot time are open.
    for lease in made:
        if _parse(lease["status"]["ended"]) >= t_end:
            lease["status"] = {"closed": False}
    _plant_findings(made, runs, items, rng, t_end)
    made.sort(key=lambda x: (x["metadata"]["namespace"], x["metadata"]["name"]))
    runs.sort(key=lambda x: (x["metadata"]["namespace"], x["metadata"]["name"]))
    items.extend(runs)
    items.extend(made)
    return {"apiVersion": "v1", "kind": "List",
            "metadata": {"annotations": {"jobtree.dev/snapshot-time": _iso(t_end)}}, "items": items}


def _parse(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _lease(name, ns, owner, run, group, flavor, slots, start, end, month_starts, rng, role="Active") -> dict:
    month = max(i for i in range(3) if month_starts[i] <= start) if start >= month_starts[0] else 0
    spec = {
        "owner": owner, "runRef": {"namespace": ns, "name": run}, "group": group, "flavor": flavor,
        "slice": {"slots": slots, "role": role}, "start": _iso(start), "reason": "Start",
    }
    if rng.random() >= 0.02:
        spec["paidBy"] = {"namespace": ns, "budget": "budget", "envelope": f"{flavor.lower()}-m{month}"}
    return {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease", "metadata": {"name": name, "namespace": ns},
            "spec": spec, "status": {"closed": True, "ended": _iso(end), "closureReason": "Completed"}}


def _plant_findings(made: list[dict], runs: list[dict], items: list[dict], rng: random.Random, t_end: float) -> None:
    """One or two of each finding kind, near the end of the history (inside the default 30-day window)."""
    late = [x for x in made if _parse(x["spec"]["start"]) > t_end - 10 * 86400 and "paidBy" in x["spec"]
            and x["spec"]["slice"]["role"] == "Active"]
    rng.shuffle(late)
    a, b, c, d, e, f = late[:6]
    # DoubleBooked: a copy of a lease (another run, same slots, same time).
    twin = json.loads(json.dumps(a))
    twin["metadata"]["name"] += "-twin"
    made.append(twin)
    # UnknownNode, UnknownRun, UnknownEnvelope.
    b["spec"]["slice"]["slots"] = ["gpu-retired-9#0", "gpu-retired-9#1"]
    c["spec"]["runRef"]["name"] = "deleted-run"
    d["spec"]["paidBy"]["envelope"] = "no-such-envelope"
    # ACLViolation: a lease of another family charged to a team envelope that does not lend.
    e["spec"]["owner"] = "org:ext:partner"
    # Overdraft: a tiny team whose envelope funds 8 GPUs at once, with two 8-GPU leases open together.
    items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "tiny", "namespace": "tiny"},
                  "spec": {"owner": "org:ai:tiny", "envelopes": [{"name": "h100", "flavor": "H100-80GB", "concurrency": 8,
                           "start": MONTHS[0] + "T00:00:00Z", "end": MONTHS[3] + "T00:00:00Z"}]}})
    for k, base in enumerate((f, a)):
        extra = json.loads(json.dumps(base))
        extra["metadata"] = {"name": f"tiny-{k}", "namespace": "tiny"}
        extra["spec"].update(owner="org:ai:tiny", runRef={"namespace": "tiny", "name": "tiny-run"},
                             paidBy={"namespace": "tiny", "budget": "tiny", "envelope": "h100"},
                             slice={"slots": [f"gpu-{k:05d}#{i}" for i in range(8)], "role": "Active"},
                             start=_iso(t_end - 86400), flavor="H100-80GB")
        extra["status"] = {"closed": False}
        made.append(extra)
    runs.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": "tiny-run", "namespace": "tiny"},
                 "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": 16}}, "status": {"phase": "Running"}})
    # UnboundNamespace: a second Budget with another owner in team-00.
    items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "intruder", "namespace": "team-00"},
                  "spec": {"owner": "org:ai:intruder", "envelopes": [{"name": "h100", "flavor": "H100-80GB",
                           "concurrency": 8, "start": MONTHS[2] + "T00:00:00Z", "end": MONTHS[3] + "T00:00:00Z"}]}})


# --- measuring ---------------------------------------------------------------------------------------------

_DECODE = """
import gc, sys, time, msgspec
from kubectl_runs.sources.files import _TypedList
t = time.perf_counter()
gc.disable()
with open(sys.argv[1], "rb") as f:
    data = f.read()
doc = msgspec.json.Decoder(_TypedList).decode(data)
decoded = time.perf_counter() - t
del doc, data  # for reference: what freeing the records costs (the CLI skips it: it leaves with os._exit)
print(decoded, time.perf_counter() - t)
"""

_DECODE_MIN = """
import gc, sys, time, msgspec
from datetime import datetime

class Slice(msgspec.Struct, gc=False):
    slots: list[str]

class Meta(msgspec.Struct, gc=False):
    name: str
    namespace: str = ""

class Spec(msgspec.Struct, gc=False, rename="camel"):
    owner: str = ""
    flavor: str = ""
    slice: Slice | None = None
    start: datetime | None = None

class Status(msgspec.Struct, gc=False):
    closed: bool = False
    ended: datetime | None = None

class Item(msgspec.Struct, gc=False):
    metadata: Meta
    spec: Spec | None = None
    status: Status | None = None

class Doc(msgspec.Struct, gc=False):
    items: list[Item]

t = time.perf_counter()
gc.disable()
with open(sys.argv[1], "rb") as f:
    data = f.read()
doc = msgspec.json.Decoder(Doc).decode(data)
print(time.perf_counter() - t)
"""

_LOAD_AND_ENGINE = """
import sys, time
from kubectl_runs.engine.audit import audit
from kubectl_runs.sources.files import gc_paused, load_snapshot
from kubectl_runs.timeutil import parse_time
t = time.perf_counter()
snapshot = load_snapshot([sys.argv[1]])
load = time.perf_counter() - t
at = snapshot.taken_at
since = parse_time(sys.argv[2], now=at, flag="--since")
by = tuple(sys.argv[3].split(","))
t = time.perf_counter()
with gc_paused():
    report = audit(snapshot, at, since=since, until=at, by=by)
engine = time.perf_counter() - t
print(load, engine, len(report.rows), report.total_leases, len(report.findings))
"""


def _run_measured(argv: list[str]) -> tuple[str, float, float]:
    """Run ``argv`` in a fresh process: (stdout, wall seconds, the child's own peak RSS in MB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    chunks = []
    while True:
        block = proc.stdout.read(1 << 20)
        if not block:
            break
        chunks.append(block)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return b"".join(chunks).decode(), wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leases", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "kubectl-runs-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--by", default="owner", help="comma-separated --by dimensions (default owner)")
    parser.add_argument("--path", help="an existing snapshot file to measure (e.g. bench/out/history-seed1.json from "
                        "bench/run.py) instead of generating one")
    parser.add_argument("--since", action="append", metavar="DURATION",
                        help="windows to measure (repeatable; default: 30d, the command's default, and 3650d)")
    parser.add_argument("--generator", choices=("project", "own"), default="project",
                        help="project: the shared fleet generator bench/generate.py (4,096 nodes, 2,000 envelopes, "
                        "one planted finding of each kind); own: the simpler history generated in this file")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    path = args.path or os.path.join(args.out, f"history-{args.generator}-{args.leases}-{args.seed}.json")
    if args.path and not os.path.exists(path):
        raise SystemExit(f"{path}: no such file")
    if args.generator == "project" and not os.path.exists(path):
        sys.path.insert(0, ROOT)
        from bench.generate import generate as generate_fleet

        t = time.perf_counter()
        generate_fleet(path, nodes=max(64, args.leases * 4096 // 1_000_000), envelopes=2000 if args.leases >= 100_000
                       else 64, leases=args.leases, seed=args.seed)
        print(f"generated {path} with bench/generate.py in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if not os.path.exists(path):
        import msgspec

        t = time.perf_counter()
        data = msgspec.json.encode(generate(args.leases, args.seed))
        with open(path + ".tmp", "wb") as handle:
            handle.write(data)
        os.replace(path + ".tmp", path)
        print(f"generated {path}: {len(data) / 1e6:,.0f} MB in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    size = os.path.getsize(path) / 1e6
    exe = [sys.executable, "-m", "kubectl_runs"]
    by_flags = [flag for dim in args.by.split(",") for flag in ("--by", dim)]

    windows = tuple((f"window {since}" + (" (default)" if since == "30d" else ""), since)
                    for since in (args.since or ("30d", "3650d")))
    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    engine_best: dict[str, float] = {}
    load_best = float("inf")
    counts: dict[str, str] = {}
    for _ in range(args.repeat):
        out, wall, mem = _run_measured([sys.executable, "-c", _DECODE, path])
        decoded, freed = map(float, out.split())
        best["decode"] = min(best.get("decode", float("inf")), decoded)
        best["decode + free"] = min(best.get("decode + free", float("inf")), freed)
        rss["decode"] = mem
        out, wall, mem = _run_measured([sys.executable, "-c", _DECODE_MIN, path])
        best["decode-min"] = min(best.get("decode-min", float("inf")), float(out))
        rss["decode-min"] = mem
        for label, since in windows:
            out, wall, mem = _run_measured([sys.executable, "-c", _LOAD_AND_ENGINE, path, since, args.by])
            load, engine, rows, leases, findings = out.split()
            load_best = min(load_best, float(load))
            engine_best[label] = min(engine_best.get(label, float("inf")), float(engine))
            counts[label] = f"{rows} rows, {leases} leases, {findings} findings"
            argv = [*exe, "leases", "audit", "--snapshot", path, "--since", since, *by_flags, "-o", "json"]
            _, wall, mem = _run_measured(argv)
            best[f"command, {label}"] = min(best.get(f"command, {label}", float("inf")), wall)
            rss[f"command, {label}"] = mem
    base = best["decode"]
    print(f"leases audit benchmark: {args.leases:,} leases, {size:,.0f} MB JSON, --by {args.by}, "
          f"best of {args.repeat}, {os.cpu_count()} CPUs")
    print(f"{'measure':<40} {'seconds':>8} {'÷ decode':>9} {'peak RSS':>10}")
    print(f"{'decode (typed records, gc paused)':<40} {base:8.2f} {1.0:9.2f} {rss['decode']:8.0f} MB")
    print(f"{'decode + free (for reference)':<40} {best['decode + free']:8.2f} "
          f"{best['decode + free'] / base:9.2f}   (the CLI exits without freeing: ÷ decode is the comparable ratio)")
    print(f"{'decode-min (lease fields only)':<40} {best['decode-min']:8.2f} {best['decode-min'] / base:9.2f} "
          f"{rss['decode-min']:8.0f} MB")
    print(f"{'load_snapshot (the loader)':<40} {load_best:8.2f} {load_best / base:9.2f}")
    for label, _since in windows:
        print(f"{'engine, ' + label:<40} {engine_best[label]:8.2f} {engine_best[label] / base:9.2f}"
              f"   ({counts[label]})")
    for label, _since in windows:
        key = f"command, {label}"
        print(f"{key:<40} {best[key]:8.2f} {best[key] / base:9.2f} {rss[key]:8.0f} MB"
              f"   (÷ decode + free: {best[key] / best['decode + free']:.2f})")


if __name__ == "__main__":
    main()
