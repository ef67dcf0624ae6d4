"""`kubectl runs queues usage` on a large Kueue fleet ÷ the typed decode of the same snapshot (issue 13: ≤ 1.5).

    python -m bench.bench_queues                   # 500 ClusterQueues, 50,000 Workloads; 5 rounds
    python -m bench.bench_queues --repeats 9 --cluster-queues 500 --workloads 50000
    python -m bench.bench_queues --in-full         # for reference: the command reading every Workload in full

The fleet (written once to bench/out/, git-ignored): 50 Cohorts of 10 ClusterQueues; each queue covers cpu and
memory (flavor default), nvidia.com/gpu in h100 then a100, and amd.com/gpu in mi300x, with lending limits on
some and borrowing limits on others; one LocalQueue per queue; 1,000 GPU nodes; Workloads of one or two pod
sets (1–4 pods of 1, 2, 4 or 8 GPUs, with cpu and memory), 60 % holding quota (admission written as Kueue writes
it), the rest pending with Kueue's condition. The baseline is bench.run's: read the file and decode it with msgspec
straight into the typed records (every kind, Kueue's included), GC paused. The benchmark is the whole command
(`main([...])` in process: reading the same file, table rendered into a buffer). The command reads the file as it
always does: Workloads lean (``WorkloadHead``: name, queue, conditions, admission; pod sets decoded for the pending
ones only), so it decodes less than the baseline does. ``--in-full`` times instead, for reference, the same
command reading every Workload in full (``Workload``, as every other command reads them), after checking that it
prints the same report. (A run of its own: in one process with the lean command, each changes the other's heap
and the lean command's times moved by a third.) The two alternate in one process; medians and the ratio of the
medians are printed, with the range of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
from pathlib import Path

from bench.run import OUT, _timed, command, decode_baseline, release_loaded

TARGET = 1.5
SEED = 13


def generate(path: Path, cluster_queues: int, workloads: int, seed: int = SEED) -> dict:
    rng = random.Random(seed)
    items: list[dict] = []
    nv_nodes = 700
    amd_nodes = 300
    for i in range(nv_nodes):
        product = "h100" if i % 7 else "a100"
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"nv-{i:04d}", "labels": {
            "gpu.product": product, "kubernetes.io/hostname": f"nv-{i:04d}"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}}})
    for i in range(amd_nodes):
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"amd-{i:04d}", "labels": {
            "gpu.product": "mi300x", "kubernetes.io/hostname": f"amd-{i:04d}"}},
            "status": {"allocatable": {"amd.com/gpu": "8", "cpu": "128", "memory": "2Ti"}}})
    k = "kueue.x-k8s.io/v1beta1"
    for name, labels in (("default", {}), ("h100", {"gpu.product": "h100"}), ("a100", {"gpu.product": "a100"}),
                         ("mi300x", {"gpu.product": "mi300x"})):
        items.append({"apiVersion": k, "kind": "ResourceFlavor", "metadata": {"name": name},
                      "spec": {"nodeLabels": labels}})
    for name, value in (("high", 1000), ("normal", 100), ("low", 10)):
        items.append({"apiVersion": k, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    cohorts = max(1, cluster_queues // 10)
    for c in range(cohorts):
        items.append({"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Cohort", "metadata": {"name": f"cohort-{c:03d}"},
                      "spec": {}})
    for q in range(cluster_queues):
        gpu = {"name": "nvidia.com/gpu", "nominalQuota": rng.choice((8, 16, 32))}
        if q % 3 == 0:
            gpu["lendingLimit"] = gpu["nominalQuota"] // 2
        if q % 4 == 1:
            gpu["borrowingLimit"] = 16
        items.append({"apiVersion": k, "kind": "ClusterQueue", "metadata": {"name": f"cq-{q:04d}"}, "spec": {
            "cohort": f"cohort-{q % cohorts:03d}", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": "512"}, {"name": "memory", "nominalQuota": "4Ti"}]}]},
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                    {"name": "h100", "resources": [gpu]},
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]},
                {"coveredResources": ["amd.com/gpu"], "flavors": [
                    {"name": "mi300x", "resources": [{"name": "amd.com/gpu", "nominalQuota": rng.choice((8, 16))}]}]},
            ]}})
        items.append({"apiVersion": k, "kind": "LocalQueue", "metadata": {"name": "default", "namespace": f"team-{q:04d}"},
                      "spec": {"clusterQueue": f"cq-{q:04d}"}})
    for w in range(workloads):
        q = w % cluster_queues
        ns = f"team-{q:04d}"
        resource_name = "amd.com/gpu" if rng.random() < 0.3 else "nvidia.com/gpu"
        sets = []
        for s in range(rng.choice((1, 1, 1, 2))):
            per_pod = rng.choice((1, 2, 4, 8))
            count = rng.choice((1, 1, 2, 4))
            requests = {resource_name: str(per_pod), "cpu": str(per_pod * 8), "memory": f"{per_pod * 64}Gi"}
            sets.append({"name": f"ps{s}", "count": count, "template": {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "trainer:1",
                                         "resources": {"requests": requests, "limits": requests}}]}}})
        prio_name, prio = rng.choice((("high", 1000), ("normal", 100), ("low", 10)))
        created = f"2025-11-{1 + w % 28:02d}T{w % 24:02d}:{w % 60:02d}:00Z"
        holds = rng.random() < 0.6
        if holds:
            flavor = "mi300x" if resource_name == "amd.com/gpu" else "h100"
            assignments = []
            for ps in sets:
                per = ps["template"]["spec"]["containers"][0]["resources"]["requests"]
                n = ps["count"]
                assignments.append({"name": ps["name"], "count": n,
                                    "flavors": {resource_name: flavor, "cpu": "default", "memory": "default"},
                                    "resourceUsage": {resource_name: str(int(per[resource_name]) * n),
                                                      "cpu": str(int(per["cpu"]) * n),
                                                      "memory": f"{int(per['memory'][:-2]) * n}Gi"}})
            status = {"admission": {"clusterQueue": f"cq-{q:04d}", "podSetAssignments": assignments},
                      "conditions": [
                          {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                           "message": f"Quota reserved in ClusterQueue cq-{q:04d}", "lastTransitionTime": created},
                          {"type": "Admitted", "status": "True", "reason": "Admitted",
                           "message": "The workload is admitted", "lastTransitionTime": created}]}
        else:
            status = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                      "message": "couldn't assign flavors to pod set ps0: insufficient unused quota "
                                                 "for nvidia.com/gpu in flavor h100, 8 more needed",
                                      "lastTransitionTime": created}]}
        items.append({"apiVersion": k, "kind": "Workload", "metadata": {
            "name": f"job-{w:06d}", "namespace": ns, "creationTimestamp": created, "uid": f"uid-{w:06d}",
            "labels": {"kueue.x-k8s.io/queue-name": "default"}},
            "spec": {"queueName": "default", "priorityClassName": prio_name, "priority": prio,
                     "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass", "active": True, "podSets": sets},
            "status": status})
    # As `snapshot save` (and `kubectl get -A`) write them: each kind sorted by namespace and name.
    kinds: dict[str, list[dict]] = {}
    for item in items:
        kinds.setdefault(item["kind"], []).append(item)
    items = [item for group in kinds.values()
             for item in sorted(group, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))]
    doc = {"apiVersion": "v1", "kind": "List",
           "metadata": {"annotations": {"jobtree.dev/snapshot-time": "2025-11-29T00:00:00Z"}}, "items": items}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    meta = {"cluster_queues": cluster_queues, "workloads": workloads, "nodes": nv_nodes + amd_nodes,
            "bytes": path.stat().st_size}
    Path(f"{path}.meta.json").write_text(json.dumps(meta))
    return meta


def in_full(run):
    """``run`` (the command) with the snapshot's Workloads read in full rather than lean: what the command cost
    before it read them lean, for reference."""
    from kubectl_runs.cli.queues import QueuesUsageOptions

    lean_load = QueuesUsageOptions.load

    def full_load(self):
        return self.opts.load(None, queues=True)

    def timed():
        QueuesUsageOptions.load = full_load
        try:
            return run()
        finally:
            QueuesUsageOptions.load = lean_load

    return timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-queues", type=int, default=500)
    parser.add_argument("--workloads", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--in-full", action="store_true",
                        help="time the command reading every Workload in full (not lean), for reference")
    args = parser.parse_args(argv)
    path = OUT / f"kueue-{args.cluster_queues}cq-{args.workloads}wl-seed{SEED}.json"
    meta_path = Path(f"{path}.meta.json")
    meta = json.loads(meta_path.read_text()) if path.exists() and meta_path.exists() else generate(
        path, args.cluster_queues, args.workloads)
    usage_command = command(["queues", "usage", "--snapshot", str(path)])
    if args.in_full:
        lean_output = usage_command()
        usage_command = in_full(usage_command)
        if usage_command() != lean_output:
            raise SystemExit("queues usage prints another report when it reads the Workloads in full")
        release_loaded()
    runs = {"queues usage": usage_command, "decode": decode_baseline(str(path))}
    for function in runs.values():  # warm up: imports, page cache
        _timed(function)
    times: dict[str, list[float]] = {key: [] for key in runs}
    keys = list(runs)
    for round_ in range(args.repeats):
        shift = round_ % len(keys)
        for key in keys[shift:] + keys[:shift]:
            times[key].append(_timed(runs[key]))
    usage, decode = statistics.median(times["queues usage"]), statistics.median(times["decode"])
    rounds = [a / b for a, b in zip(times["queues usage"], times["decode"], strict=True)]
    label = (f"{meta['cluster_queues']:,} ClusterQueues, {meta['workloads']:,} Workloads, {meta['nodes']:,} nodes, "
             f"{meta['bytes'] / 1e6:,.0f} MB")
    print(f"fleet: {label}")
    if args.in_full:
        print("for reference: queues usage reading every Workload in full (not lean), its report the same")
    print(f"queues usage: median {usage:.3f} s; decode: median {decode:.3f} s; {args.repeats} rounds")
    print(f"queues usage ÷ decode = {usage / decode:.2f} (per round {min(rounds):.2f}–{max(rounds):.2f}); "
          f"target ≤ {TARGET}: {'met' if usage / decode <= TARGET else 'NOT met'}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
