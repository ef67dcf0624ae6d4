"""Kueue's quota arithmetic (kubectl_runs.kueue.quota) and the `queues usage` report, with numbers worked by hand
in each docstring. Terms (Kueue v0.12 pkg/cache/resource_node.go): guaranteed = max(0, nominal − lendingLimit)
(0 without a lending limit); a Cohort pools its own quota plus each member's (subtree − guaranteed) and counts
each member's usage past its guaranteed quota; available = max(0, guaranteed − usage) + the parent's available,
the latter capped by borrowingLimit at (subtree − guaranteed) − max(0, usage − guaranteed) + borrowingLimit."""

from __future__ import annotations

from pathlib import Path

import pytest
from kueue_builders import (
    AMD,
    GPU,
    cluster_queue,
    cohort,
    flavor,
    group,
    local_queue,
    node,
    pod_set,
    quota,
    snapshot,
    workload,
)

from kubectl_runs.kueue.quota import Fleet, pod_requests, reserved_usage
from kubectl_runs.kueue.usage import queues_usage
from kubectl_runs.sources.files import load_snapshot

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kueue-fleet.yaml"
H100 = ("h100", GPU)


def fleet_of(*objects):
    snap = snapshot(*objects)
    return Fleet(snap.queues, snap.nodes), snap


def test_cohort_borrowing_and_lending_limits():
    """x: nominal 10, lendingLimit 4, borrowingLimit 3, uses 12; y: nominal 6, no limits, uses 2.

    guaranteed(x) = 10 − 4 = 6, guaranteed(y) = 0. Cohort pool = (10 − 6) + (6 − 0) = 10; cohort usage =
    max(0, 12 − 6) + max(0, 2 − 0) = 8, so the cohort has 2 free.
    available(x) = max(0, 6 − 12) + min(cohort's 2, (10 − 6) − (12 − 6) + 3 = 1) = 1: its borrowing limit binds.
    available(y) = 0 + 2 = 2. potential(x) = min(10 + 3, 6 + 10) = 13; potential(y) = 0 + 10 = 10."""
    fleet, _ = fleet_of(
        flavor("h100"),
        cluster_queue("x", group([GPU], ("h100", [quota(GPU, 10, borrowing=3, lending=4)])), cohort="c"),
        cluster_queue("y", group([GPU], ("h100", [quota(GPU, 6)])), cohort="c"),
        workload("a", "x1", pod_set(3, {GPU: 4}), admitted_in="x", flavors=[{GPU: "h100"}]),
        workload("b", "y1", pod_set(1, {GPU: 2}), admitted_in="y", flavors=[{GPU: "h100"}]),
    )
    x, y, c = fleet.nodes_by_name["x"], fleet.nodes_by_name["y"], fleet.cohorts["c"]
    assert (x.usage[H100], y.usage[H100]) == (12, 2)
    assert (x.guaranteed(H100), y.guaranteed(H100)) == (6, 0)
    assert (c.subtree[H100], c.usage[H100]) == (10, 8)
    assert (x.available(H100), y.available(H100)) == (1, 2)
    assert (x.potential(H100), y.potential(H100)) == (13, 10)


def test_nested_cohorts_with_their_own_quota_and_lending_limit():
    """Root R (no quota) holds Cohort C (own quota 4, lendingLimit 2) and ClusterQueue q2 (nominal 6); C holds q1
    (nominal 4). q1 uses 9, q2 uses 1.

    C's pool = 4 + (4 − 0) = 8, guaranteed(C) = 8 − 2 = 6; R's pool = (8 − 6) + 6 = 8. Usage: C = 9,
    R = max(0, 9 − 6) + 1 = 4, so R has 4 free. available(C) = max(0, 6 − 9) + 4 = 4 and available(q1) = 0 + 4 = 4;
    available(q2) = 0 + 4 = 4 (14 GPUs of quota, 10 used). potential(q1) = 0 + (6 + 8) = 14."""
    fleet, _ = fleet_of(
        flavor("h100"),
        cohort("R"),
        cohort("C", group([GPU], ("h100", [quota(GPU, 4, lending=2)])), parent="R"),
        cluster_queue("q1", group([GPU], ("h100", [quota(GPU, 4)])), cohort="C"),
        cluster_queue("q2", group([GPU], ("h100", [quota(GPU, 6)])), cohort="R"),
        workload("a", "w1", pod_set(9, {GPU: 1}), admitted_in="q1", flavors=[{GPU: "h100"}]),
        workload("a", "w2", pod_set(1, {GPU: 1}), admitted_in="q2", flavors=[{GPU: "h100"}]),
    )
    q1, q2, c, r = (fleet.nodes_by_name["q1"], fleet.nodes_by_name["q2"], fleet.cohorts["C"], fleet.cohorts["R"])
    assert (c.subtree[H100], c.guaranteed(H100), r.subtree[H100]) == (8, 6, 8)
    assert (c.usage[H100], r.usage[H100]) == (9, 4)
    assert (c.available(H100), q1.available(H100), q2.available(H100)) == (4, 4, 4)
    assert q1.potential(H100) == 14


