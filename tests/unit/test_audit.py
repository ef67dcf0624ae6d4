"""``engine.audit``: GPU-hours, leases and peaks per key over a window, and every finding kind, on small fleets
whose numbers are worked out in each docstring. T0 = 2025-11-01T00:00:00Z; "h24" = T0 + 24 h."""

from __future__ import annotations

import pytest
from builders import at, budget, envelope, lease, node, run, snapshot

from kubectl_runs.engine import findings as fk
from kubectl_runs.engine.audit import audit, peak
from kubectl_runs.engine.reports import finding_entries, plain
from kubectl_runs.timeutil import rfc3339

SINCE, UNTIL, AT = at(hours=24), at(hours=48), at(hours=72)


def fleet(*leases, budgets=None, nodes=("n1", "n2"), runs=None):
    """Nodes n1, n2 (8 GPUs), Budget team/b (org:team, envelope west funds 64), and a Run for every lease."""
    run_names = runs if runs is not None else sorted({(x.spec.run_ref.namespace, x.spec.run_ref.name) for x in leases})
    return snapshot(
        *(node(n) for n in nodes),
        *(budgets if budgets is not None else [budget(envelopes=[envelope(concurrency=64)])]),
        *(run(name, ns) for ns, name in run_names),
        *leases,
    )


def rows(report):
    return {r.key: (round(r.gpu_hours, 4), r.leases, r.peak_gpus) for r in report.rows}


# --- GPU-hours across the window edges ----------------------------------------------------------------------


EDGES = (
    lease("early", owner="org:a", gpus=8, node_name="n1", start=at(hours=12), ended=at(hours=30)),
    lease("open", owner="org:a", gpus=4, node_name="n2", start=at(hours=40)),
    lease("inside", owner="org:b", slot_list=["n2#4", "n2#5"], start=at(hours=26), ended=at(hours=28)),
    lease("before", owner="org:b", gpus=8, node_name="n1", start=at(hours=0), ended=at(hours=24)),
    lease("after", owner="org:b", gpus=8, node_name="n1", start=at(hours=48)),
)


def test_gpu_hours_across_window_edges():
    """Window [h24, h48), evaluated at h72.
    - early: 8 GPUs on [h12, h30) starts before --since: counted on [h24, h30) = 6 h × 8 = 48 GPU-h.
    - open: 4 GPUs from h40, still open at --at: counted up to --until, [h40, h48) = 8 h × 4 = 32 GPU-h.
    - inside: 2 GPUs on [h26, h28), closed inside: 2 h × 2 = 4 GPU-h.
    - before ends exactly at --since, after starts exactly at --until: neither overlaps [h24, h48).
    Totals 48 + 32 + 4 = 84 GPU-h over 3 leases; org:a 80 GPU-h (2 leases, peak 8: early and open never
    overlap), org:b 4 GPU-h (1 lease, peak 2)."""
    report = audit(fleet(*EDGES), AT, since=SINCE, until=UNTIL)
    assert round(report.total_gpu_hours, 4) == 84.0
    assert report.total_leases == 3
    assert rows(report) == {("org:a",): (80.0, 2, 8), ("org:b",): (4.0, 1, 2)}
    assert [r.key for r in report.rows] == [("org:a",), ("org:b",)]  # most GPU-hours first
    assert report.findings == []


