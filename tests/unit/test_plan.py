"""The plan of one run (API.md §3 Plan, Reasons, Remedies): need, the three deficits, every reason code and every
remedy kind, on small hand-built fleets.

Unless a test says otherwise: namespace ``team`` is owned by ``org:team`` through Budget ``team/b`` whose
envelope ``west`` funds 8 H100 GPUs over [T0, T0+30d); nodes have 8 H100 GPUs in fabric domain d1; the
clock is T0+10h; the planned run is ``team/job``, Pending.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import pytest
from builders import at, budget, envelope, lease, node, reservation, run, slots, snapshot, to_manifest

from kubectl_runs.engine.plan import plan_run
from kubectl_runs.engine.reports import plain
from kubectl_runs.engine.run_reports import forecast_report
from kubectl_runs.model import Run
from kubectl_runs.views.plan import headline

NOW = at(hours=10)
OWNER = "org:team"


def team(concurrency: int = 8, **fields):
    return budget("b", "team", owner=OWNER, envelopes=[envelope("west", concurrency=concurrency, **fields)])


def job(gpus: int = 8, **fields) -> Run:
    fields.setdefault("phase", "Pending")
    return run("job", "team", gpus=gpus, **fields)


def one_domain(run_: Run) -> Run:
    """The run with ``allowCrossGroupSpread: false``."""
    manifest = to_manifest(run_)
    manifest["spec"].setdefault("locality", {})["allowCrossGroupSpread"] = False
    return msgspec.convert(manifest, Run)


def held(name: str, node_name: str, gpus: int, *, group: int = 0, first: int = 0, **fields: Any):
    """A lease of run ``name`` (owner org:team, paid by team/b west unless said) on ``node_name``."""
    fields.setdefault("owner", OWNER)
    fields.setdefault("start", at(hours=1))
    return lease(f"{name}-g{group}{'-' + fields['role'].lower() if 'role' in fields else ''}", "team",
                 run_name=name, group=group, slot_list=slots(node_name, gpus, first), **fields)


def plan_of(the_run: Run, *objects, when=NOW):
    return plan_run(snapshot(the_run, *objects), the_run, when)


def figures(p) -> tuple[int, int, int, int, int, int]:
    return (p.need, p.placeable, p.fundable, p.deficit, p.capacity_deficit, p.funding_deficit)


# --- need -----------------------------------------------------------------------------------------------------


def test_a_run_that_fits_and_is_funded_starts_now():
    """8 GPUs wanted, n1 has 8 free, west has 8 of headroom: need 8, placeable 8, fundable 8, no deficit, no
    reason, no remedy; the forecast is now."""
    p = plan_of(job(), team(), node("n1"))
    assert figures(p) == (8, 8, 8, 0, 0, 0)
    assert (p.reasons, p.remedies) == ((), ())
    assert plain(forecast_report(p.forecast)) == {"earliestStart": "2025-11-01T10:00:00Z", "confidence": "reported"}
    assert headline(p) == "team/job starts now: 8 GPUs can be placed and funded."


def test_need_counts_spares_per_group():
    """16 GPUs in groups of 8 with 1 spare per group: need 16 + 2 = 18. A group occupies 8 + 1 = 9 slots of its
    domain; d1 has 16 free (two nodes), which holds 1 group: placeable 9."""
    p = plan_of(job(16, group_gpus=8, spares_per_group=1), team(32), node("n1"), node("n2"))
    assert (p.need, p.spares, p.placeable, p.capacity.unit) == (18, 2, 9, 9)


def test_need_subtracts_what_the_run_already_holds():
    """A 16-GPU run holds one 8-GPU group (the other was lost): need 16 − 8 = 8, width.allocated 8; n2 is free
    and west (conc 16) has 8 left."""
    p = plan_of(job(16, phase="Running"), team(16), node("n1"), node("n2"), held("job", "n1", 8))
    assert (p.need, p.width.allocated, p.deficit) == (8, 8, 0)


@pytest.mark.parametrize(
    ("phase", "holding", "need", "growing"),
    [("Pending", 0, 8, False), ("Running", 8, 16, True), ("Running", 24, 0, False)],
    ids=["pending-starts-at-min", "running-grows-to-desired", "at-desired"],
)
def test_an_elastic_run_starts_at_its_minimum_and_grows_toward_desired(phase, holding, need, growing):
    """min 8, max 32, step 8, desired 24. Pending with nothing held: need = min = 8. Running with 8: plans toward
    desired, 24 − 8 = 16. Running with 24: need 0."""
    elastic = job(24, phase=phase, group_gpus=8,
                  malleable={"minTotalGPUs": 8, "maxTotalGPUs": 32, "stepGPUs": 8, "desiredTotalGPUs": 24})
    leases = [held("job", f"h{i}", 8, group=i) for i in range(holding // 8)]
    nodes = [node(f"h{i}") for i in range(3)] + [node("n1"), node("n2")]
    p = plan_of(elastic, team(64), *nodes, *leases)
    assert (p.need, p.growing, plain(p.width)) == (
        need, growing, {"min": 8, "max": 32, "desired": 24, "allocated": holding},
    )
    if growing:
        assert "to grow from 8 toward its desired 24" in headline(p)


def test_a_finished_run_needs_nothing():
    """A Succeeded run: need 0, no reasons, no remedies, no earliest start."""
    p = plan_of(job(phase="Succeeded"), team(), node("n1"))
    assert (p.need, p.deficit, p.reasons, p.remedies) == (0, 0, (), ())
    assert plain(forecast_report(p.forecast)) == {"earliestStart": None, "confidence": "unknown"}
    assert headline(p) == "team/job has finished (Succeeded): nothing to plan."


def test_a_reservation_domain_restricts_the_candidate_nodes():
    """The run's pending reservation is scoped to d2: n1 (d1, 8 free) does not count, n2 (d2, 4 held) gives 4;
    placeable 4, capacity deficit 4."""
    p = plan_of(
        job(), team(16), node("n1"), node("n2", domain="d2"), held("other", "n2", 4),
        reservation("job-r1", "team", run_name="job", domain="d2"),
    )
    assert (p.placeable, p.capacity_deficit, p.reservation.key) == (4, 4, "team/job-r1")
    assert [d.domain for d in p.capacity.domains] == ["d2"]


# --- reasons ----------------------------------------------------------------------------------------------------


def codes(p) -> list[str]:
    return [r.code for r in p.reasons]


def test_invalid_request_unknown_flavor():
    """gpuType B200: no node has it (nodes offer H100): InvalidRequest, placeable 0, no remedies."""
    p = plan_of(job(flavor="B200"), team(), node("n1"))
    assert codes(p) == ["InvalidRequest"]
    assert p.reasons[0].message == (
        "no node offers GPU flavor B200 (nodes here offer H100): check spec.resources.gpuType"
    )
    assert (p.placeable, p.remedies) == (0, ())
    assert headline(p).startswith("team/job cannot start: no node offers GPU flavor B200")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"malleable": {"minTotalGPUs": 16, "maxTotalGPUs": 8}},
         "spec.malleable.minTotalGPUs 16 is more than maxTotalGPUs 8"),
        ({"malleable": {"minTotalGPUs": 8, "maxTotalGPUs": 16, "desiredTotalGPUs": 32}},
         "spec.malleable.desiredTotalGPUs 32 is outside [8, 16] (min, max)"),
        ({"gpus": 12, "group_gpus": 8},
         "spec.resources.totalGPUs 12 is not a whole number of groups of 8 (spec.locality.groupGPUs)"),
    ],
    ids=["min-above-max", "desired-outside", "partial-group"],
)
def test_invalid_request_spec(fields, message):
    """Requests no plan can satisfy are InvalidRequest, with the field to fix."""
    fields = {"gpus": 8, **fields}
    p = plan_of(job(**fields), team(32), node("n1"), node("n2"))
    assert [(r.code, r.message) for r in p.reasons] == [("InvalidRequest", message)]
    # a request that cannot start as written has no start time to forecast (API.md §3: no fabricated ETA)
    assert (p.forecast.earliest_start, p.forecast.confidence) == (None, "unknown")


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        ([budget("a", "team", owner="org:a"), budget("b", "team", owner="org:b")],
         "namespace team has Budgets of 2 owners (org:a, org:b), so its runs have no owner to pay for them: make "
         "its Budgets name one owner"),
        ([budget("x", "other", owner="org:x")],
         "namespace team has no Budget, so its runs have no owner to pay for them: create a Budget in team that "
         "names the owner"),
    ],
    ids=["two-owners", "no-budget"],
)
def test_unbound_namespace(budgets, message):
    """No single owner for the run's namespace: fundable 0, UnboundNamespace, no remedies, no forecast."""
    p = plan_of(job(), *budgets, node("n1"))
    assert [(r.code, r.message) for r in p.reasons] == [("UnboundNamespace", message)]
    assert (p.fundable, p.deficit, p.remedies) == (0, 8, ())
    assert p.forecast.confidence == "unknown"


