"""The lottery of API.md §4: seed, tickets, draw order, victims, and `verify` on hand-built records.

Every hex value a test expects is computed here from the formula with hashlib, never copied from the code's
output.
"""

from __future__ import annotations

import hashlib

import pytest
from builders import activated, at, lease, preempted, reservation, run, snapshot

from kubectl_runs.engine import lottery
from kubectl_runs.engine import verify as verification
from kubectl_runs.engine.reports import plain
from kubectl_runs.model import ConflictEntry

RESERVATION = "team/r1"
ACTIVATED_AT = "2025-11-01T00:15:00Z"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The seed of team/r1 activated at 2025-11-01T00:15:00Z, by the formula: "0x" + sha256("team/r1|<at>")[:16].
SEED = "0x" + sha256(f"{RESERVATION}|{ACTIVATED_AT}")[:16]


def hand_ticket(run_key: str, group: int, seed: str = SEED) -> str:
    return sha256(f"{seed}|{run_key}|{group}")


def entry(run_key: str, group: int, cls: str, gpus: int, ticket: str = "") -> ConflictEntry:
    return ConflictEntry(run=run_key, group=group, owner="org:x", class_=cls, gpus=gpus, ticket=ticket)


# --- the formulas -----------------------------------------------------------------------------------------------


def test_seed_is_sha256_of_name_and_rfc3339_time_truncated_to_16_hex():
    """``0x`` + the first 16 hex digits of sha256("team/r1|2025-11-01T00:15:00Z"); the instant is written in
    RFC 3339 UTC with seconds precision whatever its timezone or microseconds."""
    expected = "0x" + hashlib.sha256(b"team/r1|2025-11-01T00:15:00Z").hexdigest()[:16]
    assert lottery.derive_seed("team/r1", at("2025-11-01T00:15:00Z")) == expected
    assert lottery.derive_seed("team/r1", at(minutes=15, microseconds=999)) == expected
    assert len(expected) == 18


def test_example_fleet_seed_matches_a_shell_sha256sum():
    """`printf 'rai-sys/bench-16-r1|2025-11-14T00:00:00Z' | sha256sum | cut -c1-16` gives 842ab08bbd07c729
    (run by hand once; here recomputed with hashlib)."""
    digest = hashlib.sha256(b"rai-sys/bench-16-r1|2025-11-14T00:00:00Z").hexdigest()
    assert digest[:16] == "842ab08bbd07c729"
    assert lottery.derive_seed("rai-sys/bench-16-r1", at("2025-11-14T00:00:00Z")) == "0x842ab08bbd07c729"


@pytest.mark.parametrize(
    ("run_key", "group"),
    [("team/a", 0), ("team/a", 1), ("other/b", 0), ("other/b", 12)],
    ids=["a-g0", "a-g1", "b-g0", "b-g12"],
)
def test_ticket_is_full_sha256_of_seed_run_and_group(run_key, group):
    """ticket = sha256(f"{seed}|{ns}/{name}|{group}") as 64 hex digits (the seed keeps its 0x prefix)."""
    expected = hashlib.sha256(f"{SEED}|{run_key}|{group}".encode()).hexdigest()
    assert lottery.ticket(SEED, run_key, group) == expected
    assert len(expected) == 64


# --- the draw on a small conflict set -----------------------------------------------------------------------------

# Five groups: one of each class and two owned ones, whose order only the tickets decide.
CONFLICT_SET = [
    entry("team/a", 0, "owned", 8),
    entry("team/a", 1, "owned", 8),
    entry("team/b", 0, "borrowed", 4),
    entry("team/c", 0, "shared", 4),
    entry("team/d", 0, "unfunded", 2),
]


def owned_by_ticket() -> list[tuple[str, int]]:
    """The two owned groups in hand-computed ticket order."""
    return sorted([("team/a", 0), ("team/a", 1)], key=lambda g: hand_ticket(*g))


def test_draw_order_is_class_rank_then_ticket():
    """unfunded d, borrowed b, shared c come first whatever their tickets; the owned a/0 and a/1 follow in the
    order of their hand-computed tickets; every ticket is recomputed from the seed."""
    order = lottery.draw_order(SEED, CONFLICT_SET)
    assert [(e.run, e.group) for e in order] == [
        ("team/d", 0), ("team/b", 0), ("team/c", 0), *owned_by_ticket(),
    ]
    assert [e.ticket for e in order] == [hand_ticket(e.run, e.group) for e in order]