def test_open_lease_counts_up_to_at_when_until_is_later():
    """--until h96 is after --at h72: the open lease counts [h40, h72) = 32 h × 4 = 128 GPU-h, not 56 h, and a
    note says so. early 48 + inside 4 + after [h48, h72) 24 h × 8 = 192: total 48 + 128 + 4 + 192 = 372."""
    report = audit(fleet(*EDGES), AT, since=SINCE, until=at(hours=96))
    assert round(report.total_gpu_hours, 4) == 372.0
    assert report.total_leases == 4
    assert report.notes == ["--until is after the evaluation time 2025-11-04T00:00:00Z: GPU-hours are counted up to it"]


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        (("flavor",), {("H100",): (84.0, 3, 10)}),
        (("envelope",), {("team/b/west",): (84.0, 3, 10)}),
        (("run",), {("team/early",): (48.0, 1, 8), ("team/open",): (32.0, 1, 4), ("team/inside",): (4.0, 1, 2)}),
        (("node",), {("n1",): (48.0, 1, 8), ("n2",): (36.0, 2, 4)}),
        (("owner", "node"), {("org:a", "n1"): (48.0, 1, 8), ("org:a", "n2"): (32.0, 1, 4),
                             ("org:b", "n2"): (4.0, 1, 2)}),
    ],
    ids=["flavor", "envelope", "run", "node", "owner-then-node"],
)
def test_breakdowns(by, expected):
    """The same three leases. Flavor and envelope hold all three: peak = early (8) + inside (2) on [h26, h28)
    = 10 (open, [h40, h48), is alone). Nodes: n1 holds early (48 GPU-h, 8); n2 holds open (32) and inside (4),
    which never overlap: 36 GPU-h, peak 4. Owner then node splits org:a between n1 and n2."""
    assert rows(audit(fleet(*EDGES), AT, since=SINCE, until=UNTIL, by=by)) == expected


def test_unfunded_leases_have_no_envelope():
    """A lease minted unfunded (no paidBy) is keyed <none>: 2 h × 1 GPU = 2 GPU-h."""
    unfunded = lease("u", gpus=1, node_name="n1", paid_by=None, start=at(hours=30), ended=at(hours=32))
    assert rows(audit(fleet(unfunded), AT, since=SINCE, until=UNTIL, by=["envelope"])) == {("<none>",): (2.0, 1, 1)}


def test_a_lease_on_two_nodes_is_split_by_node():
    """3 slots, n1#0 n1#1 n2#0, on [h24, h34): 10 h. By node: n1 2 × 10 = 20 GPU-h, n2 1 × 10 = 10 GPU-h; the
    lease counts once on each node and once in the totals (30 GPU-h)."""
    spread = lease("spread", slot_list=["n1#0", "n1#1", "n2#0"], start=at(hours=24), ended=at(hours=34))
    report = audit(fleet(spread), AT, since=SINCE, until=UNTIL, by=["node"])
    assert rows(report) == {("n1",): (20.0, 1, 2), ("n2",): (10.0, 1, 1)}
    assert (round(report.total_gpu_hours, 4), report.total_leases) == (30.0, 1)


def test_namespace_narrows_rows_and_totals():
    """Only leases of namespace other: 1 GPU on [h30, h33) = 3 GPU-h."""
    mine = lease("mine", "other", gpus=1, node_name="n1", paid_by=None, start=at(hours=30), ended=at(hours=33))
    report = audit(fleet(*EDGES, mine), AT, since=SINCE, until=UNTIL, namespace="other")
    assert rows(report) == {("org:team",): (3.0, 1, 1)}
    assert (round(report.total_gpu_hours, 4), report.total_leases) == (3.0, 1)


