"""The resolver (API.md §3 Remedies, §4) on small hand-built fleets, and the example fleet's recorded draw.

Unless a test says otherwise: nodes n1–n4 in domain d1 and m1 in d2, 8 H100 GPUs each; namespace team
(owner org:x:team) has a 32-GPU envelope; sib (org:x:sib, family) 16; far (org:y:far) 16 and lends to org:x:*.
The reservation team/res-r1 is for run team/res and activates at 2025-11-05T00:00:00Z.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import msgspec
import pytest
from builders import at, budget, envelope, lease, node, reservation, run, slots, snapshot

from kubectl_runs.engine import resolver
from kubectl_runs.engine.packing import free_by_node, open_leases
from kubectl_runs.engine.verify import verify
from kubectl_runs.model import GPULease, GPULeaseStatus, Snapshot
from kubectl_runs.sources.files import load_snapshot

WHEN = at("2025-11-05T00:00:00Z")
SEED = "0x" + hashlib.sha256(b"team/res-r1|2025-11-05T00:00:00Z").hexdigest()[:16]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"

NODES = [*(node(f"n{i}", domain="d1") for i in range(1, 5)), node("m1", domain="d2")]
BUDGETS = [
    budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=32)]),
    budget("b", "sib", owner="org:x:sib", envelopes=[envelope("west", concurrency=16)]),
    budget("b", "far", owner="org:y:far", envelopes=[
        envelope("west", concurrency=16, lending={"allow": True, "to": ["org:x:*"], "maxConcurrency": 16})
    ]),
]
PAID = {"owned": ("team", "b", "west"), "shared": ("sib", "b", "west"), "borrowed": ("far", "b", "west"),
        "unfunded": None}


def hand_ticket(run_key: str, group: int) -> str:
    return hashlib.sha256(f"{SEED}|{run_key}|{group}".encode()).hexdigest()


def held(name: str, node_name: str, gpus: int = 8, *, group: int = 0, cls: str = "owned", role: str = "Active",
         first: int = 0, run_name: str | None = None) -> GPULease:
    """A lease of team/<run> (org:x:team) on ``node_name`` charged so that its class is ``cls``."""
    return lease(name, "team", owner="org:x:team", run_name=run_name or name.split("-g")[0], group=group,
                 role=role, slot_list=slots(node_name, gpus, first), paid_by=PAID[cls], start=at(days=1))


def fleet(*objects, domain: str | None = None, res_gpus: int = 8, nodes=NODES) -> Snapshot:
    return snapshot(
        *nodes, *BUDGETS, run("res", "team", gpus=res_gpus, group_gpus=8),
        reservation("res-r1", "team", run_name="res", domain=domain, earliest_start=WHEN), *objects,
    )


def acts(resolution) -> list[tuple[str, str, int]]:
    return [(a.kind, a.lease, a.gpus) for a in resolution.actions]


def resolve(snap: Snapshot, deficit: int | None = None):
    """Resolve team/res-r1 at WHEN. With ``deficit``: res becomes a run without groups that needs exactly
    ``deficit`` GPUs more than are free in scope, and team's envelope funds anything (so every free slot places
    and funding never decides): the placement rule then takes candidates until that many GPUs are free."""
    if deficit is not None:
        scope = snap.reservations[0].spec.scope
        nodes = [n for n in snap.nodes if n.flavor == scope.flavor and n.schedulable
                 and scope.domain in (None, n.domain)]
        free = sum(free_by_node(nodes, open_leases(snap, WHEN)).values())
        if free + deficit > 0:
            rich = budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=1000)])
            snap = dataclasses.replace(
                snap,
                runs=tuple(run("res", "team", gpus=free + deficit) if r.name == "res" else r for r in snap.runs),
                budgets=tuple(rich if b.namespace == "team" else b for b in snap.budgets),
            )
    return resolver.resolve(snap, snap.reservations[0], WHEN)


# --- the order of remedies --------------------------------------------------------------------------------------


def test_reclaim_unfunded_comes_first_and_stops_once_covered():
    """Only n1, n2 (16 GPUs) exist and both are held: team/a (owned, n1) and team/u (unfunded, n2).
    res needs 8 and nothing is free, so the deficit is 8; reclaiming u's group frees exactly 8: no lottery.
    The conflict set is what is left: a/0 (owned, 8 GPUs) with its ticket."""
    snap = fleet(held("a-g0", "n1"), held("u-g0", "n2", cls="unfunded"), nodes=NODES[:2])
    result = resolve(snap)
    assert result.deficit_gpus == 8
    assert result.seed == SEED
    assert acts(result) == [("ReclaimUnfunded", "team/u-g0", 8)]
    assert [(e.run, e.group, e.class_, e.gpus, e.ticket) for e in result.conflict_set] == [
        ("team/a", 0, "owned", 8, hand_ticket("team/a", 0))
    ]
    assert result.freed_gpus == 8 and result.placed


def test_reclaim_takes_whole_unfunded_groups_with_their_spares():
    """u's group 0 is 6 Active + 2 Spare, all unfunded; a deficit of 3 still takes the whole group (8)."""
    snap = fleet(held("u-g0", "n1", 6, cls="unfunded"),
                 held("u-g0-spare", "n1", 2, cls="unfunded", role="Spare", first=6, run_name="u"))
    assert acts(resolve(snap, 3)) == [("ReclaimUnfunded", "team/u-g0", 6), ("ReclaimUnfunded", "team/u-g0-spare", 2)]