@pytest.mark.parametrize(
    ("deficit", "how_many"),
    [(0, 0), (-4, 0), (1, 1), (2, 1), (3, 2), (6, 2), (7, 3), (10, 3), (11, 4), (18, 4), (19, 5), (26, 5), (99, 5)],
    ids=["zero", "negative", "1", "2", "3", "6", "7", "10", "11", "18", "19", "26-all", "more-than-all"],
)
def test_victims_are_whole_groups_until_the_deficit_is_covered(deficit, how_many):
    """Draw order d(2) b(4) c(4) owned(8) owned(8): cumulative GPUs 2, 6, 10, 18, 26. A deficit of 3 takes d
    and b (6 ≥ 3); 10 takes three; 11 needs the first owned group; 19 both; more than 26 takes all 26."""
    expected = [("team/d", 0), ("team/b", 0), ("team/c", 0), *owned_by_ticket()][:how_many]
    assert [(e.run, e.group) for e in lottery.victims(SEED, CONFLICT_SET, deficit)] == expected


def test_victims_ignore_recorded_tickets_and_input_order():
    """Tickets are recomputed from the seed: garbage in the ticket field and a reversed list change nothing."""
    garbled = [entry(e.run, e.group, e.class_, e.gpus, ticket="f" * 64) for e in reversed(CONFLICT_SET)]
    assert lottery.victims(SEED, garbled, 11) == lottery.victims(SEED, CONFLICT_SET, 11)


def test_a_different_seed_can_reorder_the_owned_groups():
    """Find (by hand hashing) a seed under which a/0 and a/1 swap places relative to SEED; the draw follows."""
    base = owned_by_ticket()
    other = next(
        s for s in (f"0x{i:016x}" for i in range(100))
        if sorted(base, key=lambda g: hand_ticket(*g, seed=s)) != base
    )
    drawn = lottery.victims(other, CONFLICT_SET, 11)
    assert (drawn[-1].run, drawn[-1].group) == base[1]


# --- verify on a hand-built record ----------------------------------------------------------------------------------

# team/r1 (run team/big) activated at 00:15 with a deficit of 12: it reclaimed the unfunded team/d group 0
# (2 GPUs), leaving 10 for the lottery over {b/0 borrowed 4, c/0 shared 4, a/0 owned 8, a/1 owned 8}:
# b (4), then c (4 + 4 = 8 < 10), then the first owned group by ticket (8 + 8 = 16 ≥ 10).
WHEN = at(ACTIVATED_AT)
LOTTERY_SET = [e for e in CONFLICT_SET if e.class_ != "unfunded"]


def leases_before():
    return {
        ("team/a", 0): lease("a-g0", run_name="a", group=0, gpus=8, node_name="n1"),
        ("team/a", 1): lease("a-g1", run_name="a", group=1, gpus=8, node_name="n2"),
        ("team/b", 0): lease("b-g0", run_name="b", gpus=4, node_name="n3"),
        ("team/c", 0): lease("c-g0", run_name="c", gpus=4, node_name="n4"),
        ("team/d", 0): lease("d-g0", run_name="d", gpus=2, node_name="n5", paid_by=None),
    }


def honest_record() -> tuple[dict, dict]:
    """(activation manifest, leases by group) as the resolver would have written them."""
    first_owned = owned_by_ticket()[0]
    victims = [("team/b", 0), ("team/c", 0), first_owned]
    gpus = {("team/a", 0): 8, ("team/a", 1): 8, ("team/b", 0): 4, ("team/c", 0): 4}
    before = leases_before()
    actions = [{"kind": "ReclaimUnfunded", "run": "team/d", "group": 0, "lease": "team/d-g0", "gpus": 2}]
    actions += [
        {"kind": "Lottery", "run": g[0], "group": g[1], "lease": before[g].key, "gpus": gpus[g]} for g in victims
    ]
    activation = {
        "at": ACTIVATED_AT,
        "seed": SEED,
        "deficitGPUs": 12,
        "conflictSet": [
            {"run": e.run, "group": e.group, "owner": "org:x", "class": e.class_, "gpus": e.gpus,
             "ticket": hand_ticket(e.run, e.group)}
            for e in LOTTERY_SET
        ],
        "actions": actions,
        "freedGPUs": 2 + 4 + 4 + 8,
    }
    after = dict(before)
    after[("team/d", 0)] = preempted(
        before[("team/d", 0)], ended=WHEN, closure_reason="ReclaimUnfunded", reservation=RESERVATION, seed=SEED
    )
    for g in victims:
        after[g] = preempted(before[g], ended=WHEN, reservation=RESERVATION, seed=SEED)
    return activation, after


