"""Status that changes when facts change, counted by the API server (#27). A fleet of 40 Running Runs and 8 pending
ones in one flavor; once the reconciler (``--status-interval 6s``) has converged, one GPULease of a pending Run is
created. Within 2 s the API server sees only the writes of facts: that Run's status (it starts), its Budget's
usage — no Running Run is rewritten. The other pending Runs' figures (16 free GPUs became 8; they need 64) are written once, after the
interval, with the values of then; and every status still equals ``kubectl runs plan`` / ``budgets usage``."""

from __future__ import annotations

import time

import pytest
from reconciler_harness import (
    API,
    Reconciler,
    budget,
    control_plane,
    create,
    delta,
    get,
    lease,
    node,
    run,
    run_plugin_json,
    status_patches,
    wait_for,
)

NS, OWNER, FLAVOR = "fleet", "org:fleet", "H100"
RUNNING, PENDING, INTERVAL = 40, 8, 6.0


@pytest.fixture(scope="module")
def cp():
    with control_plane(NS) as plane:
        nodes = [node(f"n{i:02d}", flavor=FLAVOR) for i in range(RUNNING + 2)]  # 8 GPUs each: 16 free
        runs = [run(f"busy-{i:02d}", NS, flavor=FLAVOR, gpus=8) for i in range(RUNNING)]
        runs += [run(f"wait-{i}", NS, flavor=FLAVOR, gpus=64 if i else 8) for i in range(PENDING)]  # 64 never fit
        leases = [lease(f"busy-{i:02d}-g0", NS, owner=OWNER, run_name=f"busy-{i:02d}", flavor=FLAVOR,
                        slots=[f"n{i:02d}#{k}" for k in range(8)], budget_name="fleet") for i in range(RUNNING)]
        create(plane, [*nodes, budget("fleet", NS, owner=OWNER, flavor=FLAVOR, concurrency=1000), *runs, *leases])
        yield plane


def test_one_lease_change_writes_facts_at_once_and_figures_once_per_interval(cp, tmp_path):
    proc = Reconciler(cp, "--no-leader-elect", "--metrics-addr", "0", "--resync-period", "1h",
                      "--status-interval", f"{INTERVAL:g}s", log_dir=tmp_path)
    try:
        runs = [f"busy-{i:02d}" for i in range(RUNNING)] + [f"wait-{i}" for i in range(PENDING)]
        wait_for("every Run has status", lambda: all(
            get(cp, f"{API}/namespaces/{NS}/runs/{name}").get("status", {}).get("plan") for name in runs), timeout=60)
        time.sleep(INTERVAL + 2)  # quiet: nothing left to write
        before = status_patches(cp)
        create(cp, [lease("wait-0-g0", NS, owner=OWNER, run_name="wait-0", flavor=FLAVOR,
                          slots=[f"n{RUNNING:02d}#{k}" for k in range(8)], budget_name="fleet")])
        wait_for("wait-0 runs", lambda: get(cp, f"{API}/namespaces/{NS}/runs/wait-0")
                 .get("status", {}).get("phase") == "Running", timeout=10)
        time.sleep(1.5)
        at_once = delta(status_patches(cp), before)
        assert at_once["runs"] <= 2 and at_once["budgets"] <= 1, at_once  # the Run (and a Budget), nothing else
        assert sum(at_once.values()) <= 5, at_once
        time.sleep(INTERVAL + 3)
        after = delta(status_patches(cp), before)
        # each other pending Run's figures moved ("only 16 of 64 fit" became 8): written once, after the interval
        assert after["runs"] <= 1 + (PENDING - 1) + 1, after
        assert after["runs"] - at_once["runs"] >= 1, after  # the deferred figures did arrive
        for i in range(RUNNING):
            status = get(cp, f"{API}/namespaces/{NS}/runs/busy-{i:02d}")["status"]
            assert status["phase"] == "Running"
        for i in range(1, PENDING):
            name = f"wait-{i}"
            plan = run_plugin_json(cp, "plan", f"{NS}/{name}", "-o", "json")
            stored = get(cp, f"{API}/namespaces/{NS}/runs/{name}")["status"]["plan"]
            assert stored["deficitGPUs"] == plan["deficitGPUs"], (name, stored, plan)
            assert stored["capacityDeficitGPUs"] == plan["capacityDeficitGPUs"], (name, stored, plan)
    finally:
        assert proc.stop() == 0
