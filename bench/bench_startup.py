"""Start-up of ``kubectl-runs --help``, side by side with ``kubectl --help`` (the Go binary users compare us
with), as ratios of medians measured in one run.

    python -m bench.bench_startup                 # builds what it needs, 31 interleaved rounds
    python -m bench.bench_startup --rounds 51 --no-onedir --check

Targets (issue 7): the installed entry point ≤ 2 × kubectl, the single-file build ≤ 3 × kubectl.

Every command runs once per round, in the same order, rounds interleaved, after untimed warm-up runs (page
cache, the onefile's first unpack); the table gives each command's median wall time and its ratio to the
median of ``kubectl --help``. The breakdown then splits each start-up into its parts, from differences of
medians:

- installed entry point = interpreter (``python -c pass``: interpreter and site) + imports (``python -c
  "import kubectl_runs.cli.main"`` minus that) + parsing and printing the help (the rest);
- single-file = unpacking (onefile minus the same build as a directory, ``KUBECTL_RUNS_ONEDIR=1``: the
  bootloader writing the native parts to $TMPDIR, starting itself again, and deleting them) + the frozen
  interpreter, imports from the executable's archive, and the help (the directory build).

Absolute times on a shared two-core machine are noise; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out" / "startup"
ONEFILE = REPO / "dist" / "kubectl-runs"
ONEDIR = OUT / "onedir" / "kubectl-runs" / "kubectl-runs"
PYTHON = REPO / ".venv" / "bin" / "python"
ENTRY = REPO / ".venv" / "bin" / "kubectl-runs"
TARGETS = {"entry --help": 2.0, "single-file --help": 3.0}


def build(onedir: bool) -> None:
    done = subprocess.run([str(REPO / "scripts" / "dist"), "--reuse"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"scripts/dist failed:\n{done.stderr[-3000:]}")
    if onedir:
        print("building the same spec as a directory (KUBECTL_RUNS_ONEDIR=1) …", file=sys.stderr)
        env = {**os.environ, "KUBECTL_RUNS_ONEDIR": "1", "PYINSTALLER_ZLIB_COMPRESSION_LEVEL": "0"}
        done = subprocess.run(
            [str(PYTHON), "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN", "--distpath",
             str(OUT / "onedir"), "--workpath", str(OUT / "build"), str(REPO / "kubectl-runs.spec")],
            cwd=REPO, env=env, capture_output=True, text=True,
        )
        if done.returncode != 0:
            sys.exit(f"the directory build failed:\n{done.stderr[-3000:]}")


def commands(onedir: bool) -> dict[str, list[str]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        sys.exit("kubectl is not on PATH: it is the baseline")
    out = {
        "kubectl --help": [kubectl, "--help"],
        "single-file --help": [str(ONEFILE), "--help"],
        "entry --help": [str(ENTRY), "--help"],
        "single-file version": [str(ONEFILE), "version"],
        "entry version": [str(ENTRY), "version"],
        "python -c pass": [str(PYTHON), "-c", "pass"],
        "python -I -S -c pass": [str(PYTHON), "-I", "-S", "-c", "pass"],
        "python import cli.main": [str(PYTHON), "-c", "import kubectl_runs.cli.main"],
    }
    if onedir:
        out["directory build --help"] = [str(ONEDIR), "--help"]
    return out


def measure(cmds: dict[str, list[str]], rounds: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for index in range(warmup + rounds):
        for name, argv in cmds.items():
            start = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
            elapsed = time.perf_counter() - start
            if done.returncode != 0:
                sys.exit(f"{name} exited {done.returncode}")
            if index >= warmup:
                times[name].append(elapsed)
    return times


def unpacked_payload() -> tuple[int, int]:
    """Files and bytes the single-file executable writes to $TMPDIR on every start."""
    from PyInstaller.archive.readers import CArchiveReader

    toc = CArchiveReader(str(ONEFILE)).toc
    extracted = [entry for entry in toc.values() if entry[4] in "bxdnlZ"]  # binaries, data, zips, symlinks
    return len(extracted), sum(entry[2] for entry in extracted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-onedir", action="store_true", help="skip the directory build (no breakdown)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()

    onedir = not args.no_onedir
    build(onedir)
    cmds = commands(onedir)
    times = measure(cmds, args.rounds, args.warmup)
    med = {name: statistics.median(values) for name, values in times.items()}
    base = med["kubectl --help"]

    print(f"Start-up, median of {args.rounds} interleaved rounds ({os.cpu_count()} CPUs; ratio = ÷ kubectl --help)")
    print(f"{'command':<26}{'median ms':>10}{'ratio':>8}   {'p25–p75 ms':>14}")
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        print(f"{name:<26}{med[name] * 1000:>10.1f}{med[name] / base:>8.2f}   {q[0] * 1000:>6.1f}–{q[2] * 1000:<6.1f}")

    interpreter = med["python -c pass"]
    imports = med["python import cli.main"] - interpreter
    run = med["entry --help"] - med["python import cli.main"]
    print("\nWhere the time goes (differences of medians, ms)")
    print(f"  installed entry point: interpreter+site {interpreter * 1000:.1f} (bare interpreter "
          f"{med['python -I -S -c pass'] * 1000:.1f}) + imports {imports * 1000:.1f} + help {run * 1000:.1f}")
    files, size = unpacked_payload()
    if onedir:
        unpack = med["single-file --help"] - med["directory build --help"]
        print(f"  single-file: unpacking {unpack * 1000:.1f} ({files} files, {size / 1e6:.1f} MB written to $TMPDIR "
              f"and removed, plus the second process) + frozen interpreter, imports and help "
              f"{med['directory build --help'] * 1000:.1f}")
    else:
        print(f"  single-file: unpacks {files} files, {size / 1e6:.1f} MB per start (--no-onedir: no split)")

    missed = []
    print("\nTargets")
    for name, target in TARGETS.items():
        ratio = med[name] / base
        ok = ratio <= target
        missed += [] if ok else [name]
        print(f"  {name:<22} {ratio:5.2f} × kubectl  (target ≤ {target:g})  {'met' if ok else 'MISSED'}")
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
