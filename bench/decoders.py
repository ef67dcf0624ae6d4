"""Which decode of a snapshot file is the fastest — the baseline every benchmark is divided by (bench/run.py).

    python -m bench.decoders bench/out/large-seed1.json [--repeats 3]

Times, alternated in one process, the ways of turning the file's bytes into objects that NOTES.md compares:
the standard library's ``json.loads`` to dicts (garbage collector on, then paused), msgspec to dicts (GC
paused), and msgspec straight into the model's typed records (GC paused) — the baseline. Each includes reading
the file. Prints medians and each one ÷ the baseline.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable

import msgspec

from .run import decode_baseline


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _paused(function: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def run(data: bytes) -> object:
        gc.disable()
        try:
            return function(data)
        finally:
            gc.enable()

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decoders", description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    typed = decode_baseline(args.path)
    ways: dict[str, Callable[[], object]] = {
        "json.loads -> dicts, GC on": lambda: json.loads(_read(args.path)),
        "json.loads -> dicts, GC paused": lambda: _paused(json.loads)(_read(args.path)),
        "msgspec -> dicts, GC paused": lambda: _paused(msgspec.json.decode)(_read(args.path)),
        "msgspec -> typed records, GC paused (the baseline)": typed,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for round_ in range(args.repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            began = time.perf_counter()
            result = ways[name]()
            times[name].append(time.perf_counter() - began)
            del result
            gc.collect()
    base = statistics.median(times[names[-1]])
    print("| decode | median | ÷ baseline |\n|---|---:|---:|")
    for name in names:
        median = statistics.median(times[name])
        print(f"| {name} | {median:.2f} s | {median / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