@pytest.mark.parametrize(
    ("by", "since", "until", "message"),
    [
        (["rack"], SINCE, UNTIL, "by: 'rack' is not one of owner, envelope, flavor, run, node"),
        (["owner", "owner"], SINCE, UNTIL, "by: each dimension at most once"),
        (["owner"], UNTIL, SINCE, "since (2025-11-03T00:00:00Z) must be before until (2025-11-02T00:00:00Z)"),
    ],
    ids=["unknown-dimension", "repeated-dimension", "empty-window"],
)
def test_bad_requests(by, since, until, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        audit(fleet(), AT, since=since, until=until, by=by)


# --- peak concurrency -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], 0),
        ([(0, 10, 8)], 8),
        ([(0, 10, 8), (10, 20, 8)], 8),
        ([(0, 10, 8), (10, 20, 8), (5, 15, 4)], 12),
        ([(0, 10, 1), (1, 9, 2), (2, 8, 4), (3, 7, 8)], 15),
        ([(0, 5, 3), (5, 6, 3), (5, 7, 2)], 5),
    ],
    ids=["none", "one", "back-to-back", "bridged", "nested", "ends-before-starts"],
)
def test_peak(intervals, expected):
    """Half-open intervals: one that ends when another starts does not count with it. bridged: [0,10) 8 and
    [5,15) 4 → 12 on [5,10); at 10 the first ends as [10,20) 8 starts → 8 + 4 = 12 again. nested: 1+2+4+8 = 15
    on [3,7). ends-before-starts: at 5, 3 ends and 3 + 2 start → 5."""
    starts = [float(s) for s, _, _ in intervals]
    ends = [float(e) for _, e, _ in intervals]
    assert peak(starts, ends, [g for _, _, g in intervals]) == expected


def test_peak_per_key_inside_the_window():
    """org:a holds A (8 GPUs, [h20, h30)), B (8, [h30, h40)) and C (4, [h26, h34)). Inside [h24, h48): A+C = 12
    on [h26, h30), B+C = 12 on [h30, h34): peak 12. GPU-hours 6×8 + 10×8 + 8×4 = 48 + 80 + 32 = 160."""
    a = lease("a", owner="org:a", gpus=8, node_name="n1", start=at(hours=20), ended=at(hours=30))
    b = lease("b", owner="org:a", gpus=8, node_name="n1", start=at(hours=30), ended=at(hours=40))
    c = lease("c", owner="org:a", gpus=4, node_name="n2", start=at(hours=26), ended=at(hours=34))
    assert rows(audit(fleet(a, b, c), AT, since=SINCE, until=UNTIL)) == {("org:a",): (160.0, 3, 12)}


def test_peak_with_many_keys_uses_one_sweep():
    """2,500 runs (more than the per-key sort threshold), each two leases: 1 GPU [h24, h26) and 2 GPUs
    [h25, h27) → every run peaks at 3 on [h25, h26)."""
    leases = []
    for i in range(2500):
        leases.append(lease(f"r{i}-a", slot_list=[f"m{i}#0"], run_name=f"r{i}", start=at(hours=24), ended=at(hours=26)))
        leases.append(lease(f"r{i}-b", slot_list=[f"m{i}#1", f"m{i}#2"], run_name=f"r{i}", start=at(hours=25),
                            ended=at(hours=27)))
    report = audit(snapshot(*leases), AT, since=SINCE, until=UNTIL, by=["run"])
    assert {r.peak_gpus for r in report.rows} == {3}
    assert len(report.rows) == 2500


# --- findings --------------------------------------------------------------------------------------------------


def kinds(report):
    return [(f.kind, f.lease) for f in report.findings]


def test_double_booked_reports_both_leases_and_the_overlap():
    """first holds n1#0..n1#3 on [h24, h30); second holds n1#2..n1#5 on [h27, h33): slots n1#2 and n1#3 are in
    two open leases on [h27, h30). third holds n1#0 from h30, when first has ended: not double-booked. fourth
    holds n2#0 on [h24, h48) at the same time as everything: another node, no finding."""
    first = lease("first", slot_list=[f"n1#{i}" for i in range(4)], start=at(hours=24), ended=at(hours=30))
    second = lease("second", slot_list=[f"n1#{i}" for i in range(2, 6)], start=at(hours=27), ended=at(hours=33))
    third = lease("third", slot_list=["n1#0"], start=at(hours=30), ended=at(hours=40))
    fourth = lease("fourth", slot_list=["n2#0"], start=at(hours=24))
    report = audit(fleet(first, second, third, fourth), AT, since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {
            "kind": "DoubleBooked",
            "lease": "team/second",
            "detail": "holds slots n1#2, n1#3 also held by team/first from 2025-11-02T03:00:00Z to "
            "2025-11-02T06:00:00Z: one slot is one GPU; close the lease that is not running there",
        }
    ]


