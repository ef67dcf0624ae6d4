"""Issue 27 benchmark: `kubectl runs reconcile` at 1,000 and 10,000 runs against a real API server — the issue's
table, with writes counted by the API server (``apiserver_request_total``), not by the reconciler.

    .venv/bin/python -m bench.bench_scale --runs 1000,10000          # the issue's two sizes (see RESULTS.md)
    .venv/bin/python -m bench.bench_scale --quick                    # 100 runs, short caps: checks the harness

The fleet is bench/scale_fleet.py's (issue 12's shape, one namespace per 100 runs, Pending runs short of funding
so the ledger keeper has nothing to do on it as loaded). Sizes are loaded one after the other into one
kube-apiserver + etcd of the test tier (tests/controlplane): the first size, measured, then the blocks that make
the next one. The reconciler runs as a user runs it: ``python -m kubectl_runs reconcile --no-leader-elect
--metrics-addr 127.0.0.1:0 --resync-period 1h`` (its own process; leader election off, so the only writes are
its own; no rate-limit flag: its defaults). Per size:

Phase 1, the status path (no ``--manage-leases``, as issue 12):

- *cold start*: process start → every Run has ``status.plan`` (every Run listed and checked whenever the API
  server's write count has been still for 3 s), the time of the last write (the reconciler's log line of it);
  the writes it took, by resource; then the time until the reconciler is idle (under 0.1 CPU-s in 2 s: its work
  queue drained). Capped (``--cold-cap``, from process start): a cold start that does not converge is a row
  "did not converge in N s" with what was written by then; one that converges but is not idle by the cap says
  so with its work queue's depth (``jobtree_workqueue_depth``), and the rows below are then not measured (they
  need an idle reconciler; ``--measure-unconverged`` measures them anyway).
- *one lease change*: close an open GPULease of a Running run (its GPU failed; ``ended`` = now), then create its
  replacement on the same slot, alternately (``--changes`` samples). Writes the API server counts within
  ``--immediate`` seconds (2) of the change (the change's own write not counted), and in all: when the reconciler has ``--status-interval`` (found in
  ``reconcile --help``), over that interval + ``--immediate``, then until quiet; without it, until quiet (no new
  write for ``--quiet`` seconds and the reconciler's CPU idle). Capped (``--change-cap``). Listed by resource,
  so the Runs rewritten by one lease change are visible.
- *run spec → status*: patch a Pending run's ``spec.resources.totalGPUs``, poll (5 ms) its
  ``status.observedGeneration``; ``--spec-samples`` samples, each once the reconciler is idle; median and p99
  (the sample at rank 0.99 × (n − 1)).

Phase 2, the ledger keeper (``--manage-leases``), a new process over the converged fleet:

- *idle resync*: the writes of its start-up pass over the converged fleet — the same ``All`` key a periodic
  resync queues (every object evaluated, and the ledger pass) — must be 0. Capped (``--keeper-cap``): then the
  writes by the cap, and the new Runs below are measured while the keeper still works through that pass.
- *new Run → its leases minted*: create a 4-GPU Run (4 groups of 1 GPU) in ``team0`` (12 GPUs of headroom),
  poll its GPULeases (label ``jobtree.dev/run``) until 4 are open; then delete the Run and wait until the keeper
  closed them and is idle. ``--mint-samples`` samples; median and p99.

RSS: VmHWM (peak) of each reconciler process, from /proc.

Offline, in a child process (``--ledger-cap`` each): ``plan_ledger`` (imported from
``kubectl_runs.reconciler.ledger``, a module or a package) on the same fleet loaded from a snapshot file, timed
against the decode of that file (bench/run.py's baseline: msgspec into typed records, GC paused), as a ratio:
the fleet as loaded (nothing to write: the cost of the keeper on every batch of the live loop) and the fleet
with issue 12's Budgets (every Pending run fundable: a pass that mints 80 GPULeases per 100 runs). At 1,000 runs
also issue 12's own offline fleet (bench_reconcile.fleet, the 156-write pass of issue 27's 12.9 s). A pass that
does not finish within the cap is a row with the writes it had emitted by then (counted through the pass's
``emit``, when the keeper has one).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "controlplane"))

from bulk_load import Loader, runs_without_status  # noqa: E402
from controlplane import ControlPlane, _die_with_parent  # noqa: E402

from bench import scale_fleet  # noqa: E402
from bench.bench_reconcile import minus, server_writes  # noqa: E402

API = "/apis/jobtree.dev/v1alpha1"
NOW = datetime.now(UTC).replace(microsecond=0)
PROBE_GPUS = 4
TARGETS = {  # issue 27's table: (1,000 runs, 10,000 runs)
    "changes": ("≤ 5 / ≤ the pending Runs whose figures changed", "same"),
    "spec": ("≤ 1 s", "≤ 2 s"),
    "mint": ("≤ 2 s", "≤ 5 s"),
    "ledger": ("≤ 1 s", "≤ 10 s"),
    "cold": ("≤ 30 s", "≤ 5 min within the default QPS"),
    "idle": ("0", "0"),
    "rss": ("≤ 200 MB", "≤ 1 GB"),
    "equal": ("every one equal", "same"),
}


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- the reconciler process --------------------------------------------------------------------------------


def reconcile_help() -> str:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", "reconcile", "--help"], capture_output=True,
                          text=True, cwd=str(ROOT), env=dict(os.environ, COLUMNS="200")).stdout


def flag_default(help_text: str, flag: str) -> str | None:
    """The ``[default: …]`` click prints after ``flag``'s help, or "" when the flag has none; None if no flag."""
    m = re.search(rf"^ {{2}}(?:-\w, )?{re.escape(flag)}\b(.*?)(?=\n {{2}}-|\Z)", help_text, re.S | re.M)
    if m is None:
        return None
    d = re.search(r"\[default:\s*([^\]]+)\]", m.group(1))
    return " ".join(d.group(1).split()) if d else ""