def test_two_flavors_both_vendors():
    """One queue, nvidia.com/gpu in h100 (8) then a100 (4), amd.com/gpu in mi300x (16). A workload of two pod
    sets holds 2 × 2 nvidia in h100 and 1 × 8 amd in mi300x; another holds 4 nvidia in a100 but only reserved
    (not admitted). Rows: h100 reserved 4 of 8 (headroom 4), a100 reserved 4 of 4 (headroom 0, admitted 0),
    mi300x reserved 8 of 16 (headroom 8). No cohort, so nothing to lend. Nodes: two h100 nodes of 8, one mi300x
    node of 8 amd; a100 selects none."""
    snap = snapshot(
        node("n1", {"gpu": "h100"}, 8), node("n2", {"gpu": "h100"}, 8), node("m1", {"gpu": "mi300x"}, 8, AMD),
        flavor("h100"), flavor("a100"), flavor("mi300x"),
        cluster_queue("q", group([GPU], ("h100", [quota(GPU, 8)]), ("a100", [quota(GPU, 4)])),
                      group([AMD], ("mi300x", [quota(AMD, 16)]))),
        workload("ns", "mixed", pod_set(2, {GPU: 2}, name="nv"), pod_set(1, {AMD: 8}, name="amd"),
                 admitted_in="q", flavors=[{GPU: "h100"}, {AMD: "mi300x"}]),
        workload("ns", "held", pod_set(1, {GPU: 4}), admitted_in="q", flavors=[{GPU: "a100"}], admitted=False),
    )
    rows = {(r.flavor, r.resource): r for r in queues_usage(snap).rows}
    assert list(rows) == [("h100", GPU), ("a100", GPU), ("mi300x", AMD)]
    h100, a100, mi300x = rows[("h100", GPU)], rows[("a100", GPU)], rows[("mi300x", AMD)]
    assert (h100.reserved, h100.admitted, h100.headroom, h100.cohort_can_lend, h100.node_gpus) == (4, 4, 4, 0, 16)
    assert (a100.reserved, a100.admitted, a100.headroom, a100.node_gpus) == (4, 0, 0, 0)
    assert (mi300x.reserved, mi300x.headroom, mi300x.nodes, mi300x.node_gpus) == (8, 8, 1, 8)


def test_the_example_fleet_worked_by_hand():
    """examples/kueue-fleet.yaml, cohort research, flavor h100 (nvidia.com/gpu):
    team-a nominal 8, lendingLimit 4, borrowingLimit 4, holds 8 + 4 = 12; team-b nominal 8, lendingLimit 4,
    holds 4; team-c nominal 0, borrowingLimit 12. guaranteed: a 4, b 4, c 0. Pool = 4 + 4 + 0 = 8; in use
    = (12 − 4) + max(0, 4 − 4) = 8: nothing free. team-a: 0 own + min(0, 4 − 8 + 4 = 0) = 0, max 12.
    team-c: max = min(0 + 12, 0 + 8) = 8, so its borrowing limit 12 is 4 beyond reach.
    mi300x (amd.com/gpu): team-b alone, nominal 16, holds 8: available 8, all from its own quota.
    Pending: team-a 4 + 2 = 6 GPUs (2 workloads) at h100; team-b 16 at mi300x; team-c 4 at h100 (its pods select
    gpu.product=h100, which rules a100 out)."""
    report = queues_usage(load_snapshot([str(EXAMPLE)]))
    table = [(r.cluster_queue, r.flavor, r.nominal, r.reserved, r.pending, r.pending_workloads, r.headroom,
              r.cohort_can_lend, r.maximum, r.node_gpus) for r in report.rows]
    assert table == [
        ("team-a", "h100", 8, 12, 6, 2, 0, 0, 12, 16),
        ("team-b", "h100", 8, 4, 0, 0, 0, 0, 12, 16),
        ("team-b", "mi300x", 16, 8, 16, 1, 8, 0, 16, 16),
        ("team-c", "h100", 0, 0, 4, 1, 0, 0, 8, 16),
        ("team-c", "a100", 8, 0, 0, 0, 8, 0, 8, 0),
    ]
    assert [(c.flavor, c.pooled, c.used, c.free) for c in report.cohorts] == [
        ("a100", 8, 0, 8), ("h100", 8, 8, 0), ("mi300x", 16, 8, 8)]
    assert [(f.kind, f.object) for f in report.findings] == [
        ("MissingClusterQueue", "LocalQueue team-d/default"),
        ("FlavorSelectsNoNode", "ResourceFlavor a100"),
        ("UnbackedQuota", "ResourceFlavor a100"),
        ("UnreachableBorrowingLimit", "ClusterQueue team-c"),
    ]
    assert report.findings[3].detail == (
        "borrowingLimit 12 for nvidia.com/gpu in flavor h100 but cohort research can lend it at most 8 (its "
        "lending limits and quota): 4 of the limit are unreachable")