def check(activation: dict, leases: dict) -> verification.Verification:
    rsv = activated(reservation("r1", run_name="big"), activation)
    return verification.verify(rsv, {x.key: x for x in leases.values()})


def test_honest_record_is_verified():
    result = check(*honest_record())
    assert result.differences == ()
    assert result.verified
    assert result.victims == (("team/b", 0), ("team/c", 0), owned_by_ticket()[0])
    assert plain(result.check) == {"name": "team/r1", "seed": SEED, "verified": True, "differences": []}


def _edit_seed(activation, leases):
    activation["seed"] = "0x0000000000000000"


def _swap_victim(activation, leases):
    second = owned_by_ticket()[1]
    action = activation["actions"][-1]
    action.update(run=second[0], group=second[1], lease=leases[second].key)
    leases[second] = preempted(leases[second], ended=WHEN, reservation=RESERVATION, seed=SEED)


def _reorder(activation, leases):
    actions = activation["actions"]
    actions[1], actions[2] = actions[2], actions[1]


def _drop_lease_seed(activation, leases):
    leases[("team/b", 0)] = preempted(leases[("team/b", 0)], ended=WHEN, reservation=RESERVATION)


def _other_lease_seed(activation, leases):
    leases[("team/c", 0)] = preempted(leases[("team/c", 0)], ended=WHEN, reservation=RESERVATION, seed="0x1")


def _entry(activation, run_key):
    return next(e for e in activation["conflictSet"] if e["run"] == run_key)


def _edit_ticket(activation, leases):
    _entry(activation, "team/b")["ticket"] = "0" * 64


def _reopen_victim(activation, leases):
    leases[("team/b", 0)] = lease("b-g0", run_name="b", gpus=4, node_name="n3")


def _wrong_reason(activation, leases):
    leases[("team/d", 0)] = preempted(
        leases[("team/d", 0)], ended=WHEN, closure_reason="RandomPreempt", reservation=RESERVATION, seed=SEED
    )


def _freed(activation, leases):
    activation["freedGPUs"] = 20


def _missing_lease(activation, leases):
    del leases[("team/c", 0)]


def _other_reservation(activation, leases):
    leases[("team/c", 0)] = preempted(leases[("team/c", 0)], ended=WHEN, reservation="team/r0", seed=SEED)


def _too_few(activation, leases):
    activation["actions"].pop()
    activation["freedGPUs"] -= 8


def _unknown_class(activation, leases):
    _entry(activation, "team/c")["class"] = "Shared"


def _actions_out_of_order(activation, leases):
    activation["actions"].append(activation["actions"].pop(0))