def test_many_leases_on_the_same_slots_are_one_finding_per_episode_not_per_pair():
    """1,000 whole-node leases on n1, all open from h24 + i minutes: one episode (n1#0..#7 held 1,000 times over
    from h24 + 1 minute on), so one finding — not 499,500 — naming the second lease to start, counting the
    others and naming the first few. A lease on n2 overlapping nothing on its node is no finding."""
    leases = [lease(f"l{i:04d}", gpus=8, node_name="n1", start=at(hours=24, minutes=i)) for i in range(1000)]
    leases.append(lease("alone", gpus=8, node_name="n2", start=at(hours=24)))
    report = audit(fleet(*leases), AT, since=SINCE, until=UNTIL, ledger_at_starts=False)
    assert plain(finding_entries([f for f in report.findings if f.kind == fk.DOUBLE_BOOKED])) == [
        {
            "kind": "DoubleBooked",
            "lease": "team/l0001",
            "detail": "holds 8 slots (n1#0 … n1#7) at once with 999 other leases from 2025-11-02T00:01:00Z to "
            f"{rfc3339(min(UNTIL, AT))} (team/l0000, team/l0002, team/l0003 and 996 more): one slot is one GPU; "
            "close the leases that are not running there",
        }
    ]


def test_episodes_split_where_a_slot_is_held_once_and_slots_group_by_episode():
    """On n1: a [h24, h30) on #0-#3, b [h27, h33) on #0-#1, c [h31, h36) on #0. #0 is double-booked on [h27, h30)
    (a, b) and [h31, h33) (b, c): two episodes. #1 shares the first episode (same leases, same interval), so the
    first finding says both slots; #2 and #3 are only ever held by a. Then three leases on n2#0 chained into one
    episode: d [h24, h30), e [h29, h40), f [h35, h41): held twice on [h29, h30) and [h35, h40), once in between
    — two episodes of two leases each, not one of three."""
    a = lease("a", slot_list=[f"n1#{i}" for i in range(4)], start=at(hours=24), ended=at(hours=30))
    b = lease("b", slot_list=["n1#0", "n1#1"], start=at(hours=27), ended=at(hours=33))
    c = lease("c", slot_list=["n1#0"], start=at(hours=31), ended=at(hours=36))
    d = lease("d", slot_list=["n2#0"], start=at(hours=24), ended=at(hours=30))
    e = lease("e", slot_list=["n2#0"], start=at(hours=29), ended=at(hours=40))
    f = lease("f", slot_list=["n2#0"], start=at(hours=35), ended=at(hours=41))
    report = audit(fleet(a, b, c, d, e, f), AT, since=SINCE, until=UNTIL)
    tail = ": one slot is one GPU; close the lease that is not running there"
    assert [(x.lease, x.detail) for x in report.findings] == [
        ("team/b", f"holds slots n1#0, n1#1 also held by team/a from {rfc3339(at(hours=27))} to {rfc3339(at(hours=30))}"
         + tail),
        ("team/c", f"holds slot n1#0 also held by team/b from {rfc3339(at(hours=31))} to {rfc3339(at(hours=33))}" + tail),
        ("team/e", f"holds slot n2#0 also held by team/d from {rfc3339(at(hours=29))} to {rfc3339(at(hours=30))}" + tail),
        ("team/f", f"holds slot n2#0 also held by team/e from {rfc3339(at(hours=35))} to {rfc3339(at(hours=40))}" + tail),
    ]