@pytest.mark.parametrize(
    ("cohort_name", "flavor_name", "rows", "findings"),
    [
        (None, "mi300x", [("team-b", "mi300x")], []),
        (None, "a100", [("team-c", "a100")], ["FlavorSelectsNoNode", "UnbackedQuota"]),
        ("research", None, 5, ["FlavorSelectsNoNode", "UnbackedQuota", "UnreachableBorrowingLimit"]),
        ("elsewhere", None, [], []),
    ],
    ids=["flavor-mi300x", "flavor-a100", "cohort-research", "unknown-cohort"],
)
def test_filters_keep_rows_and_their_findings(cohort_name, flavor_name, rows, findings):
    report = queues_usage(load_snapshot([str(EXAMPLE)]), cohort=cohort_name, flavor=flavor_name)
    got = [(r.cluster_queue, r.flavor) for r in report.rows]
    assert (len(got) if isinstance(rows, int) else got) == rows
    assert [f.kind for f in report.findings] == findings


def test_unbacked_quota_counts_cohort_quota_and_skips_cordoned_nodes():
    """Quota 8 (queue) + 4 (its cohort's own) = 12 in h100; of two 8-GPU nodes one is cordoned: 8 backed, 4 not."""
    snap = snapshot(
        node("n1", {"gpu": "h100"}, 8), node("n2", {"gpu": "h100"}, 8, unschedulable=True), flavor("h100"),
        cohort("c", group([GPU], ("h100", [quota(GPU, 4)]))),
        cluster_queue("q", group([GPU], ("h100", [quota(GPU, 8)])), cohort="c"),
    )
    (finding,) = queues_usage(snap).findings
    assert finding.kind == "UnbackedQuota"
    assert finding.detail == ("12 nvidia.com/gpu of nominal quota (ClusterQueue q, Cohort c) but its schedulable "
                              "nodes have 8: 4 GPUs of quota no node backs")


def test_missing_flavor_local_queue_and_cohort_cycle():
    snap = snapshot(
        node("n1", {"gpu": "h100"}, 8), flavor("h100"),
        cluster_queue("q", group([GPU], ("h100", [quota(GPU, 8)]), ("ghost", [quota(GPU, 0)]))),
        cohort("a", parent="b"), cohort("b", parent="a"),
        local_queue("ns", "q", "q"),
        workload("ns", "lost", pod_set(1, {GPU: 1}), queue="nope"),
    )
    kinds = [(f.kind, f.object) for f in queues_usage(snap).findings]
    assert kinds == [("MissingLocalQueue", "Workload ns/lost"), ("MissingFlavor", "ResourceFlavor ghost"),
                     ("CohortCycle", "Cohort b")]


def test_pod_requests_as_kueue_totals_them():
    """Containers add up (a limit alone counts as the request), init containers count by their maximum, the
    overhead adds on: cpu 1 + 0.5 = 1500m, then max(1500m, 2000m init) + 100m overhead = 2100m; GPUs 4 + 2 = 6."""
    spec = pod_set(1, {})["template"]["spec"]
    spec["containers"] = [
        {"name": "a", "resources": {"requests": {"cpu": "1", GPU: "4"}}},
        {"name": "b", "resources": {"limits": {"cpu": "500m", GPU: "2"}}},
    ]
    spec["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    spec["overhead"] = {"cpu": "100m"}
    snap = snapshot(workload("ns", "w", {"name": "main", "count": 1, "template": {"spec": spec}}))
    assert pod_requests(snap.queues.workloads[0].spec.pod_sets[0].template.spec) == {"cpu": 2100, GPU: 6}


def test_reserved_usage_reads_the_admission():
    snap = snapshot(workload("ns", "w", pod_set(2, {GPU: 4}), pod_set(1, {AMD: 8}, name="b"), admitted_in="q",
                             flavors=[{GPU: "h100"}, {AMD: "mi300x"}]))
    assert reserved_usage(snap.queues.workloads[0]) == {("h100", GPU): 8, ("mi300x", AMD): 8}


def test_finished_and_evicted_workloads_hold_nothing():
    """Kueue counts quota-reserved, unfinished workloads only: a Finished one and one whose QuotaReserved went
    False (evicted) hold no quota even though their admission is still written."""
    done = workload("ns", "done", pod_set(1, {GPU: 8}), admitted_in="q", flavors=[{GPU: "h100"}])
    done["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": ""})
    evicted = workload("ns", "evicted", pod_set(1, {GPU: 8}), admitted_in="q", flavors=[{GPU: "h100"}])
    evicted["status"]["conditions"][0]["status"] = "False"
    fleet, _ = fleet_of(flavor("h100"), cluster_queue("q", group([GPU], ("h100", [quota(GPU, 8)]))), done, evicted)
    assert fleet.nodes_by_name["q"].usage == {}
    assert fleet.nodes_by_name["q"].available(H100) == 8
