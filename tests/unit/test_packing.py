"""Free slots and placement (API.md §3 Free capacity, Plan: candidate nodes, placeable GPUs).

Nodes have 8 GPUs of flavor H100 in domain d1 unless a test says otherwise; the clock is T0+10h.
"""

from __future__ import annotations

import pytest
from builders import at, lease, node, slots, snapshot

from kubectl_runs.engine.packing import (
    candidate_nodes,
    capacity,
    free_by_node,
    group_unit,
    open_leases,
    place,
)
from kubectl_runs.engine.reports import plain
from kubectl_runs.engine.run_reports import capacity_report

NOW = at(hours=10)
OOS = [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]


def names(nodes) -> list[str]:
    return [n.name for n in nodes]


# --- open leases ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "ended", "is_open"),
    [
        (at(hours=10), None, True),
        (at(hours=11), None, False),
        (at(hours=1), at(hours=10), False),
        (at(hours=1), at(hours=11), True),
    ],
    ids=["starts-at-t", "starts-after-t", "ended-at-t", "ends-after-t"],
)
def test_open_leases_are_those_open_on_start_to_ended(start, ended, is_open):
    """Open on [start, ended): a lease starting at T0+10h is open at T0+10h, one ending then is not."""
    one = lease("l", gpus=1, start=start, ended=ended)
    assert (open_leases(snapshot(one), NOW) == [one]) is is_open


# --- free slots ----------------------------------------------------------------------------------------------


def test_free_slots_are_the_node_slots_minus_open_leases():
    """n1 has 8 slots; an open lease holds n1#0-2 (3) and a closed one held n1#3-4: 8 − 3 = 5 free. A spare
    lease holds slots too: n2 has 8 − 2 = 6 free."""
    fleet = snapshot(
        node("n1"), node("n2"),
        lease("a", slot_list=slots("n1", 3), start=at(hours=1)),
        lease("old", slot_list=slots("n1", 2, first=3), start=at(hours=1), ended=at(hours=5)),
        lease("s", slot_list=slots("n2", 2), role="Spare", start=at(hours=1)),
    )
    assert free_by_node(fleet.nodes, open_leases(fleet, NOW)) == {"n1": 5, "n2": 6}


def test_a_slot_held_twice_is_used_once_and_unknown_slots_are_ignored():
    """Two open leases both hold n1#0 (double booked): one slot used. n1#9 does not exist on an 8-GPU node and
    ``ghost#0`` is on no node: neither counts. 8 − 1 = 7 free."""
    fleet = snapshot(
        node("n1"),
        lease("a", slot_list=["n1#0"], start=at(hours=1)),
        lease("b", slot_list=["n1#0", "n1#9", "ghost#0"], start=at(hours=2)),
    )
    assert free_by_node(fleet.nodes, open_leases(fleet, NOW)) == {"n1": 7}


def test_an_out_of_service_node_has_no_free_slots():
    """A node tainted out-of-service holds no usable slots: 0 free although no lease holds any."""
    fleet = snapshot(node("n1", taints=OOS))
    assert free_by_node(fleet.nodes, []) == {"n1": 0}


# --- candidate nodes ---------------------------------------------------------------------------------------------


def test_candidate_nodes_are_the_flavor_schedulable_and_in_the_domain():
    """Of five nodes, the candidates for H100 are the schedulable H100 ones: not the cordoned, not the out of
    service, not the MI300X; with domain d2 only n5."""
    fleet = snapshot(
        node("n1"), node("n2", unschedulable=True), node("n3", taints=OOS),
        node("n4", flavor="MI300X", vendor="amd.com/gpu"), node("n5", domain="d2"),
    )
    assert names(candidate_nodes(fleet, "H100")) == ["n1", "n5"]
    assert names(candidate_nodes(fleet, "H100", "d2")) == ["n5"]
    assert names(candidate_nodes(fleet, "MI300X")) == ["n4"]


# --- placement ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "unit", "spread", "total", "per_domain"),
    [
        ({"a": 10, "b": 7}, 4, True, 12, {"a": (8, 2), "b": (4, 1)}),
        ({"a": 10, "b": 7}, 4, False, 8, {"a": (8, 2), "b": (4, 1)}),
        ({"a": 10, "b": 7}, None, True, 17, {"a": (10, None), "b": (7, None)}),
        ({"a": 10, "b": 7}, None, False, 17, {"a": (10, None), "b": (7, None)}),
        ({"a": 3, "b": 3}, 4, True, 0, {"a": (0, 0), "b": (0, 0)}),
        ({}, 8, False, 0, {}),
    ],
    ids=["groups-spread", "groups-one-domain", "no-groups", "no-groups-ignores-spread", "fragmented", "no-nodes"],
)
def test_place(free, unit, spread, total, per_domain):
    """Each domain holds floor(free / unit) groups: a 10 → 2 groups of 4 = 8, b 7 → 1 group = 4; spread sums
    them (12), one domain takes the best (8); without groups every free slot counts (17); 3 + 3 free hold no
    group of 4 although 6 are free."""
    assert place(free, unit, spread) == (total, per_domain)


def test_a_group_footprint_includes_its_spares():
    """groupGPUs 4 with 1 spare per group occupies 5 slots: a domain with 10 free holds 2 groups = 10."""
    unit = group_unit(4, 1)
    assert unit == 5
    assert place({"a": 10}, unit, True) == (10, {"a": (10, 2)})


def test_capacity_counts_free_and_placeable_per_domain_and_the_excluded_nodes():
    """d1: n1 (8 free − 3 held = 5) and n2 cordoned (excluded); d2: n3 8 free, n4 out of service (excluded).
    Groups of 4: d1 holds 1 group (4), d2 holds 2 (8): placeable 12 of 13 free; 2 nodes excluded."""
    fleet = snapshot(
        node("n1"), node("n2", unschedulable=True), node("n3", domain="d2"), node("n4", domain="d2", taints=OOS),
        lease("a", slot_list=slots("n1", 3), start=at(hours=1)),
    )
    room = capacity(fleet, open_leases(fleet, NOW), "H100", unit=4, spread=True)
    assert (room.free, room.placeable, room.excluded_nodes, room.flavor_nodes) == (13, 12, 2, 4)
    assert plain(capacity_report(room).domains) == [
        {"domain": "d1", "freeGPUs": 5, "placeableGPUs": 4, "groups": 1},
        {"domain": "d2", "freeGPUs": 8, "placeableGPUs": 8, "groups": 2},
    ]
    assert room.best_domain.domain == "d2"


def test_capacity_in_a_reservation_domain_sees_only_that_domain():
    """The reservation's scope names d1: only n1 (8 free) counts, not n2 in d2."""
    fleet = snapshot(node("n1"), node("n2", domain="d2"))
    room = capacity(fleet, [], "H100", domain="d1")
    assert (room.free, room.placeable, [d.domain for d in room.domains]) == (8, 8, ["d1"])


def test_capacity_of_a_flavor_no_node_has_is_empty():
    """No node is labelled B200: no domains, 0 free, flavor_nodes 0 (the plan's InvalidRequest)."""
    room = capacity(snapshot(node("n1")), [], "B200")
    assert (room.free, room.placeable, room.flavor_nodes, room.domains) == (0, 0, 0, ())


def test_amd_nodes_count_their_gpus():
    """An MI300X node with amd.com/gpu 8 offers 8 slots."""
    fleet = snapshot(node("m1", flavor="MI300X", vendor="amd.com/gpu"))
    assert capacity(fleet, [], "MI300X").free == 8
