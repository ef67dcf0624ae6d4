"""Fundable GPUs: the family walk of API.md §3 Plan (own, ancestors, siblings, then sponsors when allowBorrow,
capped by maxBorrowGPUs), windows, selectors, lending ACLs and lending.maxConcurrency, aggregate caps.

The family, unless a test says otherwise (every envelope H100, window [T0, T0+30d), clock T0+10h; two H100
nodes in region west):

- ``sys/sys``   org:ai:lab:sys (the run's namespace and owner) — ``west`` funds 8
- ``lab/lab``   org:ai:lab (parent)                             — ``pool`` funds 4
- ``ai/ai``     org:ai (grandparent)                            — ``all`` funds 2
- ``eval/eval`` org:ai:lab:eval (sibling)                       — ``west`` funds 3
- ``vision/vision`` org:ai:mm:vision (outside the family)       — ``west`` funds 16, lends to org:ai:* at most 5
- ``kid/kid``   org:ai:lab:sys:kid (a descendant)               — ``west`` funds 9: family for charging, but not
  in the funding order
"""

from __future__ import annotations

import pytest
from builders import WINDOW_END, at, budget, envelope, lease, node, run, snapshot

from kubectl_runs.engine.accounting import ledger
from kubectl_runs.engine.funding import ANCESTOR, OWN, SIBLING, SPONSOR, funding
from kubectl_runs.engine.reports import plain
from kubectl_runs.engine.run_reports import funding_report

NOW = at(hours=10)
OWNER = "org:ai:lab:sys"
NODES = (node("n1", labels={"region": "west"}), node("n2", labels={"region": "west"}))
LENDS = {"allow": True, "to": ["org:ai:*"], "maxConcurrency": 5}


def family(**changes):
    """The family's Budgets; ``changes`` replace one by namespace (None drops it)."""
    budgets = {
        "sys": budget("sys", "sys", owner=OWNER, envelopes=[envelope("west", concurrency=8)]),
        "lab": budget("lab", "lab", owner="org:ai:lab", envelopes=[envelope("pool", concurrency=4)]),
        "ai": budget("ai", "ai", owner="org:ai", envelopes=[envelope("all", concurrency=2)]),
        "eval": budget("eval", "eval", owner="org:ai:lab:eval", envelopes=[envelope("west", concurrency=3)]),
        "vision": budget("vision", "vision", owner="org:ai:mm:vision",
                         envelopes=[envelope("west", concurrency=16, lending=LENDS)]),
        "kid": budget("kid", "kid", owner="org:ai:lab:sys:kid", envelopes=[envelope("west", concurrency=9)]),
    }
    budgets.update(changes)
    return [b for b in budgets.values() if b is not None]


def pending(**fields):
    return run("job", "sys", gpus=8, phase="Pending", **fields)


def walk_of(the_run, *objects, nodes=NODES, budgets=None):
    fleet = snapshot(*nodes, *(family() if budgets is None else budgets), the_run, *objects)
    return funding(ledger(fleet, NOW), the_run, list(nodes))


def rows(result) -> list[tuple]:
    return [(s.key[0], s.relation, s.headroom, s.usable) for s in result.sources]


def test_the_walk_goes_own_ancestors_nearest_first_siblings_then_sponsors():
    """With allowBorrow and vision as sponsor: own 8, parent 4, grandparent 2, sibling 3, sponsor 5 (its lending
    cap, below its headroom 16) = 22. The descendant kid is not in the order."""
    result = walk_of(pending(funding={"allowBorrow": True, "sponsors": ["org:ai:mm:vision"]}))
    assert rows(result) == [
        ("sys", OWN, 8, 8), ("lab", ANCESTOR, 4, 4), ("ai", ANCESTOR, 2, 2), ("eval", SIBLING, 3, 3),
        ("vision", SPONSOR, 16, 5),
    ]
    assert result.fundable == 22
    assert plain(funding_report(result))["sources"][0] == {
        "namespace": "sys", "budget": "sys", "envelope": "west", "owner": OWNER, "relation": "own",
        "headroomGPUs": 8, "usableGPUs": 8,
    }


def test_without_allow_borrow_sponsors_are_not_counted_but_offered_as_lenders():
    """Sponsors listed but allowBorrow false: 8 + 4 + 2 + 3 = 17 from the family; vision could lend 5 if the
    run set allowBorrow (a Borrow remedy)."""
    result = walk_of(pending(funding={"allowBorrow": False, "sponsors": ["org:ai:mm:vision"]}))
    assert result.fundable == 17
    assert [(lender.owner, lender.room, lender.counted, lender.change) for lender in result.lenders] == [
        ("org:ai:mm:vision", 5, 0, "set spec.funding.allowBorrow: true"),
    ]


def test_a_lender_that_is_not_a_sponsor_is_offered_with_the_change_it_takes():
    """No funding spec at all: the family gives 17; vision lends to org:ai:* so it is offered, with the change
    "add it to sponsors and set allowBorrow"."""
    result = walk_of(pending())
    assert result.fundable == 17
    assert [lender.change for lender in result.lenders] == [
        "add org:ai:mm:vision to spec.funding.sponsors and set allowBorrow",
    ]


def test_headroom_is_what_the_envelope_has_left():
    """A 6-GPU lease of org:ai:lab:sys on the own envelope: own headroom 8 − 6 = 2; fundable 2+4+2+3 = 11."""
    held = lease("other-g0", "sys", owner=OWNER, gpus=6, run_name="other", paid_by=("sys", "west"),
                 start=at(hours=1))
    result = walk_of(pending(), held)
    assert rows(result)[0] == ("sys", OWN, 2, 2)
    assert result.fundable == 11