def seconds_of(text: str) -> float:
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)\s*(ms|h|m|s)?", text):
        total += float(number) * {"ms": 0.001, "h": 3600, "m": 60}.get(unit, 1)
    return total


class Reconciler:
    def __init__(self, cp, log_path: Path, extra: list[str]):
        self.log_path = log_path
        self._out = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig, PYTHONUNBUFFERED="1")
        self.argv = ["python", "-m", "kubectl_runs", "reconcile", "--no-leader-elect", "--metrics-addr",
                     "127.0.0.1:0", "--resync-period", "1h", *extra]
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, *self.argv[1:]], stdout=subprocess.DEVNULL, stderr=self._out,
                                     env=env, cwd=str(ROOT), preexec_fn=_die_with_parent)

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise SystemExit("reconciler exited:\n" + "\n".join(self.lines()[-20:]))

    def wait_log(self, fragment: str, timeout: float) -> float | None:
        end = time.monotonic() + timeout
        while not any(fragment in x for x in self.lines()):
            self.alive()
            if time.monotonic() > end:
                return None
            time.sleep(0.1)
        return time.monotonic() - self.started

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def settled(self, window: float = 2.0, busy: float = 0.1) -> bool:
        """Under ``busy`` CPU seconds over ``window``: no batch running."""
        self.alive()
        before = self.cpu()
        time.sleep(window)
        return self.cpu() - before < busy

    def queue_depth(self) -> str:
        """jobtree_workqueue_depth from the reconciler's /metrics (keys waiting), as text."""
        try:
            line = next(x for x in self.lines() if 'msg="serving metrics"' in x)
            url = re.search(r"url=(\S+)", line).group(1)
            with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
                text = resp.read().decode()
            depth = float(re.search(r"^jobtree_workqueue_depth (\S+)$", text, re.M).group(1))
            return f"{depth:,.0f} keys"
        except Exception as exc:  # a diagnostic only
            return f"depth unknown: {type(exc).__name__}"

    def hwm(self) -> int:
        """VmHWM (peak RSS) in MB."""
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"^VmHWM:\s+(\d+) kB", text, re.M).group(1)) // 1024

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def total(writes: dict[str, int]) -> int:
    return sum(writes.values())


def by_resource(writes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(writes.items(), key=lambda kv: -kv[1])) or "none"


def wait_quiet(cp, rec: Reconciler, quiet: float, cap: float, base: dict[str, int]) -> tuple[bool, float, dict]:
    """Until no write for ``quiet`` s and the reconciler idle, at most ``cap`` s: (quiet?, seconds from the call
    to the last write seen, writes since ``base``)."""
    t0 = time.monotonic()
    last = server_writes(cp)
    last_change = t0 if minus(last, base) else None
    while True:
        now = time.monotonic()
        if now - t0 > cap:
            return False, (last_change or t0) - t0, minus(last, base)
        if now - (last_change or t0) >= quiet and rec.settled():
            current = server_writes(cp)
            if current == last:
                return True, (last_change or t0) - t0, minus(current, base)
        time.sleep(0.5)
        current = server_writes(cp)
        if current != last:
            last, last_change = current, time.monotonic()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


# --- phase 1: the status path ------------------------------------------------------------------------------


