"""Issue 29's speed target: `kubectl runs pending` over 10,000 pods and 4,000 nodes within 1.5 × the decode of the
same snapshot, measured side by side in one run (this machine is shared: only the ratio means anything).

    .venv/bin/python -m bench.bench_pending [--nodes 4000] [--pods 10000] [--repeats 5]
    .venv/bin/python -m bench.bench_pending --dra-nodes 1000 --dra-pods 500      # and GPUs claimed through DRA

The fleet (``pods_fleet``): nodes of 8 GPUs in three pools and 16 zones, one in 20 tainted, one in 50 cordoned;
60 % of the pods bound (1–8 GPUs each, as the nodes have room), the rest pending in Jobs of 5 replicas asking
1, 2, 4 or 8 GPUs, some with a pool selector or a toleration. Both sides run in this process: the decode is
``load_snapshot`` of the JSON file (what every command pays first); pending is ``pending_report`` on it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from kubectl_runs.pods.pending import pending_report
from kubectl_runs.sources.files import load_snapshot

AT = datetime(2025, 11, 20, 12, 0, tzinfo=UTC)
POOLS = ("train", "serve", "infer")


def pods_fleet(nodes: int, pods: int, seed: int = 29) -> list[dict]:
    rng = random.Random(seed)
    items: list[dict] = []
    free: dict[str, int] = {}
    for i in range(nodes):
        name = f"gpu-{i:05d}"
        spec: dict = {}
        if i % 20 == 7:
            spec["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
        if i % 50 == 13:
            spec["unschedulable"] = True
        items.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {"pool": POOLS[i % 3], "zone": f"z{i % 16}",
                                                            "gpu.flavor": "H100"}},
                      "spec": spec,
                      "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti",
                                                 "pods": "110"}}})
        free[name] = 8
    names = list(free)
    bound = int(pods * 0.6)
    for i in range(bound):
        node = rng.choice(names)
        want = min(rng.choice((1, 2, 4, 8)), free[node])
        if want == 0:
            continue
        free[node] -= want
        items.append(_pod(f"run-{i:05d}", f"ns{i % 40}", want, node_name=node, owner=("ReplicaSet", f"svc{i % 300}"),
                          phase="Running"))
    for i in range(pods - bound):
        job = i // 5
        extra: dict = {}
        if job % 4 == 1:
            extra["nodeSelector"] = {"pool": POOLS[job % 3]}
        if job % 10 == 3:
            extra["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        items.append(_pod(f"job{job:04d}-{i % 5}", f"ns{job % 40}", (1, 2, 4, 8, 16)[job % 5],
                          owner=("Job", f"job{job:04d}"), **extra))
    return items


def dra_fleet(nodes: int, pods: int) -> list[dict]:
    """GPUs claimed through DRA: ``nodes`` nodes without GPU extended resources, each publishing 8 devices of driver
    gpu.nvidia.com (one ResourceSlice), a GPU DeviceClass, and ``pods`` pending pods in Jobs of 50 that claim 16
    devices each through one ResourceClaimTemplate (more than a node publishes: ExceedsNodeCapacity)."""
    items: list[dict] = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                          "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}},
                         {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                          "metadata": {"name": "sixteen", "namespace": "dra"},
                          "spec": {"spec": {"devices": {"requests": [
                              {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 16}}]}}}}]
    for i in range(nodes):
        name = f"dra-{i:05d}"
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                      "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110"}}})
        items.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-gpus"},
                      "spec": {"driver": "gpu.nvidia.com", "nodeName": name, "pool": {"name": name, "generation": 1},
                               "devices": [{"name": f"gpu-{d}"} for d in range(8)]}})
    for i in range(pods):
        items.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"sim{i // 50:03d}-{i % 50}", "namespace": "dra",
                                   "creationTimestamp": "2025-11-20T10:00:00Z",
                                   "ownerReferences": [{"kind": "Job", "name": f"sim{i // 50:03d}", "controller": True}]},
                      "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "sixteen"}],
                               "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}]},
                      "status": {"phase": "Pending"}})
    return items


def _pod(name: str, ns: str, gpus: int, *, node_name: str = "", owner: tuple[str, str], phase: str = "Pending",
         **spec) -> dict:
    body = {"containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "4"}}}],
            **spec}
    if node_name:
        body["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2025-11-20T10:00:00Z",
                         "ownerReferences": [{"kind": owner[0], "name": owner[1], "controller": True}]},
            "spec": body, "status": {"phase": phase}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dra-nodes", type=int, default=0, help="add nodes whose GPUs are published through DRA")
    parser.add_argument("--dra-pods", type=int, default=0, help="add pending pods that claim GPUs through DRA")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "pods.json")
        with open(path, "w") as out:
            items = pods_fleet(args.nodes, args.pods) + dra_fleet(args.dra_nodes, args.dra_pods)
            json.dump({"apiVersion": "v1", "kind": "List", "items": items}, out)
        decode, pending = [], []
        rows = 0
        for _ in range(args.repeats):  # alternating, so that a busy moment hits both
            start = time.perf_counter()
            snapshot = load_snapshot([path])
            decode.append(time.perf_counter() - start)
            start = time.perf_counter()
            rows = len(pending_report(snapshot, AT).rows)
            pending.append(time.perf_counter() - start)
        d, p = statistics.median(decode), statistics.median(pending)
        dra = f" + {args.dra_nodes:,} DRA nodes, {args.dra_pods:,} DRA pods" if args.dra_nodes or args.dra_pods else ""
        print(f"{args.nodes:,} nodes{dra}, {len(snapshot.pods.pods):,} pods ({rows:,} pending rows); load average "
              f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        print(f"decode {d * 1000:,.0f} ms, pending {p * 1000:,.0f} ms (median of {args.repeats}): "
              f"pending ÷ decode = {p / d:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
