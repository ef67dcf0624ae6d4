"""The benchmark suite: each benchmark measured side by side with its baseline, in one process, as ratios.

    python -m bench.run                                  # small, large and history (what `make bench` runs)
    python -m bench.run --sizes small,large --repeats 5
    python -m bench.run --sizes large --only "budgets usage"

The baseline of every row is the fastest decode of the same snapshot file written here (NOTES.md): read the
bytes and decode them with ``msgspec.json.Decoder`` straight into the model's typed records (a ``List`` of
the five kinds) with the cyclic garbage collector paused. Each benchmark is a whole command as a user runs it
(``main([...])`` in process, its output rendered into a buffer) or, for ``load``, the project's loader alone.

Each (size, benchmark) pair runs in a child process of its own — so that its peak RSS is its own — which
first runs the benchmark and the baseline once untimed (imports, page cache), then alternates them
``--repeats`` times (baseline first on even rounds, benchmark first on odd ones). The table gives the
medians, the ratio of the medians, the range of the per-round ratios, and the child's peak RSS. Only ratios
mean anything on a shared machine; absolute seconds are printed for scale.

Benchmarks whose engine module or command is not there yet are skipped (listed under the table), so the
suite runs on any checkout. Fleets come from ``bench/generate.py`` and are cached in ``bench/out/``
(git-ignored) by size and seed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from kubectl_runs.model import AnyObject

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
SIZES = ("small", "large", "history")
DEFAULT_REPEATS = {"small": 9, "large": 5, "history": 3}
USAGE_TARGET = 1.5  # issue 2: budgets usage ÷ decode on the large fleet


@dataclass(frozen=True)
class Benchmark:
    name: str
    needs: tuple[str, ...]  # engine modules that must exist
    command: str | None  # the root command word that must be registered (None: not a command)
    what: str

    def available(self) -> str | None:
        """None when it can run, else why not."""
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not there yet"
        if self.command is not None:
            from kubectl_runs.cli.main import COMMANDS

            if self.command not in COMMANDS:
                return f"the {self.command!r} command is not registered yet"
        return None


BENCHMARKS = (
    Benchmark("decode", (), None, "the baseline itself: read + typed msgspec decode, GC paused"),
    Benchmark("load", ("kubectl_runs.sources.files",), None, "load_snapshot([file])"),
    Benchmark("budgets usage", ("kubectl_runs.engine.usage",), "budgets",
              "kubectl runs budgets usage --snapshot FILE"),
    Benchmark("plan", ("kubectl_runs.engine.plan",), "plan", "kubectl runs plan RUN -n NS --snapshot FILE"),
    Benchmark("leases audit", ("kubectl_runs.engine.audit",), "leases",
              "kubectl runs leases audit --snapshot FILE (the last 30 days)"),
    Benchmark("seeds verify", ("kubectl_runs.engine.verify",), "seeds", "kubectl runs seeds verify --snapshot FILE"),
)
BY_NAME = {b.name: b for b in BENCHMARKS}


# --- the baseline ---------------------------------------------------------------------------------------------


class TypedList(msgspec.Struct, frozen=True, gc=False):
    """A ``List`` of the five kinds, decoded straight into the model's records."""

    items: list[AnyObject]


def _decoder() -> msgspec.json.Decoder:
    return msgspec.json.Decoder(TypedList)


def decode_baseline(path: str) -> Callable[[], object]:
    """The fastest standalone decode of the file we know (NOTES.md): bytes -> typed records, GC paused."""
    decoder = _decoder()

    def run() -> object:
        with open(path, "rb") as handle:
            data = handle.read()
        gc.disable()
        try:
            return decoder.decode(data)
        finally:
            gc.enable()

    return run


# --- the benchmarks ---------------------------------------------------------------------------------------------


def command(argv: list[str], expect: int = 0) -> Callable[[], object]:
    from kubectl_runs.cli.main import main

    def run() -> object:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        if code != expect:
            raise RuntimeError(f"exit code {code} (expected {expect}) from {' '.join(argv)}: {err.getvalue()[-500:]}")
        return out.getvalue()

    return run


