"""`queues usage`'s fast path against the straightforward computation, on generated Kueue fleets.

The fast path (kubectl_runs.kueue.quota.Fleet._add_workloads and kubectl_runs.kueue.usage.pending_demand) tallies
what quota-holding workloads hold by (queue, admitted, flavor, resource, quantity as written) and places the
pending demand once per workload shape; a lean load reads a JSON snapshot's Workloads as WorkloadHead (pod sets
decoded when read). Here every workload is taken one by one instead — its admission through ``reserved_usage``,
its pod sets' requests through ``pod_requests`` (Kueue's totals), each flavor tried in the queue's order with
assign's own taint and affinity checks — and the report of a lean load must equal the report of a full load.

The fleets mix what the fast path distinguishes: quantities as strings and integers, limits without requests,
several containers, init containers, overhead, node selectors, node affinity, tolerations of tainted flavors,
both vendors in one pod set, several pod sets, missing flavors, LocalQueues and ClusterQueues, finished,
inactive and evicted workloads, cohorts with limits.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kubectl_runs.kueue.assign import affinity_matches, group_of, node_labels_of, untolerated
from kubectl_runs.kueue.model import Workload, WorkloadHead
from kubectl_runs.kueue.quota import GPU_RESOURCES, Fleet, pod_requests, reserved_usage
from kubectl_runs.kueue.reports import plain
from kubectl_runs.kueue.usage import pending_demand, queues_usage
from kubectl_runs.sources.files import load_snapshot

GPU, AMD = GPU_RESOURCES
FLAVORS = ("h100", "a100", "mi300x", "spot", "any")  # "any": no nodeLabels (selects every node)
K = "kueue.x-k8s.io/v1beta1"


def _quantity(rng: random.Random, value: int) -> Any:
    return rng.choice((str(value), value, str(value), f"{value * 1000}m" if value else "0"))


def _container(rng: random.Random, gpus: dict[str, int], cpu_limit_only: bool = False) -> dict:
    requests = {r: _quantity(rng, v) for r, v in gpus.items()}
    how = rng.random()
    if how < 0.15:
        resources: dict[str, Any] = {"limits": requests}  # a limit alone is the request
    elif how < 0.25 and gpus:
        resource = next(iter(gpus))
        resources = {"requests": {resource: "0"}, "limits": requests}  # asked 0: counts 0
    else:
        resources = {"requests": dict(requests), "limits": dict(requests)}
    if cpu_limit_only:
        resources.setdefault("limits", {})["cpu"] = "2"
        resources.setdefault("requests", {}).pop("cpu", None)
    else:
        resources.setdefault("requests", {})["cpu"] = "4"
    return {"name": "c", "image": "x", "resources": resources}


def _pod_set(rng: random.Random, name: str) -> dict:
    resource = rng.choice((GPU, GPU, AMD))
    gpus = {resource: rng.choice((0, 1, 2, 4, 8, 16))}
    if rng.random() < 0.1:
        gpus[AMD if resource == GPU else GPU] = rng.choice((1, 2))
    spec: dict[str, Any] = {"containers": [_container(rng, gpus)]}
    if rng.random() < 0.15:
        spec["containers"].append(_container(rng, {resource: rng.choice((1, 2))}, cpu_limit_only=True))
    if rng.random() < 0.1:
        spec["initContainers"] = [_container(rng, {resource: rng.choice((1, 8, 32))})]
    if rng.random() < 0.05:
        spec["overhead"] = {resource: "1"}
    if rng.random() < 0.15:
        spec["nodeSelector"] = rng.choice(({"pool": rng.choice(FLAVORS)}, {"zone": "z1"}))
    if rng.random() < 0.15:
        spec["tolerations"] = [rng.choice(({"key": "spot", "operator": "Exists"},
                                           {"key": "spot", "value": "yes", "effect": "NoSchedule"},
                                           {"key": "other", "operator": "Exists"}))]
    if rng.random() < 0.1:
        operator = rng.choice(("In", "NotIn"))
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": operator, "values": rng.sample(FLAVORS, 2)}]}]}}}
    return {"name": name, "count": rng.choice((1, 1, 2, 3, 4)), "template": {"spec": spec}}


def generate(seed: int) -> list[dict]:
    rng = random.Random(seed)
    items: list[dict] = []
    for i in range(rng.randint(4, 12)):
        pool = rng.choice(FLAVORS[:4])
        resource = AMD if pool == "mi300x" else GPU
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i:02d}", "labels": {"pool": pool}},
                      "spec": {"unschedulable": rng.random() < 0.1},
                      "status": {"allocatable": {resource: str(rng.choice((4, 8)))}}})
    for name in FLAVORS:
        if rng.random() < 0.1:
            continue  # a missing flavor
        spec: dict[str, Any] = {"nodeLabels": {} if name == "any" else {"pool": name}}
        if name == "spot":
            spec["nodeTaints"] = [{"key": "spot", "value": "yes", "effect": "NoSchedule"}]
        items.append({"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec})
    cohorts = [f"c{i}" for i in range(rng.randint(1, 3))]
    for i, name in enumerate(cohorts):
        spec = {"parent": cohorts[0]} if i and rng.random() < 0.5 else {}
        if rng.random() < 0.3:
            spec["resourceGroups"] = [{"coveredResources": [GPU], "flavors": [
                {"name": "h100", "resources": [{"name": GPU, "nominalQuota": rng.choice((4, 8))}]}]}]
        items.append({"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Cohort", "metadata": {"name": name},
                      "spec": spec})
    queues = [f"cq{i}" for i in range(rng.randint(2, 6))]
    for name in queues:
        groups = []
        for resource, choices in ((GPU, ("h100", "a100", "spot", "any", "ghost")), (AMD, ("mi300x", "any"))):
            if rng.random() < 0.15:
                continue
            flavors = []
            for flavor in rng.sample(choices, rng.randint(1, len(choices) - 1)):
                quota: dict[str, Any] = {"name": resource, "nominalQuota": rng.choice((0, 4, 8, 16))}
                if rng.random() < 0.3:
                    quota["borrowingLimit"] = rng.choice((0, 4, 32))
                if rng.random() < 0.3:
                    quota["lendingLimit"] = rng.choice((0, 4))
                flavors.append({"name": flavor, "resources": [quota]})
            groups.append({"coveredResources": [resource], "flavors": flavors})
        spec = {"resourceGroups": groups}
        if rng.random() < 0.8:
            spec["cohort"] = rng.choice(cohorts)
        items.append({"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})
    namespaces = [f"ns{i}" for i in range(4)]
    for namespace in namespaces[:3]:
        target = rng.choice([*queues, "cq-missing"])
        items.append({"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "default", "namespace": namespace},
                      "spec": {"clusterQueue": target}})
    for w in range(rng.randint(30, 120)):
        pod_sets = [_pod_set(rng, f"ps{i}") for i in range(rng.choice((1, 1, 1, 2, 3)))]
        state = rng.choice(("pending", "pending", "pending", "admitted", "admitted", "reserved", "finished",
                            "inactive", "evicted"))
        status: dict[str, Any] = {}
        if state in ("admitted", "reserved", "finished", "evicted"):
            assignments = []
            for ps in pod_sets:
                requests = ps["template"]["spec"]["containers"][0]["resources"].get("requests", {})
                usage, flavors = {}, {}
                for resource in (GPU, AMD):
                    if resource in requests:
                        usage[resource] = _quantity(rng, rng.choice((1, 2, 8)) * ps["count"])
                        flavors[resource] = rng.choice(("h100", "a100", "mi300x", "spot", "ghost"))
                usage["cpu"] = "8"
                flavors["cpu"] = "default"
                assignments.append({"name": ps["name"], "count": ps["count"], "flavors": flavors,
                                    "resourceUsage": usage})
            status["admission"] = {"clusterQueue": rng.choice([*queues, "cq-missing"]),
                                   "podSetAssignments": assignments}
            conditions = [{"type": "QuotaReserved", "status": "False" if state == "evicted" else "True",
                           "reason": "x", "message": "m", "lastTransitionTime": "2025-11-20T10:00:00Z"}]
            if state in ("admitted", "finished"):
                conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted"})
            if state == "finished":
                conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded"})
            status["conditions"] = conditions
        elif rng.random() < 0.5:
            status["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                     "message": "couldn't assign flavors"}]
        spec = {"queueName": rng.choice(("default", "default", "default", "nowhere")), "podSets": pod_sets,
                "active": state != "inactive"}
        items.append({"apiVersion": K, "kind": "Workload", "metadata": {
            "name": f"w{w:03d}", "namespace": rng.choice(namespaces), "creationTimestamp": "2025-11-20T10:00:00Z",
            "labels": {"a": "b"}}, "spec": spec, "status": status})
    rng.shuffle(items)
    return items


def write(tmp_path, items: list[dict], name: str = "fleet.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


# --- the straightforward computation -----------------------------------------------------------------------


def reference_usage(workloads) -> tuple[dict, dict]:
    """(queue, flavor, resource) -> GPUs reserved, and admitted: each workload's admission summed by itself."""
    reserved: dict = {}
    admitted: dict = {}
    for w in workloads:
        if not w.quota_reserved:
            continue
        cq = w.status.admission.cluster_queue
        for (flavor, resource), amount in reserved_usage(w).items():
            if resource not in GPU_RESOURCES:
                continue
            key = (cq, flavor, resource)
            reserved[key] = reserved.get(key, 0) + amount
            if w.admitted:
                admitted[key] = admitted.get(key, 0) + amount
    return reserved, admitted


