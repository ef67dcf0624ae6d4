"""The fleet of issue 27's benchmarks (bench/bench_scale.py), in blocks of 100 runs: issue 12's fleet
(bench/bench_reconcile.py) grown to 10,000 runs / 200,000 leases with the same proportions.

    .venv/bin/python -m bench.generate --size runs10k -o /tmp/runs10k.json    # the same fleet as a snapshot file

Per block of 100 runs, one namespace ``team<block>`` with one Budget ``main`` of owner ``team<block>`` (one
segment: no parent, so no siblings — no team's headroom funds another's runs) and one envelope of flavor H100
whose window covers now ± 30 days:

- 65 **Running** runs of 20 GPUs (20 groups of 1 GPU, one open GPULease each: 1,300 open leases),
- 30 **Succeeded** runs with their closed history (700 closed leases),
- 5 **Pending** runs of 16 GPUs (no lease),

so 100 runs carry 2,000 leases, 1,000 runs 20,000 and 10,000 runs 200,000, exactly as in issue 12's fleet.
Each block has its own 173 Nodes of 8 GPUs: 163 hold its open leases (1,300 GPUs), 10 are free (80 GPUs: its
Pending runs would fit), in fabric domains of 64 nodes numbered across the fleet.

What differs from issue 12's fleet, and why: there, 10 namespaces held every block (so 10,000 runs would overdraw
their Budgets) and the Pending runs were placeable and funded — Pending only because no ledger keeper ran. Here
the namespaces grow with the fleet (one per block: each team looks the same at every size) and each Budget's
concurrency is its open GPUs + 12 (``HEADROOM``): a Pending run (16 GPUs) is short of funding by 4, so the ledger
keeper (``--manage-leases``) has nothing to do on the fleet as loaded — no lease to mint, no Reservation to make
(a Run short of funding with no forecast gets none) — while a new 4-GPU Run fits at once. A lease change in a
namespace moves its headroom, so its 5 Pending runs' deficits are "the pending Runs whose figures changed"; the
flavor's free GPUs move too (the ``Placeable`` message of every unfinished Run quoted them before issue 27).

``budget_gpus=COLD_BUDGET`` gives issue 12's Budgets instead (2 × 1,300 + 400): every Pending run is fundable, so
a ledger pass mints all of them (80 GPULeases per block) — the offline "pass with work" of bench_scale.
"""

from __future__ import annotations

from datetime import datetime, timedelta

API_VERSION = "jobtree.dev/v1alpha1"
FLAVOR = "H100"
RUN_GPUS = 20
PENDING_GPUS = 16
RUNNING, SUCCEEDED, PENDING = 65, 30, 5  # per block of 100
OPEN_GPUS = RUNNING * RUN_GPUS  # 1,300 per block
HEADROOM = 12  # < PENDING_GPUS: the Pending runs are short of funding; a 4-GPU probe Run fits
COLD_BUDGET = 2 * OPEN_GPUS + 400  # issue 12's Budgets: every Pending run fundable
NODE_GPUS = 8
BUSY_NODES = -(-OPEN_GPUS // NODE_GPUS)  # 163
FREE_NODES = 10  # 80 GPUs: room for the block's Pending runs
NODES_PER_BLOCK = BUSY_NODES + FREE_NODES
DOMAIN_NODES = 64


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def namespace(block: int) -> str:
    return f"team{block}"


def node_name(block: int, index: int) -> str:
    return f"n{block:03d}-{index:03d}"


def run_name(block: int, index: int) -> str:
    return f"b{block:02d}-r{index:02d}"


def lease(name: str, ns: str, run: str, group: int, slots: list[str], start: datetime) -> dict:
    return {"apiVersion": API_VERSION, "kind": "GPULease", "metadata": {"name": name, "namespace": ns},
            "spec": {"owner": ns, "runRef": {"namespace": ns, "name": run}, "group": group,
                     "flavor": FLAVOR, "slice": {"slots": slots, "role": "Active"},
                     "paidBy": {"budget": "main", "envelope": "main"}, "start": iso(start), "reason": "Start"}}


def block_objects(block: int, now: datetime, budget_gpus: int | None = None) -> list[dict]:
    """Every object of one block (Budget, 100 Runs, 2,000 GPULeases, 173 Nodes), statuses included."""
    ns = namespace(block)
    objects: list[dict] = []
    window = {"start": iso(now - timedelta(days=30)), "end": iso(now + timedelta(days=30))}
    objects.append({"apiVersion": API_VERSION, "kind": "Budget", "metadata": {"name": "main", "namespace": ns},
                    "spec": {"owner": ns, "envelopes": [
                        {"name": "main", "flavor": FLAVOR, "concurrency": budget_gpus or OPEN_GPUS + HEADROOM,
                         **window}]}})
    gpu = 0
    for i in range(100):
        name = run_name(block, i)
        meta = {"name": name, "namespace": ns}
        spec = {"resources": {"gpuType": FLAVOR, "totalGPUs": RUN_GPUS}, "locality": {"groupGPUs": 1}}
        if i < RUNNING:
            objects.append({"apiVersion": API_VERSION, "kind": "Run", "metadata": meta, "spec": spec})
            for g in range(RUN_GPUS):
                slot = f"{node_name(block, gpu // NODE_GPUS)}#{gpu % NODE_GPUS}"
                objects.append(lease(f"{name}-g{g:02d}", ns, name, g, [slot], now - timedelta(hours=2 + i % 7)))
                gpu += 1
        elif i < RUNNING + SUCCEEDED:
            idx = i - RUNNING
            objects.append({"apiVersion": API_VERSION, "kind": "Run", "metadata": meta, "spec": spec,
                            "status": {"phase": "Succeeded"}})
            for g in range(24 if idx >= 20 else 23):  # 20 × 23 + 10 × 24 = 700 closed leases
                # one node per idx % 8, one day per idx // 8, one hour per g: no two overlap on a slot
                start = now - timedelta(days=25) + timedelta(hours=24 * (idx // 8) + g)
                item = lease(f"{name}-h{g:02d}", ns, name, g % RUN_GPUS,
                             [f"{node_name(block, idx % 8)}#{g % NODE_GPUS}"], start)
                item["status"] = {"closed": True, "ended": iso(start + timedelta(minutes=50)),
                                  "closureReason": "Completed"}
                objects.append(item)
        else:
            objects.append({"apiVersion": API_VERSION, "kind": "Run", "metadata": meta,
                            "spec": {**spec, "resources": {"gpuType": FLAVOR, "totalGPUs": PENDING_GPUS}}})
    for n in range(NODES_PER_BLOCK):
        index = block * NODES_PER_BLOCK + n
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node_name(block, n),
                                     "labels": {"gpu.flavor": FLAVOR, "fabric.domain": f"d{index // DOMAIN_NODES}"}},
                        "status": {"allocatable": {"nvidia.com/gpu": str(NODE_GPUS), "cpu": "96"},
                                   "capacity": {"nvidia.com/gpu": str(NODE_GPUS), "cpu": "96"}}})
    return objects


def fleet(blocks: range, now: datetime, budget_gpus: int | None = None) -> list[dict]:
    out: list[dict] = []
    for block in blocks:
        out.extend(block_objects(block, now, budget_gpus))
    return out


def snapshot_document(blocks: int, now: datetime, budget_gpus: int | None = None) -> dict:
    """The fleet as a snapshot file's JSON ``List`` (API.md §2), stamped with its time."""
    return {"apiVersion": "v1", "kind": "List",
            "metadata": {"annotations": {"jobtree.dev/snapshot-time": iso(now)}},
            "items": fleet(range(blocks), now, budget_gpus)}