def test_drop_spare_comes_before_shrink_and_lottery():
    """s holds 6 Active + 2 Spare (owned) on n1, e is elastic on n2: a deficit of 2 is met by the spare."""
    snap = fleet(
        held("s-g0", "n1", 6), held("s-g0-spare", "n1", 2, role="Spare", first=6, run_name="s"),
        run("e", "team", gpus=8, group_gpus=4, malleable={"minTotalGPUs": 4, "maxTotalGPUs": 8, "stepGPUs": 4}),
        held("e-g0", "n2", 4), held("e-g1", "n2", 4, group=1, first=4),
    )
    assert acts(resolve(snap, 2)) == [("DropSpare", "team/s-g0-spare", 2)]


ELASTIC = run("e", "team", gpus=16, group_gpus=4, malleable={"minTotalGPUs": 8, "maxTotalGPUs": 16, "stepGPUs": 8})
ELASTIC_LEASES = [held(f"e-g{g}", f"n{1 + g // 2}", 4, group=g, first=4 * (g % 2)) for g in range(4)]


@pytest.mark.parametrize(
    ("deficit", "expected"),
    [
        (4, [("Shrink", "team/e-g3", 4), ("Shrink", "team/e-g2", 4)]),
        (8, [("Shrink", "team/e-g3", 4), ("Shrink", "team/e-g2", 4)]),
        (12, [("Shrink", "team/e-g3", 4), ("Shrink", "team/e-g2", 4), "lottery"]),
    ],
    ids=["half-step-rounds-up-to-a-step", "one-step", "past-the-minimum-goes-to-lottery"],
)
def test_shrink_by_whole_steps_never_below_minimum(deficit, expected):
    """e holds 4 groups of 4 (16 GPUs), min 8, step 8. Dropping group 3 alone (4 GPUs) is not a whole step, so
    group 2 goes too (8 = one step). A deficit of 12 cannot shrink further (16 − 8 = min): the remaining 4
    come from the lottery over e/0 and e/1, the lower hand-computed ticket first."""
    result = resolve(fleet(ELASTIC, *ELASTIC_LEASES), deficit)
    first = min((0, 1), key=lambda g: hand_ticket("team/e", g))
    want = [x if x != "lottery" else ("Lottery", f"team/e-g{first}", 4) for x in expected]
    assert acts(result) == want
    assert {(e.run, e.group) for e in result.conflict_set} == {("team/e", 0), ("team/e", 1)}


@pytest.mark.parametrize(
    ("deficit", "victims"),
    [(0, []), (8, ["team/b-g0"]), (9, ["team/b-g0", "team/s-g0"]), (16, ["team/b-g0", "team/s-g0"]),
     (17, ["team/b-g0", "team/s-g0", "team/o-g0"]), (99, [])],
    ids=["nothing", "borrowed", "borrowed+shared", "exactly-two", "all-three", "short"],
)
def test_lottery_takes_class_rank_before_ticket(deficit, victims):
    """Three 8-GPU groups: o owned (n1), s shared via sib (n2), b borrowed from far (n3). Whatever the
    tickets, borrowed goes first, then shared, then owned; a whole group at a time. A need that even all
    three cannot cover ("short": 99) takes none of them."""
    snap = fleet(held("o-g0", "n1"), held("s-g0", "n2", cls="shared"), held("b-g0", "n3", cls="borrowed"))
    result = resolve(snap, deficit)
    assert [a.lease for a in result.actions] == victims
    assert all(a.kind == "Lottery" for a in result.actions)
    assert [e.class_ for e in result.conflict_set] == ["borrowed", "shared", "owned"]


def test_among_equals_the_lower_ticket_loses():
    """Three owned 8-GPU groups and a deficit of 8: the one with the lowest hand-computed ticket is taken."""
    snap = fleet(held("p-g0", "n1"), held("q-g0", "n2"), held("r-g0", "n3"))
    loser = min("pqr", key=lambda r: hand_ticket(f"team/{r}", 0))
    assert [a.lease for a in resolve(snap, 8).actions] == [f"team/{loser}-g0"]


def test_only_the_scope_is_touched_and_never_the_reserving_run():
    """Scope domain d2: only m1 counts. res (8 GPUs, no groups) itself holds 4 GPUs on m1 and x holds the other
    4; n1's lease (d1) and res's own lease are out of reach. res needs 4 more: x's group is the conflict set
    and the lottery takes it. With res needing 12 (4 more than m1 has), nothing in scope would start it, so
    nothing is taken (round 3)."""
    snap = fleet(held("x-g0", "m1", 4), held("res-g0", "m1", 4, first=4), held("y-g0", "n1"), domain="d2")
    result = resolve(snap, 8)
    assert acts(result) == [("Lottery", "team/x-g0", 4)]
    assert result.placed
    assert [(e.run, e.group) for e in result.conflict_set] == [("team/x", 0)]
    short = resolve(snap, 12)
    assert acts(short) == [] and short.failure == resolver.NOT_ENOUGH_TO_FREE