def reference_pending(fleet: Fleet, workloads) -> dict:
    """Each pending workload placed by itself: per pod set and GPU resource, the first flavor of the queue's group
    the pods may use (assign's checks) that could ever hold it with the workload's earlier pod sets there."""
    out: dict = {}
    for w in workloads:
        if not w.pending:
            continue
        cq = fleet.cluster_queue_of(w)
        if cq is None:
            continue
        node = fleet.nodes_by_name[cq.name]
        so_far: dict = {}
        for pod_set in w.spec.pod_sets:
            spec = pod_set.template.spec
            per_pod = pod_requests(spec)
            for resource in GPU_RESOURCES:
                if not per_pod.get(resource):
                    continue
                group = group_of(cq, resource)
                if group is None or not group.flavors:
                    continue
                gpus = per_pod[resource] * pod_set.count
                keys = {key for f in group.flavors for key in node_labels_of(fleet, f.name)}
                chosen = group.flavors[0].name
                for f in group.flavors:
                    flavor = fleet.flavors.get(f.name)
                    if flavor is None:
                        continue
                    if untolerated(flavor.spec.node_taints, (*spec.tolerations, *flavor.spec.tolerations)) is not None:
                        continue
                    if not affinity_matches(spec, keys, flavor.spec.node_labels):
                        continue
                    if gpus + so_far.get((f.name, resource), 0) <= node.potential((f.name, resource)):
                        chosen = f.name
                        break
                key = (cq.name, chosen, resource)
                gpus_so_far, count = out.get(key, (0, 0))
                out[key] = (gpus_so_far + gpus, count + (0 if (chosen, resource) in so_far else 1))
                so_far[(chosen, resource)] = so_far.get((chosen, resource), 0) + gpus
    return out


