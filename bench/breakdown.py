"""Where the time of ``kubectl runs budgets usage`` goes, next to the decode it is divided by (issue 2).

    python -m bench.breakdown bench/out/large-seed1.json [--repeats 5]

Runs the command in process with its three steps timed — loading the snapshot (``GlobalOptions.load``), the
engine (``budget_usage``) and rendering (``GlobalOptions.print``); the rest is click — alternated with the
baseline decode of bench/run.py. As in bench/run.py, neither is charged for freeing what it made. Prints
medians in seconds and as multiples of the decode.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import statistics
import time
from collections.abc import Callable

from kubectl_runs.cli import budgets, options
from kubectl_runs.cli.main import main as cli_main

from .run import decode_baseline, release_loaded


def _timing(steps: dict[str, float], name: str, function: Callable) -> Callable:
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            steps[name] = steps.get(name, 0.0) + time.perf_counter() - began

    return timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    steps: dict[str, float] = {}
    options.GlobalOptions.load = _timing(steps, "load", options.GlobalOptions.load)
    options.GlobalOptions.print = _timing(steps, "render", options.GlobalOptions.print)
    budgets.budget_usage = _timing(steps, "engine", budgets.budget_usage)
    decode = decode_baseline(args.path)
    rows: dict[str, list[float]] = {"decode": [], "command": [], "load": [], "engine": [], "render": [], "rest": []}
    for round_ in range(args.repeats + 1):
        began = time.perf_counter()
        result = decode()
        decoded = time.perf_counter() - began
        del result
        gc.collect()
        steps.clear()
        began = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli_main(["budgets", "usage", "--snapshot", args.path])
        total = time.perf_counter() - began
        release_loaded()
        gc.collect()
        if code != 0:
            raise SystemExit(f"budgets usage exited {code}")
        if round_ == 0:
            continue  # warm-up
        rows["decode"].append(decoded)
        rows["command"].append(total)
        for name in ("load", "engine", "render"):
            rows[name].append(steps[name])
        rows["rest"].append(total - steps["load"] - steps["engine"] - steps["render"])
    medians = {name: statistics.median(values) for name, values in rows.items()}
    base = medians["decode"]
    print("| step of `budgets usage` | median | ÷ decode |\n|---|---:|---:|")
    labels = {
        "decode": "the baseline decode (for scale)",
        "load": "load the snapshot (read, decode, order check)",
        "engine": "the engine (`budget_usage`: the ledger over every lease)",
        "render": "render the table",
        "rest": "the rest (click)",
        "command": "**the whole command**",
    }
    for name in ("decode", "load", "engine", "render", "rest", "command"):
        print(f"| {labels[name]} | {medians[name]:.3f} s | {medians[name] / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