def test_leases_not_open_at_the_instant_are_not_candidates():
    """A lease that ended before activation, or starts after it, holds nothing to take."""
    ended = lease("old-g0", "team", owner="org:x:team", slot_list=slots("n1", 8), paid_by=PAID["owned"],
                  start=at(days=1), ended=at(days=2))
    later = lease("new-g0", "team", owner="org:x:team", slot_list=slots("n2", 8), paid_by=PAID["owned"],
                  start=at(days=9))
    result = resolve(fleet(ended, later), 8)
    assert result.actions == () and result.conflict_set == ()


def test_closures_name_the_seed_only_for_reclaim_and_lottery():
    snap = fleet(held("u-g0", "n1", cls="unfunded"), held("s-g0", "n2", 6),
                 held("s-g0-spare", "n2", 2, role="Spare", first=6, run_name="s"), held("o-g0", "n3"))
    result = resolve(snap, 24)
    closures = [(c.lease, c.closure_reason, c.reservation, c.seed) for c in result.closures()]
    lottery_order = sorted(["s", "o"], key=lambda r: hand_ticket(f"team/{r}", 0))
    assert closures == [
        ("team/u-g0", "ReclaimUnfunded", "team/res-r1", SEED),
        ("team/s-g0-spare", "DropSpare", None, None),
        *((f"team/{r}-g0", "RandomPreempt", "team/res-r1", SEED) for r in lottery_order),
    ]
    assert result.closures()[1].status_patch("2025-11-05T00:00:00Z") == {
        "status": {"closed": True, "ended": "2025-11-05T00:00:00Z", "closureReason": "DropSpare"}
    }


# --- the deficit ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "res_gpus", "domain", "expected"),
    [
        ([], 8, None, 0),
        ([held("a-g0", "n1"), held("b-g0", "n2"), held("c-g0", "n3"), held("d-g0", "n4")], 16, "d1", 16),
        ([held("a-g0", "n1"), held("b-g0", "n2"), held("c-g0", "n3", 4)], 16, "d1", 8),
        ([held("a-g0", "n1"), held("b-g0", "n2"), held("c-g0", "n3", 4)], 16, None, 0),
        ([held("a-g0", "n1"), held("res-g0", "n2")], 16, "d1", 0),
    ],
    ids=["all-free", "domain-full", "half-node-is-no-group", "other-domain-has-room", "already-holds-half"],
)
def test_scope_deficit_counts_whole_groups_of_free_slots(objects, res_gpus, domain, expected):
    """res wants ``res_gpus`` in groups of 8. d1 has 32 slots, d2 8. Full d1 → 16 short. With n3 half used,
    d1 has 8 + 4 free = 12 → one group of 8 → 8 short. Scope without domain adds m1's group → nothing short.
    res already holding 8 needs 8 more and n3, n4 are free → nothing short."""
    snap = fleet(*objects, res_gpus=res_gpus, domain=domain)
    assert resolver.scope_deficit(snap, snap.reservations[0], WHEN) == expected


# --- the example fleet ----------------------------------------------------------------------------------------------


def before_activation(snap: Snapshot, key: str) -> Snapshot:
    """The world as the resolver saw it: the leases the activation closed reopened, the reserving run's leases
    (minted at activation) removed."""
    rsv = snap.reservations_by_key[key]
    activation = rsv.status.activation
    taken = {a.lease for a in activation.actions}
    leases = tuple(
        msgspec.structs.replace(x, status=GPULeaseStatus()) if x.key in taken else x
        for x in snap.leases
        if not (x.run_key == rsv.spec.run_ref.key and x.spec.start >= activation.at)
    )
    return Snapshot(nodes=snap.nodes, budgets=snap.budgets, runs=snap.runs, reservations=snap.reservations,
                    leases=leases)


def test_example_fleet_old_record_still_verifies():
    """rai-sys/bench-16-r1 (activated 2025-11-14T00:00:00Z, scope nv-a) was decided by the rule before round 3
    (no ``rule`` in its record: victims until their GPUs cover deficitGPUs = 16): ReclaimUnfunded lab-scratch-8
    (8), then the lottery's borrowed ablation-8 group 1 (4) and the owned group with the lowest ticket (4).
    ``seeds verify`` replays old records by their own rule."""
    snap = load_snapshot([str(EXAMPLE)])
    recorded = snap.reservations_by_key["rai-sys/bench-16-r1"].status.activation
    assert recorded.rule == "" and recorded.deficit_gpus == 16
    assert [a.kind for a in recorded.actions] == ["ReclaimUnfunded", "Lottery", "Lottery"]
    assert verify(snap.reservations_by_key["rai-sys/bench-16-r1"], snap.leases_by_key).verified