def benchmark_callable(name: str, path: str, meta: dict) -> Callable[[], object]:
    if name == "decode":
        return decode_baseline(path)
    if name == "load":
        from kubectl_runs.sources.files import load_snapshot

        return lambda: load_snapshot([path])
    if name == "budgets usage":
        return command(["budgets", "usage", "--snapshot", path])
    if name == "plan":
        target = meta["plan"]
        return command(["plan", target["name"], "-n", target["namespace"], "--snapshot", path])
    if name == "leases audit":
        return command(["leases", "audit", "--snapshot", path])
    if name == "seeds verify":
        return command(["seeds", "verify", "--snapshot", path])
    raise ValueError(name)


def release_loaded() -> None:
    """Free what the last command kept. The CLI keeps its snapshot alive and leaves with ``os._exit`` (freeing
    millions of records one by one is time a user would wait for nothing), so in process it is freed here, off
    the clock — as the baseline's records are."""
    with contextlib.suppress(ImportError, AttributeError):
        from kubectl_runs.cli import options

        options.LOADED.clear()


def _timed(function: Callable[[], object]) -> float:
    began = time.perf_counter()
    result = function()
    elapsed = time.perf_counter() - began
    del result
    release_loaded()
    gc.collect()
    return elapsed


def child(size: str, name: str, path: str, repeats: int) -> dict:
    """Runs in the child process: warm up, then alternate the benchmark and the baseline, the baseline first
    on even rounds. Both are timed up to their result; what they made is freed off the clock."""
    meta = json.loads(Path(f"{path}.meta.json").read_text())
    runs = {"times": benchmark_callable(name, path, meta), "baseline": decode_baseline(path)}
    for function in runs.values():
        _timed(function)
    times: dict[str, list[float]] = {key: [] for key in runs}
    keys = list(runs)
    for round_ in range(repeats):
        shift = round_ % len(keys)
        for key in keys[shift:] + keys[:shift]:
            times[key].append(_timed(runs[key]))
    return {
        "size": size,
        "benchmark": name,
        **times,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


# --- the parent: fleets, children, the table ---------------------------------------------------------------------


def fleet(size: str, seed: int, regenerate: bool) -> tuple[str, dict]:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{size}-seed{seed}.json"
    meta_path = Path(f"{path}.meta.json")
    generator = REPO / "bench" / "generate.py"
    stale = not meta_path.exists() or meta_path.stat().st_mtime < generator.stat().st_mtime
    if regenerate or not path.exists() or stale:
        print(f"generating the {size} fleet (seed {seed}) into {path.relative_to(REPO)} …", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "bench.generate", "--size", size, "--seed", str(seed), "-o", str(path)],
                       cwd=REPO, check=True)
    return str(path), json.loads(meta_path.read_text())


def run_child(size: str, name: str, path: str, repeats: int) -> dict:
    argv = [sys.executable, "-m", "bench.run", "--child", size, name, path, str(repeats)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"size": size, "benchmark": name, "error": tail}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError), open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
                break
    return (f"{cpu}, {os.cpu_count()} cores{memory}; {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, msgspec {msgspec.__version__}")


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


def _mb(kb: float) -> str:
    return f"{kb / 1024:,.0f} MB"


def ratio(result: dict, baseline: str = "baseline") -> float:
    return statistics.median(result["times"]) / statistics.median(result[baseline])


