"""kube-scheduler's filters recomputed (kubectl_runs.pods.fit) on hand-built nodes and pods: the first filter
that rejects a node gives its reasons, in the scheduler's words and order; requests are summed as the scheduler
sums them. The same rules are judged against the real kube-scheduler in tests/integration/test_pod_verdicts.py."""

from __future__ import annotations

import msgspec
import pytest

from kubectl_runs.corev1 import PodSpec
from kubectl_runs.model import Node
from kubectl_runs.pods.fit import fit, fleet_fit, histogram, node_use, verdict
from kubectl_runs.pods.model import Pod


def node(name, gpus=8, *, labels=None, taints=(), cordoned=False, cpu="64", pods="110"):
    alloc = {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": "512Gi"}
    if pods is not None:
        alloc["pods"] = pods
    return msgspec.convert({"kind": "Node", "metadata": {"name": name, "labels": labels or {}},
                            "spec": {"unschedulable": cordoned, "taints": list(taints)},
                            "status": {"allocatable": alloc}}, Node)


def spec(gpus=0, **more):
    container = {"name": "main", "resources": {"requests": {"cpu": "1"}}}
    if gpus:
        container["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    return msgspec.convert({"containers": [container], **more}, PodSpec)


def pod(name, gpus, node_name="", phase="Running", ns="team"):
    return msgspec.convert({"kind": "Pod", "metadata": {"name": name, "namespace": ns},
                            "spec": {**msgspec.to_builtins(spec(gpus)), "nodeName": node_name},
                            "status": {"phase": phase}}, Pod)


TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


def test_requests_add_containers_take_init_peaks_keep_sidecars_and_add_overhead():
    asked = msgspec.convert({
        "containers": [{"resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "4"}}},
                       {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}},
                           {"restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}}],
        "overhead": {"cpu": "100m"}}, PodSpec).requests()
    # containers 1.5 + sidecar 0.25 = 1.75 < the first init container's 4: the peak wins; then the overhead
    assert asked == {"cpu": 4100, "nvidia.com/gpu": 4, "memory": 2**30}
    assert msgspec.convert({"containers": [{"resources": {"requests": {"amd.com/gpu": "2"}}}]},
                           PodSpec).gpu_request() == ("amd.com/gpu", 2)


def test_the_first_filter_that_rejects_gives_the_reason():
    tainted_and_cordoned = node("n", taints=[TAINT], cordoned=True, labels={"pool": "a"})
    assert fit(spec(8), tainted_and_cordoned).reasons == ("node(s) were unschedulable",)
    assert fit(spec(8), node("n", taints=[TAINT])).reasons == ("node(s) had untolerated taint {dedicated: infer}",)
    assert fit(spec(8, nodeSelector={"pool": "b"}), node("n", labels={"pool": "a"})).reasons == (
        "node(s) didn't match Pod's node affinity/selector",)
    assert fit(spec(9), node("n")).reasons == ("Insufficient nvidia.com/gpu",)
    assert fit(spec(8), node("n")).fits


def test_tolerations_lift_taints_and_the_cordon_and_prefer_no_schedule_never_filters():
    tolerant = spec(8, tolerations=[{"key": "dedicated", "operator": "Exists"},
                                    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                     "effect": "NoSchedule"}])
    assert fit(tolerant, node("n", taints=[TAINT], cordoned=True)).fits
    assert fit(spec(8), node("n", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])).fits


def test_required_affinity_terms_are_ored_and_an_empty_term_matches_nothing():
    def affinity(*terms):
        return spec(1, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": list(terms)}}})
    gold = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gold"]}]}
    any_gpu = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    assert not fit(affinity(gold), node("n", labels={"pool": "a"})).fits
    assert fit(affinity(gold, any_gpu), node("n", labels={"pool": "a", "gpu": "h100"})).fits
    assert not fit(affinity({}), node("n", labels={"pool": "a"})).fits


def test_bound_pods_use_the_node_and_finished_ones_do_not():
    nodes = [node("a"), node("b")]
    pods = [pod("x", 6, "a"), pod("y", 4, "b"), pod("done", 8, "b", phase="Succeeded"), pod("pending", 8)]
    use = node_use(pods)
    assert use["a"].requested["nvidia.com/gpu"] == 6 and use["b"].requested["nvidia.com/gpu"] == 4
    assert use["b"].pods == 1 and use["b"].holders == ("team/y",)
    fits = fleet_fit(spec(8), nodes, pods)
    assert [f.free["nvidia.com/gpu"] for f in fits] == [2, 4]  # 6 free GPUs, never 8 on one node
    assert verdict(fits) == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_a_node_short_of_two_resources_counts_under_both_and_the_verdict_sorts_as_strings():
    nodes = [node("a", cpu="2"), node("b", taints=[TAINT]), node("c", cordoned=True), node("d", cpu="2"),
             node("e", cpu="2", pods="1")]
    pods = [pod("held", 1, "e")]
    fits = fleet_fit(spec(12, containers=[{"resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "12"}}}]),
                     nodes, pods)
    assert histogram(fits) == {"Insufficient cpu": 3, "Insufficient nvidia.com/gpu": 3, "Too many pods": 1,
                               "node(s) had untolerated taint {dedicated: infer}": 1,
                               "node(s) were unschedulable": 1}
    assert verdict(fits) == ("0/5 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint "
                             "{dedicated: infer}, 1 node(s) were unschedulable, 3 Insufficient cpu, "
                             "3 Insufficient nvidia.com/gpu.")


@pytest.mark.parametrize("asked", [0, 8])
def test_a_verdict_is_none_when_a_node_fits(asked):
    assert verdict(fleet_fit(spec(asked), [node("a"), node("b", cordoned=True)], [])) is None


def test_judging_nodes_by_shape_gives_every_node_its_own_fit():
    """``Shapes`` (pending's fast path: the filters before resources once per labels/taints/cordon, resources once
    per room) gives each node exactly the fit judging it alone gives, on a generated fleet of every shape."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.bench_pending import pods_fleet
    from kubectl_runs.pods.fit import Shapes

    items = pods_fleet(400, 1000, seed=7)
    nodes = [msgspec.convert(i, Node) for i in items if i["kind"] == "Node"]
    pods = [msgspec.convert(i, Pod) for i in items if i["kind"] == "Pod"]
    use = node_use(pods)
    shapes = Shapes(nodes, use)
    specs = {msgspec.json.encode(p.spec): p.spec for p in pods if not p.bound}
    assert len(specs) > 10
    for one in specs.values():
        assert fleet_fit(one, nodes, (), use=use, shapes=shapes) == fleet_fit(one, nodes, pods)


def test_weighted_fits_count_what_judging_every_node_counts():
    """``weighted_fit`` (pending's count: each static shape once, the rooms of the shapes that pass pooled) gives
    the same nodes per reason and the same reason code as judging every node alone; ``one_pass`` gives the same
    ``node_use`` as ``node_use``."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.bench_pending import pods_fleet
    from kubectl_runs.pods.fit import Shapes, weighted_fit
    from kubectl_runs.pods.pending import one_pass
    from kubectl_runs.pods.reasons import reason

    items = pods_fleet(400, 1000, seed=11)
    nodes = [msgspec.convert(i, Node) for i in items if i["kind"] == "Node"]
    pods = [msgspec.convert(i, Pod) for i in items if i["kind"] == "Pod"]
    use = node_use(pods)
    assert one_pass(pods)[0] == use
    shapes = Shapes(nodes, use)
    pending = {msgspec.json.encode(p.spec): p for p in pods if not p.bound}
    assert len(pending) > 10
    for one in pending.values():
        fits, weights = weighted_fit(one.spec, shapes, use)
        counted: dict[str, int] = {}
        for f, n in zip(fits, weights, strict=True):
            for r in f.reasons:
                counted[r] = counted.get(r, 0) + n
        alone = fleet_fit(one.spec, nodes, pods)
        assert (sum(weights), counted) == (len(nodes), histogram(alone))
        assert reason(one, fits, weights) == reason(one, alone)
