"""Invariants of the plan on random fleets (hypothesis): placeable GPUs never exceed free ones, the deficit is 0
exactly when the run fits and is fundable, the three deficits follow API.md §3, funding never takes more than an
envelope's headroom, remedies come in API order, forecasts never invent a time — and planning never changes the
snapshot it reads.

A fleet: 1-3 fabric domains of 1-3 nodes (4 or 8 H100 GPUs, some cordoned); leases of other runs filling some
slots (funded by the family's envelopes or unfunded, Active or Spare, some runs elastic, some reporting ETAs);
Budgets for the run's owner org:t:a, its parent org:t, its sibling org:t:b and an outsider org:x that may lend;
windows open now or opening later. The planned run ``a/job`` asks for 4-24 GPUs, maybe in groups, with spares,
in one domain, elastic, borrowing.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
from builders import T0, WINDOW_END, budget, envelope, lease, node, run, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_runs.engine.forecast import UNKNOWN
from kubectl_runs.engine.plan import REMEDY_KINDS, plan_run
from kubectl_runs.engine.reports import plain
from kubectl_runs.model import Run

NOW = T0 + timedelta(hours=10)
OWNERS = {"a": "org:t:a", "t": "org:t", "b": "org:t:b", "x": "org:x"}
PAYERS = [("a", "b", "w"), ("t", "b", "w"), ("b", "b", "w"), ("x", "b", "w"), None]


@st.composite
def fleets(draw):
    objects: list = []
    for namespace, owner in OWNERS.items():
        opens_later = draw(st.booleans()) if namespace != "a" else draw(st.sampled_from([False, False, True]))
        lending = None
        if namespace == "x" and draw(st.booleans()):
            lending = {"allow": True, "to": [draw(st.sampled_from(["org:t:*", "*", "org:y:*"]))],
                       "maxConcurrency": draw(st.integers(0, 16))}
        objects.append(budget("b", namespace, owner=owner, envelopes=[envelope(
            "w", concurrency=draw(st.integers(1, 24)), start=T0 + timedelta(days=2) if opens_later else T0,
            end=WINDOW_END, lending=lending,
        )]))
    nodes = []
    for d in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 3))):
            nodes.append(node(f"n{d}{i}", gpus=draw(st.sampled_from([4, 8])), domain=f"d{d}",
                              unschedulable=draw(st.booleans()) and draw(st.booleans())))
    objects += nodes
    count = 0
    for n in nodes:
        used = 0
        while used < n.gpus and draw(st.booleans()):
            size = draw(st.integers(1, n.gpus - used))
            namespace = draw(st.sampled_from(["a", "t", "b", "x"]))
            name = f"r{count}"
            count += 1
            elastic = draw(st.booleans())
            objects.append(run(
                name, namespace, gpus=size,
                eta=NOW + timedelta(hours=draw(st.integers(-5, 72))) if draw(st.booleans()) else None,
                malleable={"minTotalGPUs": 1, "maxTotalGPUs": size, "stepGPUs": 1} if elastic else None,
            ))
            objects.append(lease(
                f"{name}-g0", namespace, owner=OWNERS[namespace], run_name=name,
                slot_list=[f"{n.name}#{k}" for k in range(used, used + size)],
                role=draw(st.sampled_from(["Active", "Active", "Spare"])), paid_by=draw(st.sampled_from(PAYERS)),
                start=T0 + timedelta(hours=1),
            ))
            used += size
    return objects


@st.composite
def runs(draw) -> Run:
    gpus = draw(st.sampled_from([4, 8, 12, 16, 24]))
    group = draw(st.sampled_from([None, 4]))
    funding = None
    if draw(st.booleans()):
        funding = {"allowBorrow": draw(st.booleans()), "sponsors": ["org:x"]}
        if draw(st.booleans()):
            funding["maxBorrowGPUs"] = draw(st.integers(0, 16))
    malleable = None
    if draw(st.booleans()):
        malleable = {"minTotalGPUs": 4, "maxTotalGPUs": 24, "stepGPUs": 4, "desiredTotalGPUs": gpus}
    built = run("job", "a", gpus=gpus, phase="Pending", group_gpus=group,
                spares_per_group=draw(st.integers(0, 1)), funding=funding, malleable=malleable)
    if group and not draw(st.booleans()):
        manifest = msgspec.to_builtins(built)
        manifest["spec"]["locality"]["allowCrossGroupSpread"] = False
        built = msgspec.convert(manifest, Run)
    return built


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(fleet=fleets(), the_run=runs())
def test_plan_invariants(fleet, the_run):
    world = snapshot(*fleet, the_run)
    before = msgspec.json.encode([world.nodes, world.budgets, world.runs, world.reservations, world.leases])
    plan = plan_run(world, the_run, NOW)
    after = msgspec.json.encode([world.nodes, world.budgets, world.runs, world.reservations, world.leases])
    assert before == after, "planning changed the snapshot"

    room = plan.capacity
    assert 0 <= plan.placeable <= room.free
    for domain in room.domains:
        assert 0 <= domain.placeable <= domain.free

    need, placeable, fundable = plan.need, plan.placeable, plan.fundable
    assert plan.capacity_deficit == max(0, need - placeable)
    assert plan.funding_deficit == max(0, need - fundable)
    assert plan.deficit == max(0, need - min(placeable, fundable))
    assert (plan.deficit == 0) == (placeable >= need and fundable >= need)

    sources = plan.funding.sources
    assert all(0 <= s.usable <= s.headroom for s in sources)
    assert sum(s.usable for s in sources) == fundable

    kinds = [REMEDY_KINDS.index(r.kind) for r in plan.remedies]
    assert kinds == sorted(kinds)
    assert all(r.gpus > 0 for r in plan.remedies)
    if plan.deficit == 0:
        assert plan.remedies == ()

    outlook = plan.forecast
    assert (outlook.earliest_start is None) == (outlook.confidence == UNKNOWN)
    if outlook.earliest_start is not None:
        assert outlook.earliest_start >= NOW


@SETTINGS
@given(fleet=fleets(), the_run=runs())
def test_planning_twice_gives_the_same_plan(fleet, the_run):
    """A pure function of (snapshot, run, at): the same JSON every time."""
    world = snapshot(*fleet, the_run)
    assert plain(plan_run(world, the_run, NOW).report) == plain(plan_run(world, the_run, NOW).report)
