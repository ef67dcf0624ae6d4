"""Issue 27 at the benchmark's largest size: on 10,000 Runs / 200,000 GPULeases (bench/scale_fleet.py's fleet,
the one bench/bench_scale.py measures), the status the reconciler writes equals ``budgets usage -o json`` and
``plan NS/NAME -o json`` of the same objects — checked here, not only in the benchmark's table.

The fleet is loaded as the benchmark loads it (tests/controlplane/bulk_load.py: the jobtree.dev objects straight
into the control plane's etcd, the 17,300 Nodes and the namespaces through the API server) into a control plane
of this module's own (the reconciler writes status to every object it sees; etcd's backend quota raised as the
benchmark does). ``kubectl runs reconcile`` then runs as a user runs it — ``python -m kubectl_runs reconcile
--no-leader-elect``, its own process, admin's kubeconfig — with two departures from its defaults, both to keep
the test short, neither changing what it writes: ``--kube-api-qps 1000 --kube-api-burst 1000`` (at the default
50 QPS the cold start's 10,100 status writes alone take ≥ 202 s; bench/RESULTS.md's 248.7 s cold start) and
``--resync-period 1h`` (no periodic full pass while the test reads the cluster, as in the benchmark). The test
waits until every Run has ``status.plan`` and the reconciler is idle (its work queue empty — deferred
``--status-interval`` writes included — and its CPU still), stops it, saves the cluster once with ``kubectl runs
snapshot save`` and runs the reports on that file, so status and reports read the same objects:

- every Budget's status envelopes against every row of ``budgets usage -o json`` (bench_scale.ENVELOPE_FIELDS:
  consumedGPUHours aside, it is "as of updatedAt" and moves with the clock), both ways (no envelope missing);
- a sample of Runs — Running, Succeeded and Pending ones in several namespaces — against ``plan NS/NAME -o
  json`` (``plan`` takes one Run): the deficits, the width, the reasons and the remedies (their messages through
  ``stable_text``, as the reconciler stores them).

The comparison is checked against itself too: a copy of the stored statuses with one envelope and one Run
altered must show exactly those two differences."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bulk_load import Loader, runs_without_status
from reconciler_harness import ROOT, Reconciler, control_plane, now, wait_for

from kubectl_runs.reconciler.status import stable_text

sys.path.insert(0, str(ROOT))  # bench/ is the repository's, not installed
from bench import scale_fleet

BLOCKS = 100  # × 100 Runs / 2,000 GPULeases / 173 Nodes: 10,000 Runs, 200,000 GPULeases, 17,300 Nodes
NOW = now()

RECONCILE = ("--no-leader-elect", "--metrics-addr", "127.0.0.1:0", "--resync-period", "1h",
             "--kube-api-qps", "1000", "--kube-api-burst", "1000")
ENVELOPE_FIELDS = ("windowActive", "concurrency", "usedGPUs", "headroomGPUs", "ownedGPUs", "sharedGPUs", "borrowedGPUs",
                   "unfundedGPUs", "spareGPUs")  # as bench_scale.ENVELOPE_FIELDS
PLAN_FIELDS = ("deficitGPUs", "capacityDeficitGPUs", "fundingDeficitGPUs")
RUNNING, SUCCEEDED, PENDING = (range(0, scale_fleet.RUNNING),
                               range(scale_fleet.RUNNING, scale_fleet.RUNNING + scale_fleet.SUCCEEDED),
                               range(scale_fleet.RUNNING + scale_fleet.SUCCEEDED, 100))
# (block, index in the block): a Running, a Succeeded and a Pending Run in each of four namespaces spread over the
# fleet, alternately the first and the last of their phase (each ``plan`` decodes the whole snapshot: ~9 s here)
SAMPLE = [(block, phase[0] if i % 2 == 0 else phase[-1])
          for i, block in enumerate(sorted({0, BLOCKS // 3, 2 * BLOCKS // 3, BLOCKS - 1}))
          for phase in (RUNNING, SUCCEEDED, PENDING)]
PHASES = {**dict.fromkeys(RUNNING, "Running"), **dict.fromkeys(SUCCEEDED, "Succeeded"),
          **dict.fromkeys(PENDING, "Pending")}


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def fleet():
    # etcd's default 2 GiB backend quota leaves little room for 230,000 objects and the revisions of their
    # status writes between the API server's compactions (as bench_scale)
    with control_plane(etcd_args=["--quota-backend-bytes=8589934592"]) as cp:
        objects = scale_fleet.fleet(range(BLOCKS), NOW)
        started = time.monotonic()
        Loader(cp).upload(objects, cp.etcd_url, created=NOW, log=log)
        log(f"loaded {len(objects):,} objects in {time.monotonic() - started:.0f} s")
        del objects
        code, node = cp.request("GET", f"/api/v1/nodes/{scale_fleet.node_name(BLOCKS - 1, 0)}")
        assert code == 200 and node["status"]["allocatable"]["nvidia.com/gpu"] == str(scale_fleet.NODE_GPUS), node
        yield cp


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def queue_depth(proc: Reconciler) -> float:
    line = next(x for x in proc.metrics().splitlines() if x.startswith("jobtree_workqueue_depth "))
    return float(line.split()[1])


def idle(proc: Reconciler, window: float = 2.0) -> bool:
    """Work queue empty (deferred writes are delayed keys in it), and under 0.1 CPU-s over ``window``."""
    if queue_depth(proc):
        return False
    before = cpu_seconds(proc.proc.pid)
    time.sleep(window)
    return cpu_seconds(proc.proc.pid) - before < 0.1 and not queue_depth(proc)


@pytest.fixture(scope="module")
def converged(fleet, tmp_path_factory):
    """The reconciler started over the loaded fleet, run until every Run has status and it is idle, stopped."""
    cp = fleet
    proc = Reconciler(cp, *RECONCILE, log_dir=tmp_path_factory.mktemp("reconcile-10k"), name="reconcile-10k")
    started = time.monotonic()
    try:
        proc.wait_log("msg=synced", timeout=300)
        synced = time.monotonic() - started
        log(f"reconciler synced in {synced:.0f} s")
        runs = BLOCKS * 100

        def written() -> bool:  # its log first (one line per write), then the API server's objects
            if proc.proc.poll() is not None:
                raise AssertionError("the reconciler exited:\n" + "\n".join(proc.lines()[-30:]))
            lines = proc.writes()
            if sum("kind=Run " in x for x in lines) < runs or sum("kind=Budget " in x for x in lines) < BLOCKS:
                return False
            return runs_without_status(cp, page=2000) == (0, runs)

        wait_for("a status on every Run", written, timeout=600, every=2.0)
        statuses = time.monotonic() - started
        wait_for("the reconciler to be idle", lambda: idle(proc), timeout=120, every=0.5)
        log(f"every Run's status after {statuses:.0f} s ({len(proc.writes()):,} writes), idle after "
            f"{time.monotonic() - started:.0f} s")
        failed = [x for x in proc.writes() if "outcome=ok" not in x]
        assert not failed, failed[:5]
    finally:
        assert proc.stop() == 0, "\n".join(proc.lines()[-30:])
    return cp


def plugin(cp, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          env=dict(os.environ, KUBECONFIG=cp.admin_kubeconfig), timeout=600, cwd=str(ROOT))
    assert done.returncode == 0, f"kubectl runs {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout


def differences(stored: dict, usage: list[dict], plans: dict[tuple[str, str], dict]) -> list[str]:
    """Where the stored statuses (``stored``: (kind, namespace, name) → status) differ from ``budgets usage``'s
    rows and ``plan``'s documents, one line each."""
    out = []
    rows = {(r["namespace"], r["budget"], r["envelope"]): r for r in usage}
    envelopes = {(ns, name, e.get("name")): e for (kind, ns, name), status in stored.items() if kind == "Budget"
                 for e in status.get("envelopes") or []}
    for key in sorted(rows.keys() | envelopes.keys()):
        row, mine = rows.get(key), envelopes.get(key)
        if row is None or mine is None:
            out.append(f"envelope {'/'.join(key)}: {'not in budgets usage' if row is None else 'not in status'}")
            continue
        out.extend(f"envelope {'/'.join(key)} {f}: status {mine.get(f)!r}, budgets usage {row[f]!r}"
                   for f in ENVELOPE_FIELDS if mine.get(f) != row[f])
    for (ns, name), plan in sorted(plans.items()):
        status = stored.get(("Run", ns, name)) or {}
        mine = status.get("plan") or {}
        checks = {f: (mine.get(f), plan[f]) for f in PLAN_FIELDS}
        checks["width"] = (status.get("width"), plan["width"])
        checks["reasons"] = (mine.get("reasons"),
                             [{**r, "message": stable_text(r["message"])} for r in plan["reasons"]])
        checks["remedies"] = (mine.get("remedies"),
                              [{**r, "message": stable_text(r["message"])} for r in plan["remedies"]])
        out.extend(f"run {ns}/{name} {f}: status {a!r}, plan {b!r}" for f, (a, b) in checks.items() if a != b)
    return out