def test_no_envelope_of_the_flavor_in_the_family():
    """The owner's only envelope funds MI300X; the run wants H100: NoEnvelope, fundable 0, deficit 8."""
    p = plan_of(job(), budget("b", "team", owner=OWNER, envelopes=[envelope("mi", flavor="MI300X")]), node("n1"))
    assert codes(p) == ["NoEnvelope"]
    assert p.reasons[0].message == "no Budget of org:team, its ancestors or its siblings has an envelope of H100"
    assert "no envelope of its family pays for H100" in headline(p)


def test_window_not_open():
    """west opens at T0+2d; at T0+10h nothing funds: WindowNotOpen, and the forecast is window-aligned at the
    window's start (n1 is free, so only funding waits)."""
    p = plan_of(job(), team(start=at(days=2)), node("n1"))
    assert codes(p) == ["WindowNotOpen"]
    assert p.reasons[0].message == (
        "no H100 envelope of org:team's family is inside its window now: the first to open is team/b envelope west "
        "of org:team, on 2025-11-03 00:00 UTC (in 1 day and 14 hours)"
    )
    assert plain(forecast_report(p.forecast)) == {"earliestStart": "2025-11-03T00:00:00Z", "confidence": "window-aligned"}
    assert [(r.kind, r.target, r.gpus) for r in p.remedies] == [("Wait", OWNER, 8)]


