"""Forecasts (API.md §3 Forecast): the earliest start from reported completions (``status.eta``) and future
budget windows, with the confidence values reported | window-aligned | unknown, and never a made-up time.

Unless a test says otherwise: namespace ``team`` (owner org:team) has Budget ``team/b`` whose envelope ``west``
funds 16 H100 GPUs over [T0, T0+30d); nodes have 8 H100 GPUs in domain d1; the clock is T0+10h
(2025-11-01T10:00Z); the planned run ``team/job`` is Pending and wants 8 GPUs.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from builders import at, budget, envelope, lease, node, run, slots, snapshot

from kubectl_runs.engine import releases as releases_module
from kubectl_runs.engine.forecast import REPORTED, UNKNOWN, WINDOW_ALIGNED, Release, forecast
from kubectl_runs.engine.funding import Walk
from kubectl_runs.engine.plan import plan_run
from kubectl_runs.engine.reports import plain
from kubectl_runs.engine.run_reports import forecast_report

NOW = at(hours=10)
NO_FUNDING = SimpleNamespace(fundable=0, candidates=(), borrow_left=None)  # the funding stage, nothing to give
NO_LEDGER = SimpleNamespace(envelopes={})
OWNER = "org:team"


def team(concurrency: int = 16, **fields):
    return budget("b", "team", owner=OWNER, envelopes=[envelope("west", concurrency=concurrency, **fields)])


def busy(name: str, node_name: str, gpus: int = 8, *, eta=None, domain_first: int = 0, paid_by=("b", "west")):
    """Run ``name`` holding ``gpus`` on ``node_name`` (funded by west), reporting ``eta``."""
    return (
        run(name, "team", gpus=gpus, eta=eta),
        lease(f"{name}-g0", "team", owner=OWNER, run_name=name, slot_list=slots(node_name, gpus, domain_first),
              start=at(hours=1), paid_by=paid_by),
    )


def outlook(*objects, gpus: int = 8, **fields):
    the_run = run("job", "team", gpus=gpus, phase="Pending", **fields)
    return plan_run(snapshot(the_run, *objects), the_run, NOW).forecast


def test_a_reported_completion_is_the_earliest_start():
    """n1 is held by ``a`` until its reported T0+1d: then 8 are free and west still has 8: reported T0+1d."""
    result = outlook(team(), node("n1"), *busy("a", "n1", eta=at(days=1)))
    assert plain(forecast_report(result)) == {"earliestStart": "2025-11-02T00:00:00Z", "confidence": REPORTED}
    assert [r.run for r in result.releases] == ["team/a"]


def test_releases_add_up_until_the_need_is_covered():
    """16 wanted: ``a`` frees n1 at T0+1d (8, not enough), ``b`` frees n2 at T0+2d (16): reported T0+2d. ``c``
    frees n3 only at T0+5d and is not needed."""
    result = outlook(team(24), node("n1"), node("n2"), node("n3"), *busy("a", "n1", eta=at(days=1)),
                     *busy("b", "n2", eta=at(days=2)), *busy("c", "n3", eta=at(days=5)), gpus=16)
    assert plain(forecast_report(result)) == {"earliestStart": "2025-11-03T00:00:00Z", "confidence": REPORTED}
    assert [r.run for r in result.releases] == ["team/a", "team/b"]


def test_a_release_also_gives_its_funding_back():
    """n2 is free, but west (8) is used up by ``a`` on n1 until T0+1d: capacity now, funding at T0+1d."""
    result = outlook(team(8), node("n1"), node("n2"), *busy("a", "n1", eta=at(days=1)))
    assert plain(forecast_report(result)) == {"earliestStart": "2025-11-02T00:00:00Z", "confidence": REPORTED}


def test_releases_count_by_domain_for_grouped_runs():
    """A group of 8 must sit in one domain. n1 (d1) is held by ``a`` (4, ETA T0+1d) and ``c`` (4, ETA T0+3d);
    n2 (d2) by ``b`` (4, ETA T0+2d) and ``d`` (4, no ETA). At T0+2d 8 are free, 4 in each domain: no group fits;
    at T0+3d c frees n1's other 4 and d1 holds a group: reported T0+3d. (West funds 32: funding never waits.)"""
    result = outlook(
        team(32), node("n1"), node("n2", domain="d2"),
        *busy("a", "n1", 4, eta=at(days=1)), *busy("c", "n1", 4, eta=at(days=3), domain_first=4),
        *busy("b", "n2", 4, eta=at(days=2)), *busy("d", "n2", 4, domain_first=4), group_gpus=8,
    )
    assert plain(forecast_report(result)) == {"earliestStart": "2025-11-04T00:00:00Z", "confidence": REPORTED}