SEEDS = range(60)


@pytest.mark.parametrize("seed", SEEDS)
def test_fast_path_equals_the_straightforward_computation(seed, tmp_path):
    path = write(tmp_path, generate(seed))
    full = load_snapshot([path])
    lean = load_snapshot([path], lean=True)
    assert all(type(w) is Workload for w in full.queues.workloads)
    assert all(type(w) is WorkloadHead for w in lean.queues.workloads)
    assert len(lean.queues.workloads) == len(full.queues.workloads)

    workloads = full.queues.workloads
    reserved, admitted = reference_usage(workloads)
    for snapshot in (full, lean):
        fleet = Fleet(snapshot.queues, snapshot.nodes, resources=GPU_RESOURCES)
        usage = {(cq, *fr): v for cq, node in fleet.nodes_by_name.items() for fr, v in node.usage.items() if v}
        assert usage == {k: v for k, v in reserved.items() if k[0] in fleet.nodes_by_name and v}
        counted = {(cq, *fr): v for cq, frs in fleet.admitted.items() for fr, v in frs.items() if v}
        assert counted == {k: v for k, v in admitted.items() if v}
        assert pending_demand(fleet) == reference_pending(Fleet(full.queues, full.nodes), workloads)

    report = plain(queues_usage(lean).report)
    assert report == plain(queues_usage(full).report)
    assert report["clusterQueues"] or not full.queues.cluster_queues


def test_the_fleets_exercise_what_the_fast_path_distinguishes(tmp_path):
    """The generated fleets are not all of the easy shape: some pending workloads are placed one by one (node
    selector, affinity or tolerations), some have several pod sets, some pod sets several containers."""
    one_by_one = several_pod_sets = several_containers = pending = 0
    for seed in SEEDS:
        snapshot = load_snapshot([write(tmp_path, generate(seed))])
        for w in snapshot.queues.workloads:
            if not w.pending:
                continue
            pending += 1
            specs = [ps.template.spec for ps in w.spec.pod_sets]
            one_by_one += any(s.node_selector or s.tolerations or s.affinity is not None for s in specs)
            several_pod_sets += len(specs) > 1
            several_containers += any(len(s.containers) > 1 for s in specs)
    assert pending > 1000
    assert min(one_by_one, several_pod_sets, several_containers) > 100


