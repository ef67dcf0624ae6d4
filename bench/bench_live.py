"""Issue 6 benchmark: `kubectl runs budgets usage` against a real API server holding 20,000 GPULeases, its
wall time ÷ the wall time of `kubectl get gpuleases,budgets,runs,nodes -A -o json >/dev/null` on the same
server, measured alternately in one run (the machine is shared: only the ratio means anything).

    .venv/bin/python -m bench.bench_live [--leases 20000] [--repeats 5]
    .venv/bin/python -m bench.bench_live --small [--repeats 21] [--baseline DIR]

Starts the test control plane (tests/controlplane), loads a generated fleet (bench/generate.py) through the
API (objects, then their status subresource), then times both commands as a user runs them: separate
processes, KUBECONFIG in the environment, output to /dev/null.

``--small`` (issue 28): the tiny fleet of examples/fleet.yaml instead (10 Nodes, 7 Budgets, 15 Runs, 2
Reservations, 20 GPULeases), where start-up is nearly all of the time. There "ours" is the console script pip
installs (``.venv/bin/kubectl-runs``, what ``kubectl runs`` starts for a pip install; the krew archive holds
the PyInstaller single-file build instead, which ``--onefile`` adds as its own row when dist/kubectl-runs
exists). ``--baseline DIR`` adds the same console script running the kubectl_runs package of DIR (a checkout
of an earlier commit, e.g. ``git archive main | tar -x -C DIR``; it comes first on PYTHONPATH), so a before
and an after are measured alternately in one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from controlplane import ControlPlane  # noqa: E402
from fleet import read_objects, upload  # noqa: E402

from bench.generate import generate  # noqa: E402


def wall(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        done = subprocess.run(argv, stdout=sink, stderr=subprocess.PIPE, env=env, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return elapsed


def loadavg() -> str:
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "unknown"


def small(args: argparse.Namespace) -> int:
    """Issue 28: the example fleet, where the time is start-up; medians of alternating runs."""
    objects = read_objects(str(ROOT / "examples" / "fleet.yaml"))
    kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
    entry = Path(sys.executable).parent / "kubectl-runs"
    if not entry.exists():
        raise SystemExit(f"{entry} is missing: pip install -e . (scripts/bootstrap) makes it")
    usage = ["budgets", "usage", "-o", "json"]
    runs: dict[str, tuple[list[str], dict]] = {}
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", str(ROOT / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        upload(cp, objects)
        env = cp.env_for("admin")
        runs["kubectl get gpuleases,budgets,runs,nodes -A -o json"] = (
            [kubectl, "get", "gpuleases,budgets,runs,nodes", "-A", "-o", "json"], env)
        runs["kubectl-runs budgets usage -o json (pip entry point)"] = ([str(entry), *usage], env)
        if args.baseline:
            before = {**env, "PYTHONPATH": str(Path(args.baseline).resolve())}
            runs[f"  the same, kubectl_runs of {args.baseline}"] = ([str(entry), *usage], before)
        onefile = ROOT / "dist" / "kubectl-runs"
        if args.onefile and onefile.exists():
            runs["kubectl-runs budgets usage -o json (single-file build)"] = ([str(onefile), *usage], env)
        for argv, run_env in runs.values():  # warm each twice (page cache, kubectl's discovery cache)
            wall(argv, run_env)
            wall(argv, run_env)
        times: dict[str, list[float]] = {name: [] for name in runs}
        load_before = loadavg()
        for _ in range(args.repeats):
            for name, (argv, run_env) in runs.items():
                times[name].append(wall(argv, run_env))
        load_after = loadavg()
    base = statistics.median(times[next(iter(runs))])
    print(f"API server with the example fleet ({len(objects)} objects); medians of {args.repeats} alternating runs; "
          f"load average {load_before} before, {load_after} after ({os.cpu_count()} CPUs)")
    print(f"  {'command':<62}{'median s':>9}{'p25-p75 s':>14}{'ratio':>8}")
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        med = statistics.median(values)
        print(f"  {name:<62}{med:9.3f}{q[0]:7.3f}-{q[2]:<6.3f}{med / base:8.2f}")
    print("  ratio = median ÷ the median of kubectl get (target <= 1.5)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--envelopes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=None, help="alternating runs (default 3; 21 with --small)")
    parser.add_argument("--small", action="store_true", help="the example fleet (issue 28: start-up)")
    parser.add_argument("--baseline", metavar="DIR", help="with --small: also time the kubectl_runs package of DIR")
    parser.add_argument("--onefile", action="store_true", help="with --small: also time dist/kubectl-runs")
    args = parser.parse_args(argv)
    if args.small:
        args.repeats = args.repeats or 21
        return small(args)
    if args.baseline or args.onefile:
        parser.error("--baseline and --onefile go with --small")
    args.repeats = args.repeats or 3

    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    fleet = work / "fleet.json"
    generate(str(fleet), nodes=args.nodes, envelopes=args.envelopes, leases=args.leases, seed=6, plants=False)
    objects = read_objects(str(fleet))
    kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
    plugin = [sys.executable, "-m", "kubectl_runs"]
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", str(ROOT / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        started = time.perf_counter()
        upload(cp, objects)
        print(f"loaded {len(objects):,} objects into the API server in {time.perf_counter() - started:.0f}s",
              file=sys.stderr)
        env = cp.env_for("admin")
        ours_argv = [*plugin, "budgets", "usage", "-o", "json"]
        theirs_argv = [kubectl, "get", "gpuleases,budgets,runs,nodes", "-A", "-o", "json"]
        wall(ours_argv, env)  # warm both once (page cache, the server's watch cache)
        wall(theirs_argv, env)
        ours, theirs = [], []
        for _ in range(args.repeats):
            ours.append(wall(ours_argv, env))
            theirs.append(wall(theirs_argv, env))
    shutil.rmtree(work, ignore_errors=True)
    leases = sum(1 for o in objects if o["kind"] == "GPULease")
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"API server with {leases:,} GPULeases, {len(objects):,} objects; medians of {args.repeats} alternating runs")
    print(f"  kubectl runs budgets usage -o json                          {mo:7.2f} s")
    print(f"  kubectl get gpuleases,budgets,runs,nodes -A -o json         {mt:7.2f} s")
    print(f"  ratio (target <= 1.5)                                       {mo / mt:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