def cold_start(cp, rec: Reconciler, cap: float, out: dict) -> bool:
    """Process start → every Run has status (checked by a list whenever the API server's write count has been
    still for 3 s; the reconciler need not be idle), then → the reconciler idle. True when both came within
    ``cap``; the rest of the size is measured from an idle reconciler only."""
    base = out["cold_base"]
    synced = rec.wait_log("msg=synced", cap)
    if synced is None:
        out["cold"] = f"did not sync in {cap:g} s"
        return False
    out["synced"] = synced
    last, still = server_writes(cp), time.monotonic()
    while True:
        time.sleep(1.0)
        rec.alive()
        current = server_writes(cp)
        if current != last:
            last, still = current, time.monotonic()
        elapsed = time.monotonic() - rec.started
        if time.monotonic() - still >= 3.0 or elapsed >= cap:
            missing, runs = runs_without_status(cp)
            writes = minus(server_writes(cp), base)
            out["cold_writes"] = writes
            if not missing:
                # the moment of the last write: the reconciler's own log line of it (the API server's count is polled)
                stamps = [re.search(r"time=(\S+)", x).group(1) for x in rec.lines() if "msg=write " in x]
                when = (datetime.strptime(stamps[-1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
                        if stamps else time.time())
                out["converged"] = when - out["cold_wall"]
                break
            if elapsed >= cap:
                out["cold"] = (f"did not converge in {cap:g} s: {runs - missing:,} of {runs:,} Runs with status, "
                               f"{total(writes):,} writes ({by_resource(writes)})")
                return False
            still = time.monotonic()
    while time.monotonic() - rec.started < cap:
        if rec.settled():
            out["idle_after"] = time.monotonic() - rec.started
            out["cold_writes"] = minus(server_writes(cp), base)
            return True
    out["not_idle"] = f"not idle {cap:g} s after start (work queue {rec.queue_depth()})"
    return False


def lease_changes(cp, rec: Reconciler, args, interval: float | None, block: int = 0) -> list[dict]:
    """Close an open lease of a Running run, then create its replacement on the same slot, alternately; in
    ``block`` (each size its own last block: a smaller size measured first in the same cluster changed block 0)."""
    ns, run = scale_fleet.namespace(block), scale_fleet.run_name(block, 0)
    collection = f"{API}/namespaces/{ns}/gpuleases"
    code, current = cp.request("GET", f"{collection}/{run}-g00")
    assert code == 200, current
    slot = current["spec"]["slice"]["slots"]
    name = f"{run}-g00"
    samples = []
    for i in range(args.changes):
        now = datetime.now(UTC).replace(microsecond=0)
        base = server_writes(cp)
        if i % 2 == 0:
            what = f"close {ns}/{name}"
            code, body = cp.request("PATCH", f"{collection}/{name}/status", {"status": {
                "closed": True, "ended": scale_fleet.iso(now - timedelta(seconds=1)), "closureReason": "NodeFailure"}},
                content_type="application/merge-patch+json")
            assert code == 200, body
        else:
            name = f"{run}-g00-x{i}"
            what = f"create {ns}/{name}"
            item = scale_fleet.lease(name, ns, run, 0, slot, now)
            code, body = cp.request("POST", collection, item)
            assert code == 201, body
        own = "PATCH gpuleases/status" if i % 2 == 0 else "POST gpuleases"  # the change itself: not counted
        t0 = time.monotonic()
        time.sleep(args.immediate)
        immediate = minus(server_writes(cp), {**base, own: base.get(own, 0) + 1})
        if interval is not None:
            time.sleep(max(0.0, interval + args.immediate - (time.monotonic() - t0)))
        ok, _, writes = wait_quiet(cp, rec, args.quiet, args.change_cap, base)
        writes = minus(writes, {own: 1})
        sample = {"what": what, "immediate": immediate, "writes": writes, "quiet": ok,
                  "elapsed": time.monotonic() - t0}
        samples.append(sample)
        log(f"  lease change {i + 1}/{args.changes} ({what}): {total(immediate)} writes within {args.immediate:g} s "
            f"({by_resource(immediate)}); {total(writes)} in all ({by_resource(writes)})"
            + ("" if ok else f" — not quiet in {args.change_cap:g} s") + f"; {sample['elapsed']:.0f} s")
    return samples


def spec_latency(cp, rec: Reconciler, samples: int, cap: float) -> tuple[list[float], int]:
    """Run spec → status: (latencies, samples that did not converge within cap)."""
    out, failed = [], 0
    path = f"{API}/namespaces/{scale_fleet.namespace(0)}/runs/{scale_fleet.run_name(0, 95)}"
    for i in range(samples):
        code, body = cp.request("PATCH", path, {"spec": {"resources": {"totalGPUs": 16 + 8 * (i % 2 + 1)}}},
                                content_type="application/merge-patch+json")
        assert code == 200, body
        t0 = time.monotonic()
        generation = body["metadata"]["generation"]
        while True:
            _, run = cp.request("GET", path)
            if (run.get("status") or {}).get("observedGeneration") == generation:
                out.append(time.monotonic() - t0)
                break
            if time.monotonic() - t0 > cap:
                failed += 1
                break
            time.sleep(0.005)
        end = time.monotonic() + cap
        while not rec.settled() and time.monotonic() < end:
            pass
    return out, failed


# --- phase 2: the ledger keeper ----------------------------------------------------------------------------


def mint_latency(cp, rec: Reconciler, samples: int, cap: float, idle: bool = True) -> tuple[list[float], int]:
    """New Run → its leases open: (latencies, samples not minted within cap). Each sample starts once the keeper
    is idle again, unless it was not idle to begin with (``idle``: its start-up pass had not ended by the cap)."""
    ns = scale_fleet.namespace(0)
    out, failed = [], 0
    for i in range(samples):
        name = f"probe-{i}-{int(time.time()) % 100000}"
        body = {"apiVersion": scale_fleet.API_VERSION, "kind": "Run", "metadata": {"name": name, "namespace": ns},
                "spec": {"resources": {"gpuType": scale_fleet.FLAVOR, "totalGPUs": PROBE_GPUS},
                         "locality": {"groupGPUs": 1}}}
        code, answer = cp.request("POST", f"{API}/namespaces/{ns}/runs", body)
        assert code == 201, answer
        t0 = time.monotonic()
        leases = f"{API}/namespaces/{ns}/gpuleases?labelSelector=jobtree.dev%2Frun%3D{name}"

        def open_leases(path: str = leases) -> int:
            _, listed = cp.request("GET", path)
            return sum(1 for x in listed.get("items", []) if not (x.get("status") or {}).get("closed"))

        minted = None
        while minted is None and time.monotonic() - t0 <= cap:
            if open_leases() >= PROBE_GPUS:
                minted = time.monotonic() - t0
            else:
                time.sleep(0.02)
        if minted is None:
            failed += 1
        else:
            out.append(minted)
        log(f"  new Run {ns}/{name}: " + (f"{minted:.2f} s to {PROBE_GPUS} open leases" if minted is not None
                                          else f"not minted in {cap:g} s"))
        code, answer = cp.request("DELETE", f"{API}/namespaces/{ns}/runs/{name}")
        assert code == 200, answer
        t1 = time.monotonic()
        while open_leases() and time.monotonic() - t1 < cap:
            time.sleep(0.1)
        while idle and not rec.settled() and time.monotonic() - t1 < cap:
            pass
    return out, failed


# --- offline: the ledger pass against the decode of the same fleet ------------------------------------------


def offline_child(blocks: int, variant: str, cap: float) -> int:
    """Runs in a child process; prints one JSON line."""
    import faulthandler

    from bench.run import decode_baseline
    from kubectl_runs.sources.files import load_file

    faulthandler.enable()
    now = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
    if variant == "issue12":
        from bench import bench_reconcile

        bench_reconcile.NOW = now
        objects, _ = bench_reconcile.fleet(0, blocks, 0)
        doc = {"apiVersion": "v1", "kind": "List",
               "metadata": {"annotations": {"jobtree.dev/snapshot-time": scale_fleet.iso(now)}}, "items": objects}
    else:
        doc = scale_fleet.snapshot_document(blocks, now, scale_fleet.COLD_BUDGET if variant == "cold" else None)
    path = Path(tempfile.mkdtemp(prefix="bench-scale-")) / "fleet.json"
    path.write_bytes(json.dumps(doc).encode())
    del doc
    decode = decode_baseline(str(path))
    decodes = []
    for _ in range(3):
        t0 = time.perf_counter()
        result = decode()
        decodes.append(time.perf_counter() - t0)
        del result
        gc.collect()
    snapshot = load_file(str(path), path.read_bytes())
    path.unlink()
    import kubectl_runs.reconciler.ledger as ledger_module

    emitted = [0]
    hooked = _count_emits(emitted)
    at = now + timedelta(seconds=7)
    info = {"runs": len(snapshot.runs), "leases": len(snapshot.leases), "nodes": len(snapshot.nodes),
            "decode": statistics.median(decodes), "hooked": hooked}

    def give_up() -> None:
        print(json.dumps({**info, "capped": cap, "emitted": emitted[0]}), flush=True)
        os._exit(0)

    timer = threading.Timer(cap, give_up)
    timer.daemon = True
    timer.start()
    passes, writes = [], None
    while len(passes) < 3 and sum(passes) < min(cap / 3, 30):
        emitted[0] = 0
        t0 = time.perf_counter()
        writes = ledger_module.plan_ledger(snapshot, at)
        passes.append(time.perf_counter() - t0)
    timer.cancel()
    kinds: dict[str, int] = {}
    for w in writes:
        key = f"{type(w).__name__} {w.kind}"
        kinds[key] = kinds.get(key, 0) + 1
    print(json.dumps({**info, "pass": statistics.median(passes), "passes": len(passes), "writes": len(writes),
                      "kinds": kinds}), flush=True)
    return 0


def _count_emits(counter: list[int]) -> bool:
    """Count the writes a pass emits, through the ``emit`` method of the keeper's pass state (wherever the ledger
    module or package keeps it), for the progress of a capped pass. False when none is found."""
    import importlib
    import pkgutil

    import kubectl_runs.reconciler.ledger as ledger_module

    modules = [ledger_module]
    if hasattr(ledger_module, "__path__"):
        for info in pkgutil.iter_modules(ledger_module.__path__, ledger_module.__name__ + "."):
            modules.append(importlib.import_module(info.name))
    hooked = False
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module.__name__ and "emit" in vars(value):
                original = vars(value)["emit"]

                def emit(self, *a, _original=original, **k):
                    counter[0] += 1
                    return _original(self, *a, **k)

                value.emit = emit
                hooked = True
    return hooked


def offline(blocks: int, variant: str, cap: float) -> dict:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_scale", "--offline-child", f"{blocks}:{variant}",
                           "--ledger-cap", str(cap)], capture_output=True, text=True, cwd=str(ROOT),
                          timeout=cap + 600)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr or proc.stdout)[-800:]}
    return json.loads(lines[-1])