def test_a_lean_load_meets_differing_copies_and_reads_in_full(tmp_path):
    """Two files holding one Workload: the same as read (a compact file and a pretty-printed one) is read once,
    as a full load reads it; copies that differ are refused naming both files, as a full load refuses them."""
    items = generate(3)
    workload = next(i for i in items if i["kind"] == "Workload")
    first = write(tmp_path, items, "a.json")
    pretty = tmp_path / "b.json"
    pretty.write_text(json.dumps({"kind": "List", "items": [workload]}, indent=2))
    lean = load_snapshot([first, str(pretty)], lean=True)
    assert lean.queues.workloads == load_snapshot([first, str(pretty)]).queues.workloads  # read in full
    assert "given more than once" in " ".join(lean.notes)
    changed = json.loads(json.dumps(workload))
    changed["spec"]["podSets"][0]["count"] += 1
    pretty.write_text(json.dumps({"kind": "List", "items": [changed]}))
    with pytest.raises(Exception, match="with different content") as lean_error:
        load_snapshot([first, str(pretty)], lean=True)
    with pytest.raises(Exception, match="with different content") as full_error:
        load_snapshot([first, str(pretty)])
    assert str(lean_error.value) == str(full_error.value)


BAD_POD_SETS = {"name": "main", "count": "two", "template": {"spec": {"containers": []}}}


def test_bad_pod_sets_of_a_pending_workload_are_named_as_a_full_load_names_them(tmp_path, capsys):
    """A lean load leaves pod sets undecoded until `queues usage` reads them (the pending workloads'): bad ones
    are then reported as every command reports them (the file, the object, the field path), exit 1."""
    from kubectl_runs.cli.main import main

    items = generate(5)
    snapshot = load_snapshot([write(tmp_path, items)])
    waiting = next(iter(Fleet(snapshot.queues, snapshot.nodes).pending.values()))[0]  # pending in a queue
    pending = next(i for i in items if i["kind"] == "Workload" and i["metadata"]["name"] == waiting.name
                   and i["metadata"]["namespace"] == waiting.namespace)
    pending["spec"]["podSets"] = [BAD_POD_SETS]
    path = write(tmp_path, items)
    name = waiting.key
    assert main(["queues", "usage", "--snapshot", path]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: {path}: Workload {name}: spec.podSets[0].count: expected int, got str\n")


def test_queues_usage_reads_the_admission_of_a_workload_holding_quota_not_its_pod_sets(tmp_path, capsys):
    """What a workload holding quota holds is its admission (as Kueue's cache counts it): `queues usage` does not
    read its pod sets, so a bad one there does not stop the report; `explain`, which reads them, refuses the
    file."""
    from kubectl_runs.cli.main import main

    items = generate(5)
    holding = next(i for i in items if i["kind"] == "Workload" and i["status"].get("admission"))
    holding["spec"]["podSets"] = [BAD_POD_SETS]
    path = write(tmp_path, items)
    assert main(["queues", "usage", "--snapshot", path, "-o", "json"]) == 0
    out, _ = capsys.readouterr()
    items_ok = [i for i in items if i is not holding]
    expected = queues_usage(load_snapshot([write(tmp_path, [*items_ok, _without_pod_sets(holding)], "ok.json")]))
    assert json.loads(out) == plain(expected.report)
    name = f"{holding['metadata']['namespace']}/{holding['metadata']['name']}"
    assert main(["explain", "workload", name, "--snapshot", path]) == 1
    assert "spec.podSets[0].count: expected int, got str" in capsys.readouterr().err


def _without_pod_sets(workload: dict) -> dict:
    copy = json.loads(json.dumps(workload))
    copy["spec"]["podSets"] = []
    return copy


def test_a_lean_load_of_yaml_and_json_together_and_of_stdin(tmp_path):
    """YAML is read in full (Workload) beside a JSON file's WorkloadHeads, and the report is the full load's; from
    stdin (which cannot be read twice) a lean load reads in full."""
    import io

    import yaml

    items = generate(11)
    workloads = [i for i in items if i["kind"] == "Workload"]
    rest = [i for i in items if i["kind"] != "Workload"]
    half = len(workloads) // 2
    as_yaml = tmp_path / "some.yaml"
    as_yaml.write_text(yaml.safe_dump_all(workloads[:half]))
    as_json = write(tmp_path, [*rest, *workloads[half:]], "rest.json")
    lean = load_snapshot([str(as_yaml), as_json], lean=True)
    assert {type(w) for w in lean.queues.workloads} == {Workload, WorkloadHead}
    assert plain(queues_usage(lean).report) == plain(queues_usage(load_snapshot([str(as_yaml), as_json])).report)

    path = write(tmp_path, items)
    data = (tmp_path / "fleet.json").read_bytes()
    from_stdin = load_snapshot(["-"], stdin=io.BytesIO(data), lean=True)
    assert all(type(w) is Workload for w in from_stdin.queues.workloads)
    assert plain(queues_usage(from_stdin).report) == plain(queues_usage(load_snapshot([path], lean=True)).report)