TAMPERS = [
    (_edit_seed, [
        f"seed mismatch: recorded 0x0000000000000000, but team/r1 activated at {ACTIVATED_AT} derives {SEED}",
        "ticket mismatch for team/a group 0",
        "victim lease team/d-g0 names seed " + SEED + ", the reservation records 0x0000000000000000",
    ]),
    (_swap_victim, [
        "wrong victim: the draw takes {first} (place 3 of 4), the recorded actions do not",
        "wrong victim: the recorded actions take {second} (place 4 of 4, not drawn)",
    ]),
    (_reorder, ["wrong order: the recorded actions take team/c group 0, team/b group 0, {first}; "
                "the draw takes team/b group 0, team/c group 0, {first}"]),
    (_drop_lease_seed, ["victim lease team/b-g0 does not name the seed (status.preemption.seed is missing)"]),
    (_other_lease_seed, [f"victim lease team/c-g0 names seed 0x1, the reservation records {SEED}"]),
    (_edit_ticket, ["ticket mismatch for team/b group 0: recorded 0000000000000000…, computed "
                    + hand_ticket("team/b", 0)[:16] + "…"]),
    (_reopen_victim, ["victim lease team/b-g0 is not closed (expected closureReason RandomPreempt)"]),
    (_wrong_reason, ["victim lease team/d-g0 closureReason is RandomPreempt, expected ReclaimUnfunded"]),
    (_freed, ["freedGPUs is 20, but the recorded actions free 18"]),
    (_missing_lease, ["victim lease team/c-g0 (action 3, Lottery) is not in the snapshot"]),
    (_other_reservation, ["victim lease team/c-g0 names reservation team/r0, not team/r1"]),
    (_too_few, ["wrong victim: the draw takes {first} (place 3 of 4), the recorded actions do not"]),
    (_unknown_class, ["team/c group 0 has class 'Shared' in the conflict set (not unfunded, borrowed, shared or owned)"]),
    (_actions_out_of_order, ["wrong order: action 4 (ReclaimUnfunded team/d-g0) comes after Lottery"]),
]


@pytest.mark.parametrize(("tamper", "expected"), TAMPERS, ids=[t.__name__.lstrip("_") for t, _ in TAMPERS])
def test_a_tampered_record_names_what_differs(tamper, expected):
    """Each tamper yields differences that start with (or equal) the expected lines."""
    activation, leases = honest_record()
    tamper(activation, leases)
    result = check(activation, leases)
    first, second = owned_by_ticket()
    names = {"first": f"{first[0]} group {first[1]}", "second": f"{second[0]} group {second[1]}"}
    assert not result.verified
    for line in expected:
        line = line.format(**names)
        assert any(d == line or d.startswith(line) for d in result.differences), (line, result.differences)


def test_edited_seed_reports_every_ticket_and_every_victim_lease():
    """With the seed edited, all 4 recorded tickets differ from what the new seed gives, and all 4 victim
    leases (d, b, c, first owned) still name the old seed."""
    activation, leases = honest_record()
    _edit_seed(activation, leases)
    result = check(activation, leases)
    assert sum(d.startswith("ticket mismatch") for d in result.differences) == 4
    assert sum(d.startswith("victim lease") and "names seed" in d for d in result.differences) == 4


def test_without_activation_there_is_nothing_to_verify():
    result = verification.verify(reservation("r1", run_name="big"), {})
    assert result.differences == ("no activation is recorded (status.activation)",)


def test_missing_time_cannot_derive_the_seed():
    activation, leases = honest_record()
    del activation["at"]
    result = check(activation, leases)
    assert "no activation time is recorded (status.activation.at): the seed cannot be derived" in result.differences


# --- for explain ----------------------------------------------------------------------------------------------------


def test_run_draws_give_a_runs_tickets_places_and_verdict():
    """team/a has two groups in the lottery set (places 3 and 4 after b and c); the first by ticket was taken."""
    activation, leases = honest_record()
    rsv = activated(reservation("r1", run_name="big"), activation)
    snap = snapshot(run("a"), rsv, *leases.values())
    (draw,) = verification.run_draws(snap, "team/a")
    first, second = owned_by_ticket()
    assert draw.reservation == "team/r1"
    assert draw.seed == SEED
    assert draw.verified
    assert [(t.group, t.ticket, t.place, t.taken) for t in draw.tickets] == [
        (first[1], hand_ticket(*first), 3, True),
        (second[1], hand_ticket(*second), 4, False),
    ]
    assert draw.gpus == 8
    assert draw.conflict_set_size == 4


def test_run_draws_for_a_reclaimed_run_have_no_place_in_the_draw():
    """team/d was reclaimed before the lottery: it has an action but no ticket."""
    activation, leases = honest_record()
    snap = snapshot(activated(reservation("r1", run_name="big"), activation), *leases.values())
    (draw,) = verification.run_draws(snap, "team/d")
    assert draw.tickets == ()
    assert [a.kind for a in draw.actions] == ["ReclaimUnfunded"]
    assert verification.run_draws(snap, "team/zzz") == []
