"""Invariants of the lottery and the resolver (API.md §4), by hypothesis.

- the victims are a pure function of (seed, conflict set, deficit);
- the freed GPUs cover the deficit whenever the conflict set (or the scope) holds enough, with no group more
  than needed;
- no group of a better class is taken while a group of a worse class remains (in particular no owned group
  while an unfunded one remains);
- whatever the resolver decides, recording it and replaying it with `verify` says verified.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from builders import activated, budget, envelope, lease, node, preempted, reservation, run, slots, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_runs.engine import lottery
from kubectl_runs.engine import verify as verification
from kubectl_runs.engine.codes import CLASS_RANK
from kubectl_runs.engine.plan import startable
from kubectl_runs.engine.resolver import in_scope, resolve
from kubectl_runs.model import ConflictEntry, Snapshot

CLASSES = list(CLASS_RANK)

seeds = st.integers(min_value=0, max_value=2**64 - 1).map(lambda n: f"0x{n:016x}")


@st.composite
def conflict_sets(draw) -> list[ConflictEntry]:
    """Up to 12 distinct (run, group) entries with any class and 1–16 GPUs."""
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(["a/x", "a/y", "b/x", "c/z"]), st.integers(0, 5)), unique=True, max_size=12
        )
    )
    return [
        ConflictEntry(run=r, group=g, owner="org:o", class_=draw(st.sampled_from(CLASSES)),
                      gpus=draw(st.integers(1, 16)), ticket=draw(st.sampled_from(["", "ff", "0" * 64])))
        for r, g in keys
    ]


deficits = st.integers(min_value=-4, max_value=120)


def keys(entries) -> list[tuple[str, int]]:
    return [(e.run, e.group) for e in entries]


@given(seeds, conflict_sets(), deficits, st.randoms(use_true_random=False))
def test_victims_are_a_pure_function_of_seed_conflict_set_and_deficit(seed, entries, deficit, rnd):
    """Shuffling the set, or changing what is written in its ticket fields, does not change the victims."""
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    garbled = [
        ConflictEntry(run=e.run, group=e.group, owner=e.owner, class_=e.class_, gpus=e.gpus, ticket="junk")
        for e in shuffled
    ]
    expected = keys(lottery.victims(seed, entries, deficit))
    assert keys(lottery.victims(seed, shuffled, deficit)) == expected
    assert keys(lottery.victims(seed, garbled, deficit)) == expected


@given(seeds, conflict_sets(), deficits)
def test_freed_covers_the_deficit_when_the_set_holds_enough_and_takes_no_group_too_many(seed, entries, deficit):
    taken = lottery.victims(seed, entries, deficit)
    freed = sum(e.gpus for e in taken)
    if sum(e.gpus for e in entries) >= deficit:
        assert freed >= deficit
    else:
        assert keys(taken) == keys(lottery.draw_order(seed, entries))  # everything, and still short
    if taken:
        assert freed - taken[-1].gpus < deficit  # the last group was needed


@given(seeds, conflict_sets(), deficits)
def test_no_better_class_is_taken_while_a_worse_one_remains(seed, entries, deficit):
    """If a group of class rank r is taken, every group of a lower rank is taken too; in particular no owned
    group is taken while an unfunded group of the conflict set remains."""
    taken = set(keys(lottery.victims(seed, entries, deficit)))
    left = [e for e in entries if (e.run, e.group) not in taken]
    for e in entries:
        if (e.run, e.group) in taken:
            assert all(CLASS_RANK[x.class_] >= CLASS_RANK[e.class_] for x in left)
    if any(e.class_ == "owned" and (e.run, e.group) in taken for e in entries):
        assert not any(x.class_ == "unfunded" for x in left)


@given(seeds, conflict_sets())
def test_draw_order_is_sorted_by_rank_then_recomputed_ticket(seed, entries):
    order = lottery.draw_order(seed, entries)
    assert [(CLASS_RANK[e.class_], e.ticket) for e in order] == sorted(
        (CLASS_RANK[e.class_], lottery.ticket(seed, e.run, e.group)) for e in entries
    )


# --- the resolver on generated fleets ------------------------------------------------------------------------------

WHEN = datetime(2025, 11, 5, tzinfo=UTC)
NODES = [node(f"n{i}", domain="d1" if i % 2 == 0 else "d2") for i in range(6)]  # 48 GPUs, 24 per domain
BUDGETS = [
    budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=12)]),
    budget("b", "sib", owner="org:x:sib", envelopes=[envelope("west", concurrency=6)]),
    budget("b", "far", owner="org:y:far", envelopes=[
        envelope("west", concurrency=16, lending={"allow": True, "to": ["org:x:*"], "maxConcurrency": 8})
    ]),
]
OWNERS = {"team": "org:x:team", "sib": "org:x:sib", "other": "org:x:other"}
PAYERS = [None, ("team", "b", "west"), ("sib", "b", "west"), ("far", "b", "west")]


@st.composite
def fleets(draw) -> tuple[Snapshot, int]:
    """A reserving run team/res and up to 5 other runs with 1–3 groups of 1–6 GPUs (sometimes a spare, some
    elastic), slots dealt node after node; payers at random (unfunded, owned, shared, borrowed, overdrawn)."""
    free = [slot for n in NODES for slot in slots(n.name, 8)]
    want = draw(st.integers(1, 40))  # res needs this many GPUs (no groups), funded or not
    objects: list = [*NODES, *BUDGETS, run("res", "team", gpus=want, phase=None)]
    for index in range(draw(st.integers(1, 5))):
        namespace = draw(st.sampled_from(sorted(OWNERS)))
        name = f"r{index}"
        group_count = draw(st.integers(1, 3))
        group_gpus = draw(st.integers(1, 6))
        spares = draw(st.integers(0, 1))
        elastic = draw(st.booleans())
        total = group_count * group_gpus
        malleable = (
            {"minTotalGPUs": group_gpus, "maxTotalGPUs": total, "stepGPUs": draw(st.sampled_from([1, group_gpus]))}
            if elastic
            else None
        )
        objects.append(run(name, namespace, gpus=total, group_gpus=group_gpus, spares_per_group=spares,
                           malleable=malleable))
        for group in range(group_count):
            for role, count in (("Active", group_gpus), ("Spare", spares)):
                if not count or len(free) < count:
                    continue
                taken, free = free[:count], free[count:]
                objects.append(lease(
                    f"{name}-g{group}" + ("-spare" if role == "Spare" else ""), namespace, owner=OWNERS[namespace],
                    run_name=name, group=group, role=role, slot_list=taken, paid_by=draw(st.sampled_from(PAYERS)),
                ))
        free = free[draw(st.integers(0, 3)):]  # leave holes between runs now and then
    domain = draw(st.sampled_from([None, "d1", "d2"]))
    objects.append(reservation("res-r1", "team", run_name="res", domain=domain, earliest_start=WHEN))
    return snapshot(*objects), want


def _after(snap: Snapshot, resolution) -> Snapshot:
    """The snapshot once the activation is recorded and the leases it took are closed."""
    closures = {c.lease: c for c in resolution.closures()}
    leases = tuple(
        preempted(x, ended=WHEN, closure_reason=closures[x.key].closure_reason,
                  reservation=closures[x.key].reservation, seed=closures[x.key].seed)
        if x.key in closures else x
        for x in snap.leases
    )
    rsv = activated(snap.reservations[0], lottery.activation_json(resolution.activation()))
    return Snapshot(nodes=snap.nodes, budgets=snap.budgets, runs=snap.runs, reservations=(rsv,), leases=leases)


relaxed = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@relaxed
@given(fleets())
def test_resolver_takes_the_shortest_prefix_that_starts_the_run_or_nothing(fleet):
    """Round 3: when the activation takes anything, res starts by admission's gate once it is taken, and not
    without its last step; when nothing would start it, nothing is taken. Only open leases in scope, never
    res's own, each at most once."""
    snap, _want = fleet
    rsv = snap.reservations[0]
    resolution = resolve(snap, rsv, WHEN)
    res = snap.runs_by_key["team/res"]

    def starts_without(keys: set[str]) -> bool:
        kept = tuple(x for x in snap.leases if x.key not in keys)
        return startable(dataclasses.replace(snap, leases=kept), res, WHEN).starts

    closed = [a.lease for a in resolution.actions]
    assert len(closed) == len(set(closed))
    if not resolution.placed:
        assert closed == [] and not starts_without({x.key for x in snap.leases if x.run_key != "team/res"
                                                    and in_scope(snap, rsv, x)})
        return
    assert starts_without(set(closed))
    if closed:
        last = resolution.actions[-1]
        step = {a.lease for a in resolution.actions if (a.kind, a.run, a.group) == (last.kind, last.run, last.group)}
        assert not starts_without(set(closed) - step)
    for action in resolution.actions:
        taken = snap.leases_by_key[action.lease]
        assert taken.run_key != "team/res" and in_scope(snap, rsv, taken) and taken.open_at(WHEN)


@relaxed
@given(fleets())
def test_resolver_takes_no_owned_group_while_an_unfunded_one_is_left(fleet):
    snap, _want = fleet
    resolution = resolve(snap, snap.reservations[0], WHEN)
    drawn = {(a.run, a.group) for a in resolution.actions if a.kind == lottery.LOTTERY}
    classes = {(e.run, e.group): e.class_ for e in resolution.conflict_set}
    left = [cls for key, cls in classes.items() if key not in drawn]
    if any(classes[key] == "owned" for key in drawn):
        assert "unfunded" not in left


@relaxed
@given(fleets())
def test_resolver_is_replayable_and_its_record_verifies(fleet):
    """The same decision from the objects in any order; once recorded, `verify` finds no difference."""
    snap, _want = fleet
    resolution = resolve(snap, snap.reservations[0], WHEN)
    reordered = Snapshot(nodes=snap.nodes[::-1], budgets=snap.budgets, runs=snap.runs[::-1],
                         reservations=snap.reservations, leases=snap.leases[::-1])
    assert resolve(reordered, reordered.reservations[0], WHEN) == resolution
    after = _after(snap, resolution)
    (check,) = verification.verify_all(after)
    assert check.differences == ()