def test_status_equals_budgets_usage_and_plan_at_10000_runs(converged, tmp_path):
    cp = converged
    started = time.monotonic()
    path = tmp_path / "converged.json"
    plugin(cp, "snapshot", "save", "-f", str(path))
    items = json.loads(path.read_text())["items"]
    assert sum(o["kind"] == "GPULease" for o in items) == BLOCKS * 2000
    stored = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o.get("status") or {}
              for o in items if o["kind"] in ("Budget", "Run")}
    del items
    saved = time.monotonic() - started

    def plan(sample: tuple[int, int]) -> tuple[tuple[str, str], dict]:
        ns, name = scale_fleet.namespace(sample[0]), scale_fleet.run_name(*sample)
        return (ns, name), json.loads(plugin(cp, "plan", f"{ns}/{name}", "--snapshot", str(path), "-o", "json"))

    with ThreadPoolExecutor(max_workers=2) as pool:
        planned = pool.map(plan, SAMPLE)
        usage = json.loads(plugin(cp, "budgets", "usage", "--snapshot", str(path), "-o", "json"))["envelopes"]
        plans = dict(planned)
    log(f"snapshot saved in {saved:.0f} s; budgets usage and {len(plans)} plans in "
        f"{time.monotonic() - started - saved:.0f} s")

    assert len(usage) == BLOCKS and sum(kind == "Budget" for kind, _, _ in stored) == BLOCKS
    assert sum(kind == "Run" for kind, _, _ in stored) == BLOCKS * 100
    # the sample covers each phase, as stored
    phases = {stored[("Run", ns, name)].get("phase") for ns, name in plans}
    assert phases == {"Running", "Succeeded", "Pending"}, phases
    for block, index in SAMPLE:
        ns, name = scale_fleet.namespace(block), scale_fleet.run_name(block, index)
        assert stored[("Run", ns, name)].get("phase") == PHASES[index], (ns, name)

    differ = differences(stored, usage, plans)
    assert not differ, f"{len(differ)} differences:\n" + "\n".join(differ[:40])
    print(f"\n{len(usage)} envelopes = budgets usage -o json, {len(plans)} sampled Runs = plan -o json "
          f"(snapshot save {saved:.0f} s, reports {time.monotonic() - started - saved:.0f} s)")

    # the comparison sees a difference where there is one
    altered = copy.deepcopy(stored)
    budget = ("Budget", scale_fleet.namespace(BLOCKS // 2), "main")
    altered[budget]["envelopes"][0]["usedGPUs"] += 1
    ns, name = scale_fleet.namespace(0), scale_fleet.run_name(0, PENDING[0])
    altered[("Run", ns, name)]["plan"]["fundingDeficitGPUs"] += 1
    assert [line.split(":")[0] for line in differences(altered, usage, plans)] == [
        f"envelope {budget[1]}/main/main usedGPUs", f"run {ns}/{name} fundingDeficitGPUs"]
