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


def wall_and_cpu(argv: list[str], env: dict) -> tuple[float, float]:
    """Wall time and CPU time (user + system, from the children's rusage) of one run: on a shared machine
    a single-threaded Python start-up waits for a core more than kubectl's Go threads do, so the CPU ratio
    says what the wall ratio would be on a quiet machine more steadily."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    elapsed = wall(argv, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def loadavg() -> str:
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "unknown"


CONSOLE_SCRIPT = """#!{python}
import sys
from kubectl_runs.cli.main import entrypoint
if __name__ == "__main__":
    sys.argv[0] = sys.argv[0].removesuffix(".exe")
    sys.exit(entrypoint())
"""


def installed(package: Path, where: Path) -> Path:
    """``package`` (a kubectl_runs directory) laid out as ``pip install`` (not ``-e``) lays it out, and its
    console script: a venv whose site-packages holds a copy of the package with its bytecode compiled, the
    dependencies reached through a .pth line naming this venv's site-packages (a plain path: the .pth files
    there, the editable install's finder among them, are not run). The development venv's own entry point
    imports that finder at every start, and with PYTHONDONTWRITEBYTECODE (set here) an editable package is
    compiled from source at every start: neither is what a pip user runs."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "kubectl-runs-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    shutil.copytree(package, site / "kubectl_runs", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([str(python), "-m", "compileall", "-q", str(site / "kubectl_runs")], check=True)
    entry = where / "bin" / "kubectl-runs"
    entry.write_text(CONSOLE_SCRIPT.format(python=python))
    entry.chmod(0o755)
    return entry


def small(args: argparse.Namespace) -> int:
    """Issue 28: the example fleet, where the time is start-up; medians of alternating runs."""
    objects = read_objects(str(ROOT / "examples" / "fleet.yaml"))
    kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
    work = Path(tempfile.mkdtemp(prefix="bench-live-small-"))
    entry = installed(ROOT / "kubectl_runs", work / "after")
    before = installed(Path(args.baseline) / "kubectl_runs", work / "before") if args.baseline else None
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
        if before is not None:
            runs[f"  the same, kubectl_runs of {args.baseline}"] = ([str(before), *usage], env)
        onefile = ROOT / "dist" / "kubectl-runs"
        if args.onefile and onefile.exists():
            runs["kubectl-runs budgets usage -o json (single-file build)"] = ([str(onefile), *usage], env)
        for argv, run_env in runs.values():  # warm each twice (page cache, kubectl's discovery cache)
            wall(argv, run_env)
            wall(argv, run_env)
        times: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        load_before = loadavg()
        for _ in range(args.repeats):
            for name, (argv, run_env) in runs.items():
                elapsed, used = wall_and_cpu(argv, run_env)
                times[name].append(elapsed)
                cpu[name].append(used)
        load_after = loadavg()
    shutil.rmtree(work, ignore_errors=True)
    first = next(iter(runs))
    base, base_cpu = statistics.median(times[first]), statistics.median(cpu[first])
    print(f"API server with the example fleet ({len(objects)} objects); medians of {args.repeats} alternating runs; "
          f"load average {load_before} before, {load_after} after ({os.cpu_count()} CPUs)")
    print(f"  {'command':<58}{'wall s':>8}{'p25-p75 s':>14}{'ratio':>7}{'cpu s':>8}{'ratio':>7}")
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        med, med_cpu = statistics.median(values), statistics.median(cpu[name])
        print(f"  {name:<58}{med:8.3f}{q[0]:7.3f}-{q[2]:<6.3f}{med / base:7.2f}{med_cpu:8.3f}{med_cpu / base_cpu:7.2f}")
    print("  ratio = median ÷ the median of kubectl get (target <= 1.5); cpu = user + system time of the process")
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