def table(results: list[dict], fleets: dict[str, dict]) -> list[str]:
    lines = [
        "| fleet | benchmark | median | decode | **÷ decode** | per-round | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        label = fleet_label(fleets[r["size"]])
        if "error" in r:
            lines.append(f"| {label} | {r['benchmark']} | failed: {r['error']} | | | | |")
            continue
        times, base = r["times"], r["baseline"]
        per_round = [t / b for t, b in zip(times, base, strict=True)]
        lines.append(
            f"| {label} | {r['benchmark']} | {statistics.median(times):.3f} s | {statistics.median(base):.3f} s "
            f"| **{ratio(r):.2f}** | {min(per_round):.2f}–{max(per_round):.2f} | {_mb(r['peak_rss_kb'])} |"
        )
    return lines


def fleet_label(meta: dict) -> str:
    counts = meta["counts"]
    return (f"{meta['name']} ({counts['nodes']:,} nodes, {counts['envelopes']:,} envelopes, "
            f"{counts['leases']:,} leases, {meta['bytes'] / 1e6:,.0f} MB)")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--child"]:
        size, name, path, repeats = args_in[1:5]
        print(json.dumps(child(size, name, path, int(repeats))))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated: small, large, history")
    parser.add_argument("--only", action="append", choices=[b.name for b in BENCHMARKS],
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--repeats", type=int, help="rounds per benchmark (default: 9 small, 5 large, 3 history)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--regenerate", action="store_true", help="generate the fleets again")
    parser.add_argument("--write", metavar="PATH", help="also write the report (Markdown) to PATH")
    args = parser.parse_args(args_in)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for size in sizes:
        if size not in SIZES:
            parser.error(f"unknown size {size!r} (choose from {', '.join(SIZES)})")
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only]
    skipped = [(b, why) for b in chosen if (why := b.available())]
    runnable = [b for b in chosen if not b.available()]

    began = time.perf_counter()
    fleets: dict[str, dict] = {}
    results: list[dict] = []
    for size in sizes:
        path, meta = fleet(size, args.seed, args.regenerate)
        meta["name"], meta["path"] = size, path
        fleets[size] = meta
        repeats = args.repeats or DEFAULT_REPEATS[size]
        for bench in runnable:
            print(f"{size}: {bench.name} ({repeats} rounds) …", file=sys.stderr)
            results.append(run_child(size, bench.name, path, repeats))

    report = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {commit()} on {machine()}.",
        "",
        "Command: `" + " ".join(["python -m bench.run", *args_in]) + "`"
        + f" ({time.perf_counter() - began:,.0f} s in all).",
        "",
        *table(results, fleets),
        "",
        "*decode*: read the file and decode it with msgspec straight into the model's typed records (a `List` of "
        "the five kinds), GC paused — the fastest decode of the file we have (see below). **÷ decode** = median of "
        "the benchmark ÷ median of *decode*, both measured in the same rounds of the same process; *per-round* is "
        "the range of the round-by-round ratios. A command is timed from `main([...])` to its return (imports "
        "done; output rendered into a buffer); *decode* up to its result. Neither is charged for freeing what it "
        "made: the CLI leaves with `os._exit` without freeing its snapshot. Peak RSS is the child process's "
        "(benchmark and baseline).",
    ]
    usage = next((r for r in results if r.get("size") == "large" and r.get("benchmark") == "budgets usage"
                  and "error" not in r), None)
    if usage is not None:
        verdict = "met" if ratio(usage) <= USAGE_TARGET else "not met"
        report += ["", f"Issue 2 target, `budgets usage` ÷ decode on the large fleet ≤ {USAGE_TARGET}: "
                       f"**{ratio(usage):.2f}** — {verdict}."]
        done = subprocess.run([sys.executable, "-m", "bench.breakdown", fleets["large"]["path"]], cwd=REPO,
                              capture_output=True, text=True, check=False)
        if done.returncode == 0:
            report += ["", "Where its time goes on the large fleet (`python -m bench.breakdown`):", "",
                       done.stdout.strip()]
    if "large" in fleets and not args.only:
        print("large: the decoders compared …", file=sys.stderr)
        done = subprocess.run([sys.executable, "-m", "bench.decoders", fleets["large"]["path"], "--repeats", "3"],
                              cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            report += ["", "Why that baseline — the ways to decode the large fleet's file, alternated in one process "
                           "(`python -m bench.decoders`):", "", done.stdout.strip()]
    for bench, why in skipped:
        report.append(f"\nSkipped {bench.name}: {why}.")
    text = "\n".join(report) + "\n"
    print(text)
    if args.write:
        try:
            write_report(Path(args.write), text)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 1 if any("error" in r for r in results) else 0


KEEP_MARK = "<!-- sections below are written by hand from other benchmarks; bench.run keeps them -->"


def kept_sections(path: Path) -> str:
    """What follows KEEP_MARK in the existing report (e.g. bench_reconcile's section), to append again."""
    try:
        old = path.read_text()
    except OSError:
        return ""
    at = old.find(KEEP_MARK)
    return "" if at < 0 else "\n" + old[at:]


def write_report(path: Path, text: str) -> None:
    """Write the generated ``text`` to ``path``, keeping every hand-written section below KEEP_MARK as it is. A
    report that exists but has no KEEP_MARK is not overwritten (its hand-written sections would be lost)."""
    try:
        old = path.read_text()
    except FileNotFoundError:
        old = ""
    if old.strip() and KEEP_MARK not in old:
        raise ValueError(f"{path} has no line {KEEP_MARK!r}: not overwritten (put the line above the sections "
                         "written by hand, or write elsewhere)")
    path.write_text(text + kept_sections(path))


if __name__ == "__main__":
    sys.exit(main())
