"""Invariants of ``leases audit`` on random histories (hypothesis): every lease in the window falls in exactly one
owner and one flavor, so the GPU-hours summed over ``--by owner`` equal the total and equal the sum over
``--by flavor`` (and over ``--by node``, which splits leases by slot); lease counts add up the same way; no key
peaks above the GPUs its leases hold."""

from __future__ import annotations

import pytest
from builders import at, lease, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_runs.engine.audit import audit

OWNERS = ("org:a", "org:a:x", "org:b", "ext:c")
FLAVORS = ("H100", "MI300X")
AT = at(hours=200)


@st.composite
def histories(draw):
    count = draw(st.integers(min_value=0, max_value=25))
    leases = []
    for i in range(count):
        start = draw(st.integers(min_value=0, max_value=180))
        length = draw(st.integers(min_value=0, max_value=60))
        still_open = draw(st.booleans())
        nodes = draw(st.lists(st.sampled_from(("n1", "n2", "n3")), min_size=1, max_size=3))
        leases.append(
            lease(
                f"l{i}",
                owner=draw(st.sampled_from(OWNERS)),
                flavor=draw(st.sampled_from(FLAVORS)),
                slot_list=[f"{node}#{k}" for k, node in enumerate(nodes)],
                start=at(hours=start),
                ended=None if still_open else at(hours=start + length),
                paid_by=None,
            )
        )
    since = draw(st.integers(min_value=0, max_value=150))
    until = draw(st.integers(min_value=since + 1, max_value=260))
    return snapshot(*leases), at(hours=since), at(hours=until)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_breakdowns_add_up_to_the_totals(history):
    fleet, since, until = history
    by_owner = audit(fleet, AT, since=since, until=until, by=["owner"])
    by_flavor = audit(fleet, AT, since=since, until=until, by=["flavor"])
    by_node = audit(fleet, AT, since=since, until=until, by=["node"])
    by_both = audit(fleet, AT, since=since, until=until, by=["owner", "flavor"])
    total = by_owner.total_gpu_hours
    for report in (by_owner, by_flavor, by_node, by_both):
        assert report.total_gpu_hours == pytest.approx(total, abs=1e-6)
        assert sum(r.gpu_hours for r in report.rows) == pytest.approx(total, abs=1e-6)
    for report in (by_owner, by_flavor, by_both):
        assert sum(r.leases for r in report.rows) == report.total_leases
    for report in (by_owner, by_flavor, by_node, by_both):
        for row in report.rows:
            assert row.peak_gpus > 0
            assert row.gpu_hours <= row.peak_gpus * (min(until, AT) - since).total_seconds() / 3600 + 1e-6


@settings(max_examples=100, deadline=None)
@given(histories())
def test_a_window_split_in_two_adds_up(history):
    """[since, mid) + [mid, until) = [since, until) in GPU-hours, per owner."""
    fleet, since, until = history
    mid = since + (until - since) / 2
    whole = {r.key: r.gpu_hours for r in audit(fleet, AT, since=since, until=until).rows}
    halves: dict = {}
    for lo, hi in ((since, mid), (mid, until)):
        for r in audit(fleet, AT, since=lo, until=hi).rows:
            halves[r.key] = halves.get(r.key, 0.0) + r.gpu_hours
    assert halves.keys() == whole.keys()
    for key, hours in whole.items():
        assert halves[key] == pytest.approx(hours, abs=1e-6)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 12)), min_size=0, max_size=14))
def test_episodes_are_the_maximal_intervals_held_twice(intervals):
    """``_episodes`` (C-level passes, or the sweep when there are several) against brute force over every
    instant: the maximal runs of instants held by two or more intervals, each with the intervals that meet it.
    Integer instants, half-open intervals [s, s + length)."""
    from kubectl_runs.engine.audit_slots import _episodes, _episodes_swept

    spans = [(float(s), float(s + n)) for s, n in intervals]
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    begun = [spans[i][0] for i in order]
    done = [spans[i][1] for i in order]
    expected = []
    t = 0
    while t < 50:
        if sum(s <= t < e for s, e in spans) >= 2:
            lo = t
            while sum(s <= t < e for s, e in spans) >= 2:
                t += 1
            expected.append((float(lo), float(t), {i for i, (s, e) in enumerate(spans) if s < t and e > lo}))
        t += 1
    got = [(lo, hi, set(involved)) for lo, hi, involved in _episodes(order, begun, done)]
    assert got == expected
    swept = [(lo, hi, set(involved)) for lo, hi, involved in _episodes_swept(order, begun, done)]
    assert swept == expected