def test_insufficient_budget():
    """16 wanted, two free nodes (16 placeable), west funds 8: funding deficit 8, capacity 0."""
    p = plan_of(job(16), team(8), node("n1"), node("n2"))
    assert figures(p) == (16, 16, 8, 8, 0, 8)
    assert [(r.code, r.message) for r in p.reasons] == [
        ("InsufficientBudget", "the H100 envelopes it may use have 8 GPUs of headroom (own 8); it needs 16"),
    ]
    assert headline(p) == "team/job is short by 8 GPUs because only 8 can be funded."


VISION = budget("vision", "vision", owner="org:mm:vision",
                envelopes=[envelope("west", concurrency=24,
                                    lending={"allow": True, "to": ["org:*"], "maxConcurrency": 16})])


def test_borrow_limit():
    """16 wanted; own 8; vision (outside the family) lends up to 16 but maxBorrowGPUs is 4: fundable 12, and 12
    more GPUs were cut by the limit (16 it could lend − 4): InsufficientBudget and BorrowLimit."""
    the_run = job(16, funding={"allowBorrow": True, "maxBorrowGPUs": 4, "sponsors": ["org:mm:vision"]})
    p = plan_of(the_run, team(8), VISION, node("n1"), node("n2"))
    assert (p.fundable, p.funding_deficit) == (12, 4)
    assert codes(p) == ["InsufficientBudget", "BorrowLimit"]
    assert p.reasons[1].message == "spec.funding.maxBorrowGPUs is 4: its sponsors would lend 12 more"


def test_acl_denied():
    """The sponsor lends only to org:xyz:*: it gives nothing; fundable 8 of 16: InsufficientBudget, ACLDenied."""
    closed = budget("vision", "vision", owner="org:mm:vision",
                    envelopes=[envelope("west", concurrency=24, lending={"allow": True, "to": ["org:xyz:*"]})])
    the_run = job(16, funding={"allowBorrow": True, "sponsors": ["org:mm:vision"]})
    p = plan_of(the_run, team(8), closed, node("n1"), node("n2"))
    assert codes(p) == ["InsufficientBudget", "ACLDenied"]
    assert p.reasons[1].message == (
        "sponsor org:mm:vision's vision/vision envelope west lends only to org:xyz:*, not to org:team"
    )


def test_insufficient_capacity():
    """16 wanted, funded by 16; n1 is free, n2 cordoned, n3 full (another run's 8): 8 free, capacity deficit 8."""
    p = plan_of(job(16), team(24), node("n1"), node("n2", unschedulable=True), node("n3"), held("other", "n3", 8))
    assert figures(p) == (16, 8, 16, 8, 8, 0)
    assert [(r.code, r.message) for r in p.reasons] == [
        ("InsufficientCapacity",
         "8 H100 GPUs are free on 2 schedulable nodes (1 more node cordoned or out of service); it needs 16"),
    ]
    assert headline(p) == "team/job is short by 8 GPUs because only 8 of 16 fit."


def test_insufficient_capacity_when_free_gpus_are_fragmented():
    """Groups of 8: n1 has 4 free (4 held), n2 (domain d2) 4 free: 8 free but no domain holds a group."""
    p = plan_of(job(8, group_gpus=8), team(16), node("n1"), node("n2", domain="d2"), held("a", "n1", 4),
                held("b", "n2", 4))
    assert (p.capacity.free, p.placeable) == (8, 0)
    assert p.reasons[0].message == (
        "8 H100 GPUs are free on 2 schedulable nodes, 0 of them in whole groups of 8; it needs 8"
    )