@pytest.mark.parametrize(
    ("start", "end"),
    [(at(days=1), WINDOW_END), (at(hours=-48), at(hours=-1))],
    ids=["opens-later", "already-closed"],
)
def test_an_envelope_outside_its_window_gives_nothing(start, end):
    """The own envelope's window does not contain T0+10h: it is a candidate (for forecasts) but no source;
    fundable 4 + 2 + 3 = 9."""
    own = budget("sys", "sys", owner=OWNER, envelopes=[envelope("west", concurrency=8, start=start, end=end)])
    result = walk_of(pending(), budgets=family(sys=own))
    assert [s.key[0] for s in result.sources] == ["lab", "ai", "eval"]
    assert result.fundable == 9
    assert ("sys", "sys", "west") in [c.key for c in result.candidates]


def test_an_envelope_whose_selector_matches_no_candidate_node_is_not_counted():
    """The own envelope selects region east; both nodes are in west: it is unselected; fundable 9."""
    own = budget("sys", "sys", owner=OWNER, envelopes=[envelope("west", concurrency=8, selector={"region": "east"})])
    result = walk_of(pending(), budgets=family(sys=own))
    assert result.unselected == (("sys", "sys", "west"),)
    assert result.fundable == 9


@pytest.mark.parametrize(
    ("selector", "counted"),
    [({}, True), ({"region": "*"}, True), ({"region": "west"}, True), ({"rack": "*"}, False)],
    ids=["empty", "any-region", "west", "label-missing"],
)
def test_selector_values(selector, counted):
    """``{}`` selects every node, ``*`` any value of a label the node has; a label no node has selects none."""
    own = budget("sys", "sys", owner=OWNER, envelopes=[envelope("west", concurrency=8, selector=selector)])
    result = walk_of(pending(), budgets=family(sys=own))
    assert (result.fundable == 17) is counted


def test_a_sponsor_whose_acl_refuses_gives_nothing_and_is_reported_denied():
    """vision lends only to org:xyz:*: the sponsor is denied; fundable is the family's 17."""
    vision = budget("vision", "vision", owner="org:ai:mm:vision",
                    envelopes=[envelope("west", concurrency=16, lending={"allow": True, "to": ["org:xyz:*"]})])
    result = walk_of(pending(funding={"allowBorrow": True, "sponsors": ["org:ai:mm:vision"]}),
                     budgets=family(vision=vision))
    assert result.fundable == 17
    assert [c.owner for c in result.denied] == ["org:ai:mm:vision"]


def test_max_borrow_gpus_caps_what_sponsors_give_less_what_the_run_already_borrows():
    """maxBorrowGPUs 3; the run already borrows 2 from vision (a Grow lease), so it may borrow 1 more. vision's
    lending room is 5 − 2 = 3: it gives 1 and 2 are cut (BorrowLimit)."""
    the_run = pending(funding={"allowBorrow": True, "maxBorrowGPUs": 3, "sponsors": ["org:ai:mm:vision"]})
    borrowed = lease("job-g0", "sys", owner=OWNER, gpus=2, run_name="job", paid_by=("vision", "vision", "west"),
                     start=at(hours=1))
    result = walk_of(the_run, borrowed)
    assert rows(result)[-1] == ("vision", SPONSOR, 14, 1)
    assert (result.borrow_left, result.walk.borrow_cut) == (1, 2)
    assert [lender.change for lender in result.lenders] == ["raise spec.funding.maxBorrowGPUs from 3 to 5"]


def test_aggregate_caps_limit_the_envelopes_they_cover_together():
    """The own Budget has ``a`` (8, 4 used) and ``b`` (8) under a cap of 10: the cap has 10 − 4 = 6 left. The
    walk takes a's headroom 4 (cap left 2), then only 2 of b's 8; own total 6, fundable 6 + 4 + 2 + 3 = 15."""
    own = budget("sys", "sys", owner=OWNER, envelopes=[envelope("a", concurrency=8), envelope("b", concurrency=8)],
                 aggregate_caps=[{"name": "both", "envelopes": ["a", "b"], "maxConcurrency": 10}])
    held = lease("other-g0", "sys", owner=OWNER, gpus=4, run_name="other", paid_by=("sys", "a"), start=at(hours=1))
    result = walk_of(pending(), held, budgets=family(sys=own))
    assert rows(result)[:2] == [("sys", OWN, 4, 4), ("sys", OWN, 8, 2)]
    assert result.fundable == 15


def test_envelopes_of_another_flavor_do_not_count():
    """The own Budget funds MI300X only: the H100 run gets 4 + 2 + 3 = 9."""
    own = budget("sys", "sys", owner=OWNER, envelopes=[envelope("mi", flavor="MI300X", concurrency=8)])
    assert walk_of(pending(), budgets=family(sys=own)).fundable == 9


@pytest.mark.parametrize(
    ("budgets", "unbound"),
    [
        ([budget("a", "sys", owner="org:a"), budget("b", "sys", owner="org:b")], ("org:a", "org:b")),
        ([budget("x", "elsewhere", owner="org:x")], ()),
    ],
    ids=["two-owners", "no-budget"],
)
def test_a_run_without_an_owner_cannot_be_funded(budgets, unbound):
    """A namespace whose Budgets name two owners, or that has no Budget: no owner, nothing fundable."""
    result = walk_of(pending(), budgets=budgets)
    assert (result.owner, result.unbound_owners, result.fundable, result.sources) == (None, unbound, 0, ())