def test_three_leases_at_once_name_each_other():
    """x, y, z hold n1#5 together on [h25, h28) (x and y from h25, z joins at h26): one finding on y (the second to start) with 2 others."""
    x = lease("x", slot_list=["n1#5"], start=at(hours=24), ended=at(hours=28))
    y = lease("y", slot_list=["n1#5"], start=at(hours=25), ended=at(hours=30))
    z = lease("z", slot_list=["n1#5"], start=at(hours=26), ended=at(hours=28))
    [found] = audit(fleet(x, y, z), AT, since=SINCE, until=UNTIL).findings
    assert (found.lease, found.detail) == (
        "team/y", f"holds slot n1#5 at once with 2 other leases from {rfc3339(at(hours=25))} to {rfc3339(at(hours=28))}"
        " (team/x and team/z): one slot is one GPU; close the leases that are not running there")


def test_identical_slot_lists_back_to_back_are_not_double_booked():
    """Two whole-node leases on n1, [h24, h30) and [h30, h36): the second starts as the first ends."""
    a = lease("a", gpus=8, node_name="n1", start=at(hours=24), ended=at(hours=30))
    b = lease("b", gpus=8, node_name="n1", start=at(hours=30), ended=at(hours=36))
    assert audit(fleet(a, b), AT, since=SINCE, until=UNTIL).findings == []


def test_unknown_node_and_slot():
    """ghost is not a node (UnknownNode); n1 has 8 GPUs, so n1#9 is not one of its slots (#0-#7: SlotOutOfRange,
    issue #28 — it was UnknownNode, with a text saying the node exists). A lease closed after a
    NodeFailure on a node that is gone is expected history, not a finding."""
    ghost = lease("ghost", slot_list=["ghost#0"], start=at(hours=25), ended=at(hours=26))
    ninth = lease("ninth", slot_list=["n1#9"], start=at(hours=25), ended=at(hours=26))
    failed = lease("failed", slot_list=["gone#0"], start=at(hours=25), ended=at(hours=26), closure_reason="NodeFailure")
    report = audit(fleet(ghost, ninth, failed), AT, since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {"kind": "UnknownNode", "lease": "team/ghost",
         "detail": "holds slots on ghost (not in the snapshot): fix the slot names, or restore the node if it was "
         "removed while the lease was open"},
        {"kind": "SlotOutOfRange", "lease": "team/ninth",
         "detail": "holds slot n1#9 (node n1 has 8 GPUs: slots #0-#7): an ordinal past the node's GPUs names no "
         "GPU; budgets count it, node capacity does not; fix the slot names"},
    ]


def test_unknown_run():
    """orphan (open) and stale (closed, Completed) name runs that are not in the snapshot; deleted was closed
    because its run was deleted (RunDeleted): expected, not a finding."""
    orphan = lease("orphan", gpus=2, node_name="n1", start=at(hours=25))
    stale = lease("stale", gpus=1, node_name="n2", start=at(hours=25), ended=at(hours=26))
    deleted = lease("deleted", gpus=1, node_name="n2", start=at(hours=27), ended=at(hours=28),
                    closure_reason="RunDeleted")
    report = audit(fleet(orphan, stale, deleted, runs=[]), AT, since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {"kind": "UnknownRun", "lease": "team/orphan",
         "detail": "run team/orphan is not in the snapshot but the lease still holds 2 GPUs: close it "
         "(RunDeleted) or restore the run"},
        {"kind": "UnknownRun", "lease": "team/stale",
         "detail": "run team/stale is not in the snapshot but the lease held 1 GPU: check the runRef"},
    ]


def test_unknown_envelope():
    """Paid by team/b envelope east, which does not exist (b has only west)."""
    stray = lease("stray", gpus=2, node_name="n1", paid_by=("b", "east"), start=at(hours=25), ended=at(hours=26))
    report = audit(fleet(stray), AT, since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {"kind": "UnknownEnvelope", "lease": "team/stray",
         "detail": "paid by team/b envelope east, which does not exist: its 2 GPUs are unfunded; fix paidBy or "
         "create the envelope"},
    ]