def test_a_window_that_opens_later_is_window_aligned():
    """west opens at T0+2d and n1 is free: nothing funds the run before then; window-aligned T0+2d."""
    result = outlook(team(start=at(days=2)), node("n1"))
    assert plain(forecast_report(result)) == {"earliestStart": "2025-11-03T00:00:00Z", "confidence": WINDOW_ALIGNED}
    assert [c.key for c in result.opened] == [("team", "b", "west")]


def test_a_window_that_opens_counts_the_leases_already_charged_to_it():
    """``later`` (T0+2d, 8 GPUs) is already charged with 4 GPUs of ``a`` (unfunded until it opens, and no ETA):
    when it opens it has 8 − 4 = 4 of headroom, less than the 8 wanted: unknown."""
    later = budget("b", "team", owner=OWNER, envelopes=[envelope("later", concurrency=8, start=at(days=2))])
    result = outlook(later, node("n1"), node("n2"), *busy("a", "n2", 4, paid_by=("b", "later")))
    assert plain(forecast_report(result)) == {"earliestStart": None, "confidence": UNKNOWN}


@pytest.mark.parametrize(
    "eta",
    [None, at(hours=9)],
    ids=["no-eta", "stale-eta"],
)
def test_without_a_reported_future_completion_there_is_no_earliest_start(eta):
    """n1 is held by ``a`` with no ETA, or an ETA already past (T0+9h < T0+10h): unknown, never a guess."""
    result = outlook(team(), node("n1"), *busy("a", "n1", eta=eta))
    assert plain(forecast_report(result)) == {"earliestStart": None, "confidence": UNKNOWN}


def test_gpus_the_resolver_frees_at_activation_mean_it_can_start_now():
    """n1 is held by ``squat``, unfunded (no paidBy): the run is short by 8 now, but at activation its reservation
    reclaims them: earliest start now (reported), no Wait."""
    result = outlook(team(), node("n1"), *busy("squat", "n1", paid_by=None))
    assert plain(forecast_report(result)) == {"earliestStart": "2025-11-01T10:00:00Z", "confidence": REPORTED}


def test_forecast_of_nothing_needed_is_now():
    """need 0: the run has what it needs; the earliest start is the instant itself."""
    result = forecast(
        at=NOW, need=0, money=NO_FUNDING, book=NO_LEDGER, free={}, unit=None, spread=True, remedies_by_run={},
        reported=[],
    )
    assert (result.earliest_start, result.confidence) == (NOW, REPORTED)


def test_forecast_walks_instants_in_order_and_asks_funding_only_when_it_fits(monkeypatch):
    """Free 0 in d1; releases of 4 at T0+1d and 4 at T0+2d; funding asked only once 8 are placeable (T0+2d)."""
    asked = []

    def state_at(book, when, given):  # the funding stage's state at ``when``: recorded, always 8 to give
        asked.append(when)
        return when

    monkeypatch.setattr(releases_module, "state_at", state_at)
    monkeypatch.setattr(releases_module, "walk", lambda candidates, state, borrow_left: Walk(8, (), 0))

    releases = [
        Release(run="ns/a", at=at(days=1), source="workload", gpus=4, freed=(("d1", 4),), charges=()),
        Release(run="ns/b", at=at(days=2), source="workload", gpus=4, freed=(("d1", 4),), charges=()),
    ]
    result = forecast(
        at=NOW, need=8, money=SimpleNamespace(fundable=8, candidates=(), borrow_left=None), book=NO_LEDGER,
        free={"d1": 0}, unit=None, spread=True, remedies_by_run={}, reported=releases,
    )
    assert (result.earliest_start, result.confidence, asked) == (at(days=2), REPORTED, [at(days=2)])