def ledger_row(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error'][-200:]!r}"
    decode = result["decode"]
    if "capped" in result:
        progress = (f"{result['emitted']:,} writes emitted by then" if result["hooked"] else "progress unknown")
        return f"did not finish in {result['capped']:g} s ({progress}; decode {decode:.2f} s; ÷ decode > " \
               f"{result['capped'] / decode:,.0f})"
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(result["kinds"].items())) or "none"
    return f"{ms(result['pass'])} ({result['writes']:,} writes: {kinds}); decode {ms(decode)}; " \
           f"**÷ decode {result['pass'] / decode:.2f}**"


# --- one size ----------------------------------------------------------------------------------------------


ENVELOPE_FIELDS = ("windowActive", "concurrency", "usedGPUs", "headroomGPUs", "ownedGPUs", "sharedGPUs", "borrowedGPUs",
                   "unfundedGPUs", "spareGPUs")  # consumedGPUHours is "as of updatedAt": it moves with the clock
PLAN_FIELDS = ("deficitGPUs", "capacityDeficitGPUs", "fundingDeficitGPUs")


def status_vs_reports(cp, work: Path, blocks: int) -> dict:
    """Every Budget's status against ``budgets usage -o json``, and the status of a sample of Runs (per sampled
    namespace a Running, a Succeeded and a Pending one) against ``plan NS/NAME -o json`` — the product's commands,
    on one ``snapshot save`` of the cluster, so status and reports read the same objects."""
    env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig)
    path = work / "converged.json"

    def plugin(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl runs {' '.join(args)}: {done.stderr.strip()[-500:]}")
        return done.stdout

    began = time.monotonic()
    plugin("snapshot", "save", "-f", str(path))
    items = json.loads(path.read_text())["items"]
    stored = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o.get("status") or {}
              for o in items if o["kind"] in ("Budget", "Run")}
    out = {"envelopes": 0, "runs": 0, "differ": []}
    for row in json.loads(plugin("budgets", "usage", "--snapshot", str(path), "-o", "json"))["envelopes"]:
        status = stored.get(("Budget", row["namespace"], row["budget"]), {})
        mine = next((e for e in status.get("envelopes") or [] if e.get("name") == row["envelope"]), None)
        out["envelopes"] += 1
        if mine is None or any(mine.get(f) != row[f] for f in ENVELOPE_FIELDS):
            out["differ"].append(f"envelope {row['namespace']}/{row['budget']}/{row['envelope']}")
    for block in sorted({0, blocks // 2, blocks - 1}):
        ns = scale_fleet.namespace(block)
        for index in (0, scale_fleet.RUNNING, scale_fleet.RUNNING + scale_fleet.SUCCEEDED):
            name = scale_fleet.run_name(block, index)
            plan = json.loads(plugin("plan", f"{ns}/{name}", "--snapshot", str(path), "-o", "json"))
            mine = stored.get(("Run", ns, name), {}).get("plan") or {}
            out["runs"] += 1
            if any(mine.get(f) != plan[f] for f in PLAN_FIELDS) or \
                    [r.get("code") for r in mine.get("reasons", [])] != [r["code"] for r in plan["reasons"]]:
                out["differ"].append(f"run {ns}/{name}")
    out["seconds"] = time.monotonic() - began
    path.unlink()
    return out



def measure(cp, blocks: int, args, work: Path, help_text: str) -> dict:
    runs = blocks * 100
    out: dict = {"runs": runs, "leases": blocks * 2000, "load_start": load_average()}
    interval_default = flag_default(help_text, "--status-interval")
    interval = None
    if interval_default is not None:
        interval = args.status_interval if args.status_interval is not None else seconds_of(interval_default or "0")
    extra = ["--status-interval", f"{interval:g}s"] if interval is not None and args.status_interval is not None else []
    t_size = time.monotonic()
    # phase 1
    out["cold_base"] = server_writes(cp)
    out["cold_wall"] = time.time()
    rec = Reconciler(cp, work / f"status-{runs}.log", extra)
    out["argv1"] = " ".join(rec.argv)
    try:
        converged = cold_start(cp, rec, args.cold_cap, out)
        log(f"[{runs:,} runs] cold start: " + (f"synced {out['synced']:.1f} s, every status {out['converged']:.1f} s, "
                                              f"{total(out['cold_writes']):,} writes ({by_resource(out['cold_writes'])})"
                                              + (f", idle at {out['idle_after']:.0f} s" if converged
                                                 else f", {out.get('not_idle')}")
                                              if "converged" in out else out["cold"]) + f"; load {load_average()}")
        if converged or args.measure_unconverged:
            out["changes"] = lease_changes(cp, rec, args, interval, blocks - 1)
            spec, failed = spec_latency(cp, rec, args.spec_samples, args.sample_cap)
            out["spec"], out["spec_failed"] = spec, failed
            if spec:
                log(f"[{runs:,} runs] run spec -> status: median {statistics.median(spec):.3f} s, "
                    f"p99 {pct(spec, 0.99):.3f} s ({len(spec)} samples, {failed} not converged)")
        out["hwm1"] = rec.hwm()
    finally:
        rec.stop()
    if converged:  # the statuses as the idle reconciler left them, against the reports of the same objects
        out["equal"] = status_vs_reports(cp, work, blocks)
        eq = out["equal"]
        log(f"[{runs:,} runs] status vs reports: {eq['envelopes'] - sum(d.startswith('envelope') for d in eq['differ'])}"
            f" of {eq['envelopes']} envelopes equal `budgets usage -o json`, "
            f"{eq['runs'] - sum(d.startswith('run') for d in eq['differ'])} of {eq['runs']} sampled Runs equal "
            f"`plan -o json` ({eq['seconds']:.0f} s){'; differ: ' + ', '.join(eq['differ'][:5]) if eq['differ'] else ''}")
    # phase 2
    if not args.no_manage_leases and (converged or args.measure_unconverged):
        base = server_writes(cp)
        rec = Reconciler(cp, work / f"keeper-{runs}.log", [*extra, "--manage-leases"])
        out["argv2"] = " ".join(rec.argv)
        try:
            synced = rec.wait_log("msg=synced", args.cold_cap)
            if synced is None:
                out["idle"] = f"did not sync in {args.cold_cap:g} s"
            else:
                ok, _, writes = wait_quiet(cp, rec, 3.0, args.keeper_cap, base)
                out["restart"] = time.monotonic() - rec.started
                out["idle_writes"], out["idle_quiet"] = writes, ok
                log(f"[{runs:,} runs] keeper start-up pass over the converged fleet: {out['restart']:.1f} s, "
                    f"{total(writes)} writes ({by_resource(writes)})"
                    + ("" if ok else f" — not idle in {args.keeper_cap:g} s: the new Runs are measured while it "
                                     "works through the pass"))
                mint, failed = mint_latency(cp, rec, args.mint_samples, args.sample_cap, idle=ok)
                out["mint"], out["mint_failed"] = mint, failed
            out["hwm2"] = rec.hwm()
        finally:
            rec.stop()
    out["live_seconds"] = time.monotonic() - t_size
    # offline
    t_off = time.monotonic()
    variants = ["steady", "cold"] + (["issue12"] if blocks == 10 else [])
    out["ledger"] = {}
    for variant in variants if not args.no_offline else ():
        out["ledger"][variant] = offline(blocks, variant, args.ledger_cap)
        log(f"[{runs:,} runs] ledger pass offline ({variant}): {ledger_row(out['ledger'][variant])}")
    out["offline_seconds"] = time.monotonic() - t_off
    out["load_end"] = load_average()
    return out


def skipped(r: dict) -> str:
    why = r.get("cold") or r.get("not_idle")
    return f"not measured: the cold start {why}" if why else "not measured"


def cell(r: dict, key: str, args) -> str:
    if key == "changes":
        changes = r.get("changes")
        if not changes:
            return skipped(r)
        parts = []
        for s in changes:
            runs_all = sum(v for k, v in s["writes"].items() if "runs/status" in k)
            parts.append(f"{total(s['immediate']):,} / {total(s['writes']):,}"
                         + ("" if s["quiet"] else f" (not quiet in {args.change_cap:g} s)")
                         + f" [{runs_all:,} Run statuses]")
        return "; ".join(parts)
    if key == "spec":
        spec = r.get("spec") or []
        failed = r.get("spec_failed", 0)
        if not spec:
            return f"did not converge in {args.sample_cap:g} s" if failed else skipped(r)
        return (f"{ms(pct(spec, 0.99))} (median {ms(statistics.median(spec))}, n={len(spec)}"
                + (f", {failed} did not converge in {args.sample_cap:g} s" if failed else "") + ")")
    if key == "mint":
        mint = r.get("mint") or []
        failed = r.get("mint_failed", 0)
        if not mint:
            return f"did not converge in {args.sample_cap:g} s" if failed else r.get("idle") or skipped(r)
        return (f"{ms(pct(mint, 0.99))} (median {ms(statistics.median(mint))}, n={len(mint)}"
                + (f", {failed} did not converge in {args.sample_cap:g} s" if failed else "") + ")")
    if key == "ledger":
        rows = r.get("ledger") or {}
        names = {"steady": "as loaded", "cold": "issue 12's Budgets", "issue12": "issue 12's offline fleet"}
        return "<br>".join(f"{names[k]}: {ledger_row(v)}" for k, v in rows.items()) or "not measured"
    if key == "cold":
        if "converged" not in r:
            return r.get("cold", "not measured")
        writes = r["cold_writes"]
        idle = (f"idle at {r['idle_after']:.0f} s" if "idle_after" in r else r.get("not_idle", ""))
        return (f"{r['converged']:.1f} s (synced {r['synced']:.1f} s; {total(writes):,} writes, "
                f"{total(writes) / max(r['converged'] - r['synced'], 0.001):,.0f}/s after sync; {idle})")
    if key == "idle":
        if "idle_writes" not in r:
            return r.get("idle") or skipped(r)
        return (f"**{total(r['idle_writes'])}** ({by_resource(r['idle_writes'])}; start-up pass of the keeper over "
                f"the converged fleet, {r['restart']:.0f} s"
                + ("" if r["idle_quiet"] else f": not idle in {args.keeper_cap:g} s, the writes by then") + ")")
    if key == "equal":
        eq = r.get("equal")
        if eq is None:
            return skipped(r)
        same = lambda kind: sum(not d.startswith(kind) for d in eq["differ"])  # noqa: E731
        envelopes = eq["envelopes"] - (len(eq["differ"]) - same("envelope"))
        runs = eq["runs"] - (len(eq["differ"]) - same("run"))
        return (f"{envelopes:,} of {eq['envelopes']:,} envelopes = `budgets usage -o json`; {runs} of {eq['runs']} "
                f"sampled Runs = `plan -o json`" + (f" (differ: {', '.join(eq['differ'][:5])})" if eq["differ"] else ""))
    if key == "rss":
        parts = [f"{r['hwm1']:,} MB (status path)"] if "hwm1" in r else []
        parts += [f"{r['hwm2']:,} MB (--manage-leases)"] if "hwm2" in r else []
        return ", ".join(parts) or "not measured"
    raise KeyError(key)


ROWS = (
    ("changes", "writes caused by one lease change (immediately / in all) [Runs among them]"),
    ("spec", "run spec → status, p99"),
    ("mint", "new Run → its leases minted (`--manage-leases`), p99"),
    ("ledger", "ledger pass offline"),
    ("cold", "cold start: every status written"),
    ("idle", "idle resync writes"),
    ("rss", "RSS (VmHWM)"),
    ("equal", "status = the reports of the same objects (after the cold start)"),
)


def report(results: list[dict], args, help_text: str, commit: str, elapsed: float, sizes: list[int]) -> None:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    flags = {f: flag_default(help_text, f) for f in ("--status-interval", "--kube-api-qps", "--kube-api-burst")}
    found = "; ".join(f"`{f}` {'absent' if d is None else 'default ' + (d or '(none printed)')}"
                      for f, d in flags.items())
    if flags["--status-interval"] is not None and args.status_interval is not None:
        found += f"; passed `--status-interval {args.status_interval:g}s`"
    print(f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {commit} on {cpu}, {os.cpu_count()} cores "
          f"(shared with other work); Python {platform.python_version()}; `python -m bench.bench_scale "
          f"{' '.join(args.argv)}` ({elapsed:.0f} s in all). Reconciler flags found: {found}.")
    print()
    for r in results:
        print(f"- {r['runs']:,} runs: live {r['live_seconds']:.0f} s, offline {r['offline_seconds']:.0f} s, "
              f"load {r['load_size']:.0f} s; load average {r['load_start']} at the start, {r['load_end']} at the end")
    print()
    head = " | ".join(f"{r['runs']:,} runs / {r['leases']:,} leases" for r in results)
    print(f"| measure | {head} | target (1,000 / 10,000) |")
    print("|---|" + "---|" * len(results) + "---|")
    for key, label in ROWS:
        target = " / ".join(TARGETS[key]) if TARGETS[key][1] != "same" else TARGETS[key][0] + " (both)"
        print(f"| {label} | " + " | ".join(cell(r, key, args) for r in results) + f" | {target} |")
    print()
    for r in results:
        for s in r.get("changes") or []:
            print(f"- {r['runs']:,} runs, {s['what']}: within {args.immediate:g} s {by_resource(s['immediate'])}; "
                  f"in all ({s['elapsed']:.0f} s) {by_resource(s['writes'])}")
        if "cold_writes" in r:
            print(f"- {r['runs']:,} runs, cold start writes: {by_resource(r['cold_writes'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="1000,10000", help="fleet sizes, multiples of 100, ascending")
    parser.add_argument("--quick", action="store_true", help="100 runs, few samples, short caps (< 2 min)")
    parser.add_argument("--changes", type=int, default=2, help="lease changes per size (close, replace, …)")
    parser.add_argument("--spec-samples", type=int, default=10, help="run spec changes per size")
    parser.add_argument("--mint-samples", type=int, default=3, help="new Runs per size (--manage-leases)")
    parser.add_argument("--immediate", type=float, default=2.0, help="seconds counted as 'immediately'")
    parser.add_argument("--quiet", type=float, default=30.0, help="seconds without a write that end a lease change")
    parser.add_argument("--status-interval", type=float,
                        help="pass --status-interval Ns to the reconciler (when it has the flag); default: its own")
    parser.add_argument("--cold-cap", type=float, default=2400, help="seconds a cold start may take")
    parser.add_argument("--change-cap", type=float, default=900, help="seconds one lease change may take")
    parser.add_argument("--sample-cap", type=float, default=300, help="seconds one spec/mint sample may take")
    parser.add_argument("--keeper-cap", type=float, default=600,
                        help="seconds the --manage-leases start-up pass over the converged fleet may take")
    parser.add_argument("--ledger-cap", type=float, default=600, help="seconds one offline ledger pass may take")
    parser.add_argument("--threads", type=int, default=24, help="loader threads")
    parser.add_argument("--load-through-api", action="store_true",
                        help="create every object through the API server (~200/s here) instead of writing the "
                             "custom resources straight into etcd")
    parser.add_argument("--no-manage-leases", action="store_true", help="skip phase 2")
    parser.add_argument("--no-offline", action="store_true", help="skip the offline ledger passes")
    parser.add_argument("--measure-unconverged", action="store_true",
                        help="measure the rest even when the cold start did not converge")
    parser.add_argument("--offline-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.offline_child:
        blocks, variant = args.offline_child.split(":")
        return offline_child(int(blocks), variant, args.ledger_cap)
    if args.quick:
        args.runs = "100"
        args.changes, args.spec_samples, args.mint_samples = 2, 5, 3
        args.quiet, args.cold_cap, args.change_cap, args.sample_cap, args.ledger_cap = 3, 60, 60, 30, 30
        args.keeper_cap = 60
        if args.status_interval is None:
            args.status_interval = 5.0  # when the reconciler has the flag: a short window keeps --quick short
    sizes = [int(x) for x in args.runs.split(",")]
    if any(s % 100 or s <= 0 for s in sizes) or sizes != sorted(sizes):
        parser.error("--runs: ascending multiples of 100")
    help_text = reconcile_help()
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()  # noqa: E731
    commit = f"{git('rev-parse', '--short', 'HEAD')} (kubectl_runs/ last changed in " \
             f"{git('log', '-1', '--format=%h', '--', 'kubectl_runs')}" \
             f"{', with local changes' if git('status', '--porcelain', '--', 'kubectl_runs') else ''})"
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    log(f"logs in {work}; load average {load_average()}")
    started = time.monotonic()
    results = []
    # etcd's default 2 GiB backend quota leaves little room once 230,000 objects and the revisions of
    # thousands of status rewrites accumulate between the API server's compactions (every 5 minutes)
    with ControlPlane(etcd_args=["--quota-backend-bytes=8589934592"]) as cp:
        cp.kubectl("apply", "-f", str(ROOT / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        loader = Loader(cp, args.threads)
        loaded = 0
        for runs in sizes:
            blocks = runs // 100
            objects = scale_fleet.fleet(range(loaded, blocks), NOW)
            t0 = time.monotonic()
            loader.upload(objects, None if args.load_through_api else cp.etcd_url, created=NOW)
            load_size = time.monotonic() - t0
            log(f"loaded {len(objects):,} objects (blocks {loaded}–{blocks - 1}) in {load_size:.0f} s "
                f"({len(objects) / load_size:,.0f}/s); load average {load_average()}")
            loaded = blocks
            del objects
            result = measure(cp, blocks, args, work, help_text)
            result["load_size"] = load_size
            results.append(result)
            (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    report(results, args, help_text, commit, time.monotonic() - started, sizes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