def test_acl_violation_found_at_the_lease_start():
    """partner:ext is not family of org:team (another root) and team/b west does not lend. The lease ran [h25, h26) only, so the
    ledger at the end of the window (h48) does not see it: the finding comes from the ledger at its start."""
    ext = lease("ext", "ext", owner="partner:ext", gpus=2, node_name="n1", paid_by=("team", "b", "west"),
                start=at(hours=25), ended=at(hours=26))
    report = audit(fleet(ext), AT, since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {"kind": "ACLViolation", "lease": "ext/ext",
         "detail": "at 2025-11-02T01:00:00Z: owner partner:ext is not family of org:team and team/b envelope west "
         "does not lend: 2 GPUs unfunded"},
    ]
    assert audit(fleet(ext), AT, since=SINCE, until=UNTIL, ledger_at_starts=False).findings == []


def test_overdraft_inside_the_window():
    """west funds 8 GPUs at once. big1 (8 GPUs) runs [h24, h30); big2 (8 GPUs) starts at h28 while big1 holds all
    8: at h28 big2 is unfunded. Both are closed long before h48, where the ledger alone would see nothing."""
    big1 = lease("big1", gpus=8, node_name="n1", start=at(hours=24), ended=at(hours=30))
    big2 = lease("big2", gpus=8, node_name="n2", start=at(hours=28), ended=at(hours=31))
    eight = [budget()]
    report = audit(fleet(big1, big2, budgets=eight), AT, since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {"kind": "Overdraft", "lease": "team/big2",
         "detail": "at 2025-11-02T04:00:00Z: team/b envelope west funds 8 GPUs at once: 8 of its 8 GPUs are "
         "unfunded"},
    ]
    assert report.ledger_instants == 2  # the end of the window, and h28
    assert audit(fleet(big1, big2, budgets=eight), AT, since=SINCE, until=UNTIL, ledger_at_starts=False).findings == []


def test_overdraft_when_the_envelope_window_closes():
    """west is open [T0, h36); long holds 2 GPUs on [h30, h40): at h36 it is charged outside the window."""
    budgets = [budget(envelopes=[envelope(end=at(hours=36))])]
    long = lease("long", gpus=2, node_name="n1", start=at(hours=30), ended=at(hours=40))
    report = audit(fleet(long, budgets=budgets), AT, since=SINCE, until=UNTIL)
    assert kinds(report) == [(fk.OVERDRAFT, "team/long")]
    assert report.findings[0].detail.startswith("at 2025-11-02T12:00:00Z: charged to team/b envelope west outside")


def test_unbound_namespace():
    """Namespace team has Budgets of two owners: its runs are unfunded, one finding for the namespace."""
    budgets = [budget("b"), budget("c", owner="org:other")]
    report = audit(fleet(lease("x", gpus=1, node_name="n1", start=at(hours=25)), budgets=budgets), AT,
                   since=SINCE, until=UNTIL)
    assert plain(finding_entries(report.findings)) == [
        {"kind": "UnboundNamespace", "lease": None,
         "detail": "namespace team has Budgets of 2 owners (org:other, org:team): its runs are unfunded until its "
         "Budgets name one owner"},
    ]


def test_a_windows_slot_groups_are_the_same_made_by_clip_or_from_its_slots():
    """clip groups the leases by slot list in its own loop; a window made otherwise groups them from its slots:
    the same groups, and each lease's id is the first holder of its list."""
    from datetime import timedelta
    from pathlib import Path

    from kubectl_runs.engine.audit_window import Window, clip
    from kubectl_runs.sources.files import load_snapshot

    fleet = load_snapshot([str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")])
    at = fleet.taken_at
    win = clip(fleet.leases, at - timedelta(days=400), at)
    assert len(win.leases) > 5
    again = Window(lo=win.lo, hi=win.hi, slots=list(win.slots))
    assert again.slot_members() == win.slot_members()
    assert again.slot_ids() == win.slot_ids()
    assert all(win.slots[list_id] == win.slots[i] and list_id <= i for i, list_id in enumerate(win.slot_ids()))