def test_no_single_domain():
    """Two groups of 8, one domain only: d1 and d2 each have 8 free (one group each). Spread would place 16, but
    without it the best domain holds 8: NoSingleDomain."""
    p = plan_of(one_domain(job(16, group_gpus=8)), team(16), node("n1"), node("n2", domain="d2"))
    assert (p.capacity.free, p.placeable) == (16, 8)
    assert [(r.code, r.message) for r in p.reasons] == [
        ("NoSingleDomain", "spec.locality.allowCrossGroupSpread is false and no fabric domain has room for all 2 "
                           "groups of 8: the best, d1, holds 1"),
    ]


# --- remedies ----------------------------------------------------------------------------------------------------


def remedies(p) -> list[tuple[str, str, int]]:
    return [(r.kind, r.target, r.gpus) for r in p.remedies]


def test_reclaim_unfunded():
    """n1 is held by ``squat``, minted without paidBy (unfunded): reclaiming its group frees 8, the whole need.
    Nothing else is in scope, so nothing else is listed; the lottery is not needed."""
    p = plan_of(job(), team(), node("n1"), held("squat", "n1", 8, paid_by=None))
    assert remedies(p) == [("ReclaimUnfunded", "team/squat", 8)]
    assert p.remedies[0].message == "reclaim unfunded group 0 of team/squat (frees 8)"


def test_drop_spare():
    """n1 holds ``sp``: 6 Active + 2 Spare, all funded (west 16). The run needs 2: dropping the spare lease
    frees exactly 2."""
    p = plan_of(job(2), team(16), node("n1"), held("sp", "n1", 6), held("sp", "n1", 2, first=6, role="Spare"))
    assert remedies(p) == [("DropSpare", "team/sp-g0-spare", 2)]
    assert p.remedies[0].message == "drop spare team/sp-g0-spare of team/sp (frees 2)"


def test_shrink():
    """``el`` is elastic (min 4, step 4) and holds two groups of 4 on n1: it can drop group 1 (8 → 4), which
    frees the 4 the run needs."""
    elastic = run("el", "team", gpus=8, group_gpus=4,
                  malleable={"minTotalGPUs": 4, "maxTotalGPUs": 8, "stepGPUs": 4})
    p = plan_of(job(4), team(16), node("n1"), elastic, held("el", "n1", 4), held("el", "n1", 4, group=1, first=4))
    assert remedies(p) == [("Shrink", "team/el", 4)]
    assert p.remedies[0].message == "shrink team/el from 8 to 4 (frees 4)"


def test_borrow():
    """16 wanted, own 8, two free nodes. The run lists vision as sponsor but does not allow borrowing: vision
    could lend 16 (lending cap 16, 24 − 0 used), the funding deficit is 8: Borrow 8 from org:mm:vision."""
    the_run = job(16, funding={"allowBorrow": False, "sponsors": ["org:mm:vision"]})
    p = plan_of(the_run, team(8), VISION, node("n1"), node("n2"))
    assert remedies(p) == [("Borrow", "org:mm:vision", 8)]
    assert p.remedies[0].message == (
        "borrow 8 from org:mm:vision (lending allows 16, 16 free): set spec.funding.allowBorrow: true"
    )


def test_wait():
    """n1 is held by ``busy`` (funded, not elastic, no spare), which reports completion at T0+1d: the run can
    start then. Wait names busy and the 8 GPUs it frees; the lottery could free them at activation instead."""
    busy = run("busy", "team", gpus=8, eta=at(days=1))
    p = plan_of(job(), team(16), node("n1"), busy, held("busy", "n1", 8))
    assert remedies(p) == [("Wait", "team/busy", 8), ("Lottery", "team/job", 8)]
    assert p.remedies[0].message == (
        "wait until 2025-11-02 00:00 UTC (in 14 hours): team/busy reports completion by then, freeing 8"
    )
    assert plain(forecast_report(p.forecast)) == {"earliestStart": "2025-11-02T00:00:00Z", "confidence": "reported"}


