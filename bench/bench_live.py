"""Issue 6 benchmark: `kubectl runs budgets usage` against a real API server holding 20,000 GPULeases, its
wall time ÷ the wall time of `kubectl get gpuleases,budgets,runs,nodes -A -o json >/dev/null` on the same
server, measured alternately in one run (the machine is shared: only the ratio means anything).

    .venv/bin/python -m bench.bench_live [--leases 20000] [--repeats 5]

Starts the test control plane (tests/controlplane), loads a generated fleet (bench/generate.py) through the
API (objects, then their status subresource), then times both commands as a user runs them: separate
processes, KUBECONFIG in the environment, output to /dev/null.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--envelopes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

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
