"""Issue 12 benchmark: `kubectl runs reconcile` against a real API server (tests/controlplane) — change → status
latency (median, p99) at 100 and 1,000 runs, the full resync of a 1,000-run / 20,000-lease fleet, API writes per
idle resync (counted by the API server: apiserver_request_total), and the reconciler's RSS.

    .venv/bin/python -m bench.bench_reconcile [--samples 40] [--resync-period 10]

The fleet (made here, deterministic): Nodes of 8 H100 GPUs; 10 namespaces with one Budget each (one envelope
whose window covers now); per 100 runs, 65 Running runs of 20 GPUs (20 groups of 1 GPU, one open GPULease per
group: 1,300 open leases), 30 Succeeded runs with their closed history (700 closed leases) and 5 Pending runs
(no lease) — so 1,000 runs carry 20,000 leases. Phase 1 loads 100 runs and measures; phase 2 adds the other 900
(and their nodes) and measures again with a fresh reconciler process.

The reconciler runs as a user runs it (`python -m kubectl_runs reconcile --no-leader-elect --metrics-addr
127.0.0.1:0 --resync-period Ns`, its own process; leader election off, so the only writes are its own).

- *run spec → status*: patch a Pending run's `spec.resources.totalGPUs`, poll (every 5 ms) until its
  `status.observedGeneration` equals the new generation.
- *lease → budget status*: create (then delete) a GPULease of a Pending run, poll until the Budget's
  `status.envelopes[0].usedGPUs` moved by its GPUs (the heavy path: every run of the flavor is re-evaluated).
- *cold start*: process start → every run has `status.plan` (list + first evaluation + every write).
- *restart* over the converged fleet and *full resync* (idle): the reconciler's own
  `jobtree_reconcile_duration_seconds`, summed over every batch of the start-up pass, and of each periodic
  resync pass (the whole fleet evaluated, 64 objects per batch, nothing to write; the median pass is shown),
  each read once the process is idle again; and the writes the API server counted over them (every
  POST/PUT/PATCH/DELETE of jobtree.dev resources and Events).
- RSS: VmRSS and VmHWM of the reconciler process from /proc.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from controlplane import ControlPlane, _die_with_parent  # noqa: E402
from fleet import upload  # noqa: E402

from bench.generate import reconciler_blocks, reconciler_lease  # noqa: E402

API = "/apis/jobtree.dev/v1alpha1"
FLAVOR = "H100"
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
NOW = datetime.now(UTC).replace(microsecond=0)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the fleet ---------------------------------------------------------------------------------------------


def fleet(first_block: int, blocks: int, node_offset: int) -> tuple[list[dict], int]:
    """Blocks of 100 runs (65 running, 30 succeeded, 5 pending) and 2,000 leases around NOW (bench/generate.py's
    reconciler fleet); returns (objects, nodes used)."""
    return reconciler_blocks(first_block, blocks, node_offset, now=NOW)


def lease(name: str, ns: str, run: str, group: int, slots: list[str], start: datetime) -> dict:
    return reconciler_lease(name, ns, run, group, slots, start)


def server_writes(cp) -> dict[str, int]:
    """Mutating requests the API server answered on jobtree.dev resources and Events, by verb/resource."""
    status, text = cp.request("GET", "/metrics")
    assert status == 200, text
    out: dict[str, int] = {}
    for line in str(text).splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("verb") not in ("POST", "CREATE", "PUT", "UPDATE", "PATCH", "DELETE", "APPLY"):
            continue
        if labels.get("group") != "jobtree.dev" and labels.get("resource") != "events":
            continue
        sub = labels.get("subresource", "")
        key = f"{labels['verb']} {labels['resource']}{'/' + sub if sub else ''}"
        out[key] = out.get(key, 0) + int(float(m.group("value")))
    return out


def minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


# --- the reconciler process --------------------------------------------------------------------------------


class Reconciler:
    def __init__(self, cp, log: Path, resync: float):
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig, PYTHONUNBUFFERED="1")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubectl_runs", "reconcile", "--no-leader-elect", "--metrics-addr",
             "127.0.0.1:0", "--resync-period", f"{resync:g}s"], stdout=subprocess.DEVNULL, stderr=self._out,
            env=env, cwd=str(ROOT), preexec_fn=_die_with_parent)  # never outlives the benchmark
        self.url = None

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def wait_log(self, fragment: str, count: int = 1, timeout: float = 600) -> float:
        end = time.monotonic() + timeout
        while sum(1 for x in self.lines() if fragment in x) < count:
            if self.proc.poll() is not None:
                raise SystemExit("reconciler exited:\n" + "\n".join(self.lines()[-20:]))
            if time.monotonic() > end:
                raise SystemExit(f"timed out waiting for {fragment!r}")
            time.sleep(0.05)
        return time.monotonic() - self.started

    def metrics_url(self) -> str:
        if self.url is None:
            self.wait_log('msg="serving metrics"', timeout=60)
            line = next(x for x in self.lines() if 'msg="serving metrics"' in x)
            self.url = re.search(r"url=(\S+)", line).group(1)
        return self.url

    def histogram(self) -> tuple[float, float]:
        """(sum, count) of jobtree_reconcile_duration_seconds."""
        with urllib.request.urlopen(self.metrics_url() + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        total = float(re.search(r"^jobtree_reconcile_duration_seconds_sum (\S+)$", text, re.M).group(1))
        count = float(re.search(r"^jobtree_reconcile_duration_seconds_count (\S+)$", text, re.M).group(1))
        return total, count

    def rss(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in MB."""
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        get = lambda key: int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1)) // 1024  # noqa: E731
        return get("VmRSS"), get("VmHWM")

    def idle(self, quiet: float = 1.5) -> bool:
        writes = [x for x in self.lines() if "msg=write " in x]
        if not writes:
            return True
        stamp = re.search(r"time=(\S+)", writes[-1]).group(1)
        last = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        return (datetime.now(UTC) - last).total_seconds() > quiet

    def cpu(self) -> float:
        """CPU seconds the process has used."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def settled(self, window: float = 2.0, busy: float = 0.1) -> bool:
        """Idle: less than ``busy`` CPU seconds over ``window`` (no batch running; writes alone do not say it:
        the echo of a write can start another full pass that writes nothing)."""
        before = self.cpu()
        time.sleep(window)
        return self.cpu() - before < busy

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def wait_for(check, timeout: float, every: float = 0.005) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"timed out after {timeout:g} s")
        time.sleep(every)
    return time.monotonic() - t0


def all_planned(cp) -> bool:
    code, body = cp.request("GET", f"{API}/runs")
    return code == 200 and all((item.get("status") or {}).get("plan") for item in body["items"])


# --- the measurements --------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_spec_latency(cp, rec: Reconciler, samples: int) -> list[float]:
    out = []
    path = f"{API}/namespaces/team0/runs/b00-r95"
    for i in range(samples):
        code, body = cp.request("PATCH", path, {"spec": {"resources": {"totalGPUs": 16 + 8 * (i % 2 + 1)}}},
                                content_type="application/merge-patch+json")
        assert code == 200, body
        t0 = time.monotonic()
        generation = body["metadata"]["generation"]

        def done(gen: int = generation) -> bool:
            _, run = cp.request("GET", path)
            return (run.get("status") or {}).get("observedGeneration") == gen

        wait_for(done, 900)
        out.append(time.monotonic() - t0)  # the latency, taken before waiting for the reconciler to be idle again
        wait_for(rec.settled, 1800, every=0.0)
    return out


def lease_budget_latency(cp, rec: Reconciler, pairs: int, node: str) -> list[float]:
    """Create a 2-GPU lease of a Pending run, wait for its Budget's usedGPUs to rise by 2; delete it, wait for
    it to fall back: two samples per pair."""
    out = []
    budget = f"{API}/namespaces/team0/budgets/main"
    collection = f"{API}/namespaces/team0/gpuleases"

    def used() -> int:
        _, b = cp.request("GET", budget)
        return b["status"]["envelopes"][0]["usedGPUs"]

    base = used()
    for i in range(pairs):
        name = f"bench-probe-{i}"
        item = lease(name, "team0", "b00-r96", 0, [f"{node}#0", f"{node}#1"], NOW - timedelta(minutes=5))
        code, body = cp.request("POST", collection, item)
        assert code == 201, body
        out.append(wait_for(lambda: used() == base + 2, 1800, every=0.01))
        wait_for(rec.settled, 1800, every=0.0)
        code, body = cp.request("DELETE", f"{collection}/{name}")
        assert code == 200, body
        out.append(wait_for(lambda: used() == base, 1800, every=0.01))
        wait_for(rec.settled, 1800, every=0.0)
    return out


def measure(cp, label: str, runs: int, leases: int, samples: int, pairs: int, resync: float, work: Path,
            probe_node: str) -> dict:
    # 1. the default resync period (5m): cold start, then the latencies, undisturbed by periodic resyncs
    before = server_writes(cp)
    rec = Reconciler(cp, work / f"reconcile-{runs}.log", 300.0)
    try:
        synced = rec.wait_log("msg=synced")
        converged = wait_for(lambda: all_planned(cp), 1800, every=1.0) + synced
        wait_for(rec.settled, 1800, every=0.0)
        cold_writes = minus(server_writes(cp), before)
        print(f"[{label}] cold start: synced {synced:.1f} s, every run's status {converged:.1f} s; writes "
              f"{sum(cold_writes.values())} {cold_writes}; RSS/peak {rec.rss()} MB", file=sys.stderr)
        spec = run_spec_latency(cp, rec, samples)
        print(f"[{label}] run spec -> status: median {statistics.median(spec):.3f} s, max {max(spec):.3f} s",
              file=sys.stderr)
        wait_for(rec.settled, 1800, every=0.0)
        budget = lease_budget_latency(cp, rec, pairs, probe_node)
        print(f"[{label}] lease -> budget status: median {statistics.median(budget):.3f} s, max {max(budget):.3f} s",
              file=sys.stderr)
        rss_busy = rec.rss()
    finally:
        rec.stop()
    # 2. a restart over the converged fleet, then idle periodic resyncs (short period)
    before = server_writes(cp)
    rec = Reconciler(cp, work / f"resync-{runs}.log", resync)
    try:
        rec.wait_log("msg=synced")
        wait_for(lambda: rec.histogram()[1] >= 1, 1800, every=0.5)
        wait_for(rec.settled, 1800, every=0.0)  # the start-up pass over everything: every batch of it
        first_sum, first_count = rec.histogram()
        restart_writes = minus(server_writes(cp), before)
        n = 3 if runs <= 100 else 2
        w0 = server_writes(cp)
        passes: list[tuple[float, float]] = []  # (seconds, batches) of each idle resync pass
        for _ in range(n):
            s0, c0 = rec.histogram()  # idle: the last pass is over, the next resync has not come
            resyncs = sum(1 for x in rec.lines() if "msg=resync " in x)
            rec.wait_log("msg=resync ", count=resyncs + 1, timeout=resync * 3 + 1800)
            wait_for(lambda c=c0: rec.histogram()[1] > c, 1800, every=0.05)
            wait_for(rec.settled, 1800, every=0.0)  # every batch of the pass done
            s1, c1 = rec.histogram()
            passes.append((s1 - s0, c1 - c0))
        idle_writes = minus(server_writes(cp), w0)
        rss_idle = rec.rss()
        print(f"[{label}] restart: {first_sum:.2f} s in {first_count:g} batches, writes {restart_writes or 'none'}; "
              f"{n} idle resync passes: " + ", ".join(f"{t:.2f} s in {b:g} batches" for t, b in passes)
              + f", writes {idle_writes or 'none'}; RSS/peak {rss_idle} MB", file=sys.stderr)
    finally:
        rec.stop()
    return {
        "label": label, "runs": runs, "leases": leases, "synced": synced, "converged": converged,
        "cold_writes": sum(cold_writes.values()), "spec": spec, "budget": budget,
        "restart_seconds": first_sum, "restart_batches": first_count,
        "restart_writes": sum(restart_writes.values()),
        "resyncs": len(passes), "resync_seconds": statistics.median(t for t, _ in passes),
        "resync_batches": statistics.median(b for _, b in passes),
        "idle_writes": sum(idle_writes.values()), "idle_detail": idle_writes,
        "rss": max(rss_busy[0], rss_idle[0]), "hwm": max(rss_busy[1], rss_idle[1]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40, help="run spec -> status samples per fleet")
    parser.add_argument("--pairs", type=int, default=10,
                        help="lease create/delete pairs per fleet (lease -> budget status; 2 samples each)")
    parser.add_argument("--big-pairs", type=int, default=1, help="the same on the big fleet (slow: see RESULTS)")
    parser.add_argument("--big-samples", type=int, default=10, help="run spec changes on the big fleet")
    parser.add_argument("--resync-period", type=float, default=10.0, help="seconds (the default is 5m)")
    parser.add_argument("--blocks", type=int, default=10, help="blocks of 100 runs in the big fleet (default 10)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    started = time.monotonic()
    results = []
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", str(ROOT / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        small, nodes = fleet(0, 1, 0)
        t0 = time.monotonic()
        upload(cp, small)
        leases_small = sum(1 for o in small if o["kind"] == "GPULease")
        print(f"loaded {len(small):,} objects in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        probe = f"n{nodes - 1:05d}"
        results.append(measure(cp, "100 runs", 100, leases_small, args.samples, args.pairs, args.resync_period,
                               work, probe))
        rest, _more = fleet(1, args.blocks - 1, nodes)
        t0 = time.monotonic()
        upload(cp, rest, threads=24)
        print(f"loaded {len(rest):,} more objects in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        leases_all = leases_small + sum(1 for o in rest if o["kind"] == "GPULease")
        big = 100 * args.blocks
        results.append(measure(cp, f"{big:,} runs", big, leases_all, args.big_samples, args.big_pairs,
                               args.resync_period, work, probe))
    elapsed = time.monotonic() - started
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    print(f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {commit} on {cpu}, {os.cpu_count()} cores "
          f"(shared with other work); Python {platform.python_version()}; `python -m bench.bench_reconcile "
          f"--samples {args.samples} --pairs {args.pairs} --big-samples {args.big_samples} --big-pairs {args.big_pairs} "
          f"--resync-period {args.resync_period:g}` ({elapsed:.0f} s in all; load average "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end).")
    print()
    print("| fleet | run spec → status: median / p99 | lease → budget status: median / p99 | cold start: "
          "synced / every status written | restart over the converged fleet | full resync (idle) | "
          "API writes per idle resync | RSS (peak) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        per = r["idle_writes"] / r["resyncs"]
        print(f"| {r['runs']:,} runs, {r['leases']:,} leases | {ms(statistics.median(r['spec']))} / "
              f"{ms(pct(r['spec'], 0.99))} | {ms(statistics.median(r['budget']))} / {ms(pct(r['budget'], 0.99))} "
              f"({len(r['budget'])}) | {r['synced']:.1f} s / {r['converged']:.1f} s ({r['cold_writes']:,} writes) | "
              f"{r['restart_seconds']:.2f} s ({r['restart_batches']:g} batches), {r['restart_writes']} writes | "
              f"{r['resync_seconds']:.2f} s ({r['resync_batches']:g} batches) | "
              f"**{per:g}** ({r['idle_writes']} over {r['resyncs']:g}) | {r['rss']} MB ({r['hwm']} MB) |")
    print()
    print(f"Samples: run spec changes {args.samples} (100 runs) and {args.big_samples} (big fleet), each taken "
          "once the reconciler is idle (under 0.1 CPU-s in 2 s); lease → budget: the count in brackets (a create "
          "and a delete per pair). p99 = the sample at rank 0.99 × (n − 1), i.e. the largest here. Idle writes: "
          + "; ".join(f"{r['label']}: {r['idle_detail'] or 'none'}" for r in results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