def test_lottery():
    """n1 is held by ``busy`` with no ETA and nothing gentler to take: only the lottery frees the 8 GPUs, at the
    activation of the run's reservation (its earliestStart T0, and the seed sha256("team/job-r1|T0") it draws
    with: known before the draw); no earliest start can be forecast."""
    p = plan_of(job(), team(16), node("n1"), run("busy", "team", gpus=8), held("busy", "n1", 8),
                reservation("job-r1", "team", run_name="job"))
    seed = "0x" + hashlib.sha256(b"team/job-r1|2025-11-01T00:00:00Z").hexdigest()[:16]
    assert remedies(p) == [("Lottery", "team/job-r1", 8)]
    assert p.remedies[0].message == (
        f"when reservation team/job-r1 activates (2025-11-01 00:00 UTC (10 hours ago), seed {seed}), a seeded "
        "lottery over 1 group in scope frees the remaining 8 (unfunded first, then borrowed, shared, owned)"
    )
    assert plain(p.report)["reservation"] == {"name": "team/job-r1", "earliestStart": "2025-11-01T00:00:00Z",
                                              "seed": seed, "protected": []}
    assert plain(forecast_report(p.forecast)) == {"earliestStart": None, "confidence": "unknown"}


def test_every_remedy_kind_in_api_order():
    """Four nodes, all full; west funds 40. The run wants 32.

    - n1: ``squat`` 8, unfunded → ReclaimUnfunded 8
    - n2: ``sp`` 6 Active + 2 Spare (ETA T0+2d) → DropSpare 2
    - n3: ``el`` elastic min 4 step 4, two groups of 4 (ETA T0+3d) → Shrink 8 → 4, frees 4
    - n4: ``big`` 8 (ETA T0+1d)

    Capacity deficit 32; the gentle remedies free 8 + 2 + 4 = 14, the lottery the remaining 18 (sp's 6 Active,
    el's group 0 = 4, big's 8: 18 in the conflict set). Funding: used 8 + 8 + 8 = 24 of 40 (squat is unfunded),
    headroom 16, so a funding deficit of 16 that vision (a listed sponsor, borrowing not allowed) could lend: Borrow
    16. Forecast: at T0+3d big, sp and el have released 24 and reclaiming squat frees 8: 32 placeable, and west is
    empty again: Wait until T0+3d."""
    elastic = run("el", "team", gpus=8, group_gpus=4, eta=at(days=3),
                  malleable={"minTotalGPUs": 4, "maxTotalGPUs": 8, "stepGPUs": 4})
    fleet = [
        team(40), VISION, *(node(f"n{i}") for i in range(1, 5)),
        held("squat", "n1", 8, paid_by=None),
        run("sp", "team", gpus=6, eta=at(days=2)), held("sp", "n2", 6), held("sp", "n2", 2, first=6, role="Spare"),
        elastic, held("el", "n3", 4), held("el", "n3", 4, group=1, first=4),
        run("big", "team", gpus=8, eta=at(days=1)), held("big", "n4", 8),
    ]
    p = plan_of(job(32, funding={"sponsors": ["org:mm:vision"]}), *fleet)
    assert figures(p) == (32, 0, 16, 32, 32, 16)
    assert remedies(p) == [
        ("ReclaimUnfunded", "team/squat", 8),
        ("DropSpare", "team/sp-g0-spare", 2),
        ("Shrink", "team/el", 4),
        ("Borrow", "org:mm:vision", 16),
        ("Wait", "team/el", 24),
        ("Lottery", "team/job", 18),
    ]
    assert plain(forecast_report(p.forecast)) == {"earliestStart": "2025-11-04T00:00:00Z", "confidence": "reported"}


def test_plan_json_has_exactly_the_api_keys():
    """API.md §5 plan: the top-level keys, and the keys of width, capacity, funding, forecast; round 3 adds
    ``reservation`` (the pending Reservation's draw: name, earliestStart, seed, protected; null without one)."""
    data = plain(plan_of(job(16), team(8), node("n1")).report)
    assert list(data) == [
        "run", "at", "need", "width", "capacity", "funding", "deficitGPUs", "capacityDeficitGPUs",
        "fundingDeficitGPUs", "reasons", "remedies", "forecast", "reservation",
    ]
    assert list(data["width"]) == ["min", "max", "desired", "allocated"]
    assert list(data["capacity"]) == ["freeGPUs", "placeableGPUs", "domains"]
    assert list(data["capacity"]["domains"][0]) == ["domain", "freeGPUs", "placeableGPUs", "groups"]
    assert list(data["funding"]) == ["fundableGPUs", "sources"]
    assert list(data["funding"]["sources"][0]) == [
        "namespace", "budget", "envelope", "owner", "relation", "headroomGPUs", "usableGPUs",
    ]
    assert list(data["forecast"]) == ["earliestStart", "confidence"]
    assert list(data["reasons"][0]) == ["code", "message"]
