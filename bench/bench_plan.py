"""Benchmark: ``kubectl runs plan RUN`` on the generated large fleet (4,096 nodes, 200,000 GPULeases).

The target (issue 3): the time ``plan`` spends *after* the snapshot is loaded — finding the run, the ledger of
the open leases, packing, the funding walk, remedies, the forecast and rendering the table — is at most 0.2 ×
the time to load the snapshot. Both are measured side by side in one process, alternating (load first on even
rounds, plan first on odd ones), and only their ratio is meaningful on a shared machine (DESIGN.md).

Printed: the median load time, the median time after load, the ratio of the medians, the range of the
per-round ratios, and whether the target holds (exit code 1 when it does not).

    .venv/bin/python bench/bench_plan.py                    # large fleet, seed 1, 5 rounds
    .venv/bin/python bench/bench_plan.py --size small --repeats 9
    .venv/bin/python bench/bench_plan.py --run ns/name      # another run than the generator's pick

The fleet comes from ``bench/generate.py`` and is cached in ``bench/out/`` (git-ignored); the run planned is the
pending one the generator names in ``<fleet>.meta.json`` (``plan``), unless ``--run`` says otherwise.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
TARGET = 0.2


def fleet(size: str, seed: int) -> tuple[Path, dict]:
    path = OUT / f"{size}-seed{seed}.json"
    meta = Path(f"{path}.meta.json")
    if not path.exists() or not meta.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        print(f"generating the {size} fleet (seed {seed}) into {path.relative_to(REPO)} …", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "bench.generate", "--size", size, "--seed", str(seed), "-o", str(path)],
                       cwd=REPO, check=True)
    return path, json.loads(meta.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/bench_plan.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="large", help="generator size preset (default: large)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run", metavar="NS/NAME", help="the run to plan (default: the generator's pick)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from kubectl_runs.cli.plan import find_run
    from kubectl_runs.engine.plan import plan_run
    from kubectl_runs.render import TABLE, render
    from kubectl_runs.sources.files import load_snapshot
    from kubectl_runs.views.plan import plan_document

    path, meta = fleet(args.size, args.seed)
    namespace, name = (args.run.split("/", 1) if args.run else (meta["plan"]["namespace"], meta["plan"]["name"]))

    def load() -> object:
        return load_snapshot([str(path)])

    def after_load(snapshot) -> str:
        """What the command does once it holds the snapshot (cli/plan.py), output rendered into a buffer."""
        run = find_run(snapshot, namespace, name)
        at = snapshot.taken_at
        result = plan_run(snapshot, run, at)
        out = io.StringIO()
        render(plan_document(result, TABLE), TABLE, out, io.StringIO())
        return out.getvalue()

    def timed(function, *arguments) -> tuple[float, object]:
        began = time.perf_counter()
        result = function(*arguments)
        return time.perf_counter() - began, result

    snapshot = load()  # warm up: imports, page cache
    first = after_load(snapshot)
    loads, afters = [], []
    for round_ in range(args.repeats):
        if round_ % 2:  # plan first (on the snapshot the previous round loaded), then load
            afters.append(timed(after_load, snapshot)[0])
        del snapshot
        gc.collect()
        seconds, snapshot = timed(load)
        loads.append(seconds)
        if round_ % 2 == 0:  # load first, then plan
            afters.append(timed(after_load, snapshot)[0])
    ratios = [a / b for a, b in zip(afters, loads, strict=True)]
    load_median, after_median = statistics.median(loads), statistics.median(afters)
    ratio = after_median / load_median
    counts = meta.get("counts", {})
    print(f"fleet: {path.relative_to(REPO)} ({counts.get('nodes', '?')} nodes, {counts.get('leases', '?')} leases, "
          f"{counts.get('openLeases', '?')} open), run {namespace}/{name}, {args.repeats} rounds")
    print(f"load (load_snapshot)        median {load_median:8.3f} s")
    print(f"plan after load             median {after_median:8.3f} s")
    print(f"ratio after-load / load     {ratio:.3f}  (rounds {min(ratios):.3f}–{max(ratios):.3f}; target <= {TARGET})")
    print(f"answer: {first.splitlines()[0]}")
    held = ratio <= TARGET
    print("target met" if held else "TARGET MISSED")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
