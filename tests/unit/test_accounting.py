"""The ledger (API.md §3 Charges, Classes, Headroom, Consumed GPU-hours) on small hand-built fleets.

Every test states its fleet and works the expected numbers out in its docstring. Unless a test says otherwise
the fleet is one Budget ``team/b`` of owner ``org:ai:team`` with one envelope ``west`` that funds 8 GPUs over
the window [T0, T0+30d), and the clock is T0+10h.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from builders import T0, at, budget, envelope, lease, snapshot

from kubectl_runs.engine import findings as fk
from kubectl_runs.engine.accounting import ledger
from kubectl_runs.engine.reports import envelope_row, plain
from kubectl_runs.engine.usage import budget_usage

OWNER = "org:ai:team"
NOW = at(hours=10)
KEY = ("team", "b", "west")


def team_budget(**envelope_fields) -> object:
    return budget("b", "team", owner=OWNER, envelopes=[envelope("west", **envelope_fields)])


def book_of(*objects, when=NOW):
    return ledger(snapshot(*objects), when)


def kinds(book) -> list[tuple[str, str | None]]:
    return sorted((f.kind, f.lease) for f in book.findings)


# --- open at t: [start, ended) ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "used"),
    [
        (at(hours=1, minutes=59), 0),
        (at(hours=2), 2),
        (at(hours=4, minutes=59), 2),
        (at(hours=5), 0),
        (at(hours=6), 0),
    ],
    ids=["before-start", "at-start", "just-before-end", "at-end", "after-end"],
)
def test_a_lease_is_open_on_start_inclusive_to_ended_exclusive(when, used):
    """One 2-GPU lease from T0+2h, closed at T0+5h: it is charged at T0+2h and T0+4h59 (2 used), and not at
    T0+1h59 (not started), T0+5h (ended is exclusive) or T0+6h (0 used)."""
    book = book_of(team_budget(), lease("l", owner=OWNER, gpus=2, start=at(hours=2), ended=at(hours=5)), when=when)
    usage = book.envelopes[KEY]
    assert usage.used == used
    assert usage.headroom == 8 - used
    assert ("team/l" in book.charges) is bool(used)


def test_a_lease_closed_after_t_is_still_open_at_t():
    """Closed at T0+12h, evaluated at T0+10h: open then, so its 3 GPUs are used; 10 h × 3 = 30 GPU-hours."""
    book = book_of(team_budget(), lease("l", owner=OWNER, gpus=3, start=T0, ended=at(hours=12)))
    assert book.envelopes[KEY].used == 3
    assert book.envelopes[KEY].consumed_gpu_hours == 30


def test_a_closed_lease_without_ended_is_not_open_and_holds_no_hours():
    """closed: true with no status.ended: not open (0 used) and it contributes 0 GPU-hours."""
    book = book_of(team_budget(), lease("l", owner=OWNER, gpus=4, start=T0, closed=True))
    assert book.envelopes[KEY].used == 0
    assert book.envelopes[KEY].consumed_gpu_hours == 0
    assert book.charges == {}


# --- order and slot-level overdraft ----------------------------------------------------------------------------


def test_leases_are_funded_in_start_then_name_order_slot_by_slot():
    """Concurrency 8. In funding order (start, then namespace/name):
    zeta (T0, 3 GPUs) funds 3 -> 5 left; beta (T0+1h, 4) funds 4 -> 1 left; gamma (T0+1h, 4; after beta by name)
    funds 1 slot and 3 are overdraft; alpha (T0+2h, 2) is all overdraft. Used 8, unfunded 3+2 = 5, headroom 0;
    an Overdraft finding for gamma and alpha. (zeta sorts first by start despite its name.)"""
    book = book_of(
        team_budget(),
        lease("alpha", owner=OWNER, gpus=2, start=at(hours=2)),
        lease("gamma", owner=OWNER, gpus=4, start=at(hours=1)),
        lease("beta", owner=OWNER, gpus=4, start=at(hours=1)),
        lease("zeta", owner=OWNER, gpus=3, start=T0),
    )
    usage = book.envelopes[KEY]
    funded = {name: (book.charges[f"team/{name}"].owned, book.charges[f"team/{name}"].unfunded)
              for name in ("zeta", "beta", "gamma", "alpha")}
    assert funded == {"zeta": (3, 0), "beta": (4, 0), "gamma": (1, 3), "alpha": (0, 2)}
    assert (usage.used, usage.owned, usage.unfunded, usage.headroom) == (8, 8, 5, 0)
    assert kinds(book) == [(fk.OVERDRAFT, "team/alpha"), (fk.OVERDRAFT, "team/gamma")]
    gamma = next(f for f in book.findings if f.lease == "team/gamma")
    assert gamma.detail == "team/b envelope west funds 8 GPUs at once: 3 of its 4 GPUs are unfunded"


def test_equal_starts_are_ordered_by_namespace_before_name():
    """Concurrency 8, two 6-GPU leases from T0 paid by team/b: ``aaa/zz`` sorts before ``team/aa`` (namespace
    first), so aaa/zz funds 6 and team/aa funds 2 with 4 overdraft."""
    book = book_of(
        team_budget(),
        lease("aa", "team", owner=OWNER, gpus=6),
        lease("zz", "aaa", owner=OWNER, gpus=6, paid_by=("team", "b", "west")),
    )
    assert (book.charges["aaa/zz"].owned, book.charges["aaa/zz"].unfunded) == (6, 0)
    assert (book.charges["team/aa"].owned, book.charges["team/aa"].unfunded) == (2, 4)


# --- the window ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "when"),
    [
        ({"start": at(days=1)}, at(hours=10)),
        ({"end": at(days=2)}, at(days=2)),
        ({"end": at(days=2)}, at(days=3)),
    ],
    ids=["before-window", "at-window-end", "after-window"],
)
def test_outside_its_window_an_envelope_funds_nothing_and_has_no_headroom(fields, when):
    """A 4-GPU lease open since T0 is charged to an envelope whose window does not contain t: all 4 GPUs are
    unfunded, used 0, headroom 0 (not 8), windowActive false, and an Overdraft finding names the window."""
    book = book_of(team_budget(**fields), lease("l", owner=OWNER, gpus=4), when=when)
    usage = book.envelopes[KEY]
    assert not usage.window_active
    assert (usage.used, usage.unfunded, usage.headroom) == (0, 4, 0)
    assert book.charges["team/l"].unfunded == 4
    [finding] = book.findings
    assert finding.kind == fk.OVERDRAFT and finding.lease == "team/l"
    assert "outside its window [" in finding.detail


# --- classes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lease_owner", "cls"),
    [
        ("org:ai:team", "owned"),
        ("org:ai:team:sub", "shared"),
        ("org:ai", "shared"),
        ("org:ai:other", "shared"),
        ("org:ext:partner", "borrowed"),
        ("org:ai:other:sub", "borrowed"),
    ],
    ids=["same-owner", "descendant", "ancestor", "sibling", "unrelated", "nephew"],
)
def test_a_funded_slot_is_owned_shared_or_borrowed(lease_owner, cls):
    """Envelope owner org:ai:team, lending to everyone ("*"). A 2-GPU lease funds 2 slots of one class: owned for
    the same owner, shared for family (descendant, ancestor, sibling), borrowed otherwise — a sibling's child
    (org:ai:other:sub) is neither an ancestor, a descendant nor a sibling. Used 2, headroom 6."""
    book = book_of(
        team_budget(lending={"allow": True, "to": ["*"]}),
        lease("l", owner=lease_owner, gpus=2),
    )
    usage = book.envelopes[KEY]
    charge = book.charges["team/l"]
    counts = {"owned": usage.owned, "shared": usage.shared, "borrowed": usage.borrowed}
    assert counts == {c: (2 if c == cls else 0) for c in counts}
    assert getattr(charge, cls) == 2 and charge.unfunded == 0
    assert (usage.used, usage.headroom) == (2, 6)
    assert charge.lender == ("org:ai:team" if cls == "borrowed" else None)
    assert book.findings == []


@pytest.mark.parametrize(
    ("lending", "funded", "why"),
    [
        (None, False, "does not lend"),
        ({"allow": False, "to": ["*"]}, False, "does not lend"),
        ({"allow": True, "to": ["org:ai:rai:sys"]}, True, None),
        ({"allow": True, "to": ["*"]}, True, None),
        ({"allow": True, "to": ["org:ai:*"]}, True, None),
        ({"allow": True, "to": ["org:ai:rai"]}, False, "does not lend to it"),
        ({"allow": True, "to": ["org:ext:*", "org:ai:rai:*"]}, True, None),
        ({"allow": True, "to": ["org:ext:*"]}, False, "does not lend to it"),
        ({"allow": True}, False, "does not lend to it"),
    ],
    ids=["no-lending", "allow-false", "exact", "star", "prefix", "exact-parent-only", "second-pattern",
         "other-prefix", "no-patterns"],
)
def test_borrowed_slots_need_lending_allow_and_a_matching_to_pattern(lending, funded, why):
    """Envelope owner org:ai:mm:vision (concurrency 8); a 4-GPU lease of its cousin org:ai:rai:sys would be
    borrowed. Funded (4 borrowed, headroom 4) only when lending.allow and a ``to`` pattern matches the lease
    owner; otherwise 4 unfunded, headroom 8, and an ACLViolation finding that says why."""
    env = envelope("west", lending=lending) if lending else envelope("west")
    book = book_of(
        budget("b", "team", owner="org:ai:mm:vision", envelopes=[env]),
        lease("l", owner="org:ai:rai:sys", gpus=4),
    )
    usage = book.envelopes[KEY]
    if funded:
        assert (usage.borrowed, usage.unfunded, usage.headroom) == (4, 0, 4)
        assert book.findings == []
    else:
        assert (usage.borrowed, usage.unfunded, usage.headroom) == (0, 4, 8)
        [finding] = book.findings
        assert finding.kind == fk.ACL_VIOLATION and finding.lease == "team/l"
        assert finding.detail == (
            f"owner org:ai:rai:sys is not family of org:ai:mm:vision and team/b envelope west {why}: "
            "4 GPUs unfunded"
        )


def test_lending_max_concurrency_caps_borrowed_slots_only():
    """Concurrency 16, lending {allow, to: ["*"], maxConcurrency: 4}. Borrowed b1 (T0, 3 GPUs) funds 3; borrowed
    b2 (T0+1h, 3 GPUs) may borrow only 4-3 = 1 more, so 1 funded and 2 unfunded (Overdraft finding naming
    lending.maxConcurrency); the owner's own 8-GPU lease (T0+2h) is not limited by the lending cap: 8 owned.
    Used 3+1+8 = 12, headroom 16-12 = 4, unfunded 2."""
    book = book_of(
        team_budget(concurrency=16, lending={"allow": True, "to": ["*"], "maxConcurrency": 4}),
        lease("b1", owner="org:ext:x", gpus=3, start=T0),
        lease("b2", owner="org:ext:y", gpus=3, start=at(hours=1)),
        lease("own", owner=OWNER, gpus=8, start=at(hours=2)),
    )
    usage = book.envelopes[KEY]
    assert (usage.borrowed, usage.owned, usage.used, usage.unfunded, usage.headroom) == (4, 8, 12, 2, 4)
    assert (book.charges["team/b2"].borrowed, book.charges["team/b2"].unfunded) == (1, 2)
    [finding] = book.findings
    assert finding.kind == fk.OVERDRAFT and finding.lease == "team/b2"
    assert finding.detail == (
        "team/b envelope west lends at most 4 GPUs (lending.maxConcurrency): 2 of its 3 GPUs are unfunded"
    )
    assert usage.borrowed_room == 0


def test_lending_max_concurrency_zero_lends_nothing():
    """maxConcurrency 0: a 2-GPU borrowed lease funds 0, unfunded 2; headroom stays 8."""
    book = book_of(
        team_budget(lending={"allow": True, "to": ["*"], "maxConcurrency": 0}),
        lease("b1", owner="org:ext:x", gpus=2),
    )
    usage = book.envelopes[KEY]
    assert (usage.borrowed, usage.unfunded, usage.headroom) == (0, 2, 8)
    assert kinds(book) == [(fk.OVERDRAFT, "team/b1")]


# --- aggregate caps ----------------------------------------------------------------------------------------------


def test_aggregate_caps_apply_after_the_envelopes():
    """Envelopes e1 and e2 fund 8 each; cap ``both`` allows 10 across them. Envelope stage: e1 funds l1 (T0, 6)
    and l3 (T0+2h, 2) = 8; e2 funds l2 (T0+1h, 4). Cap stage, in funding order: l1 6 (6), l2 4 (10), l3 would
    make 12 > 10, so l3's 2 slots become unfunded (Overdraft finding). e1: used 6, unfunded 2, headroom 8-6 = 2;
    e2: used 4, headroom 4; aggregate used 10, headroom 0."""
    book = book_of(
        budget(
            "b", "team", owner=OWNER,
            envelopes=[envelope("e1"), envelope("e2")],
            aggregate_caps=[{"name": "both", "envelopes": ["e1", "e2"], "maxConcurrency": 10}],
        ),
        lease("l1", owner=OWNER, gpus=6, start=T0, paid_by=("b", "e1")),
        lease("l2", owner=OWNER, gpus=4, start=at(hours=1), paid_by=("b", "e2")),
        lease("l3", owner=OWNER, gpus=2, start=at(hours=2), paid_by=("b", "e1")),
    )
    e1, e2 = book.envelopes[("team", "b", "e1")], book.envelopes[("team", "b", "e2")]
    assert (e1.used, e1.unfunded, e1.headroom) == (6, 2, 2)
    assert (e2.used, e2.unfunded, e2.headroom) == (4, 0, 4)
    [cap] = book.aggregates
    assert (cap.name, cap.used, cap.headroom) == ("both", 10, 0)
    assert (book.charges["team/l3"].owned, book.charges["team/l3"].unfunded) == (0, 2)
    [finding] = book.findings
    assert finding.kind == fk.OVERDRAFT and finding.lease == "team/l3"
    assert finding.detail == "aggregate cap team/b both allows 10 GPUs at once: 2 of its GPUs are unfunded"


def test_an_aggregate_cap_unfunds_borrowed_slots_before_owned_ones_and_keeps_spare_counts_right():
    """One envelope of 8 under a cap of 5, lending to everyone. l1 (T0, 4 owned) then l2 (T0+1h, 2 borrowed spare
    slots) fund 6 at the envelope; the cap keeps 5, so 1 of l2's borrowed slots is unfunded: owned 4,
    borrowed 1, spare 1 (the funded spare slot), unfunded 1."""
    book = book_of(
        budget(
            "b", "team", owner=OWNER,
            envelopes=[envelope("west", lending={"allow": True, "to": ["*"]})],
            aggregate_caps=[{"name": "cap", "envelopes": ["west"], "maxConcurrency": 5}],
        ),
        lease("l1", owner=OWNER, gpus=4, start=T0),
        lease("l2", owner="org:ext:x", gpus=2, start=at(hours=1), role="Spare"),
    )
    usage = book.envelopes[KEY]
    assert (usage.owned, usage.borrowed, usage.spare, usage.unfunded, usage.used) == (4, 1, 1, 1, 5)


# --- unfunded leases ---------------------------------------------------------------------------------------------


def test_a_lease_without_paid_by_is_unfunded_without_a_finding():
    """Minted unfunded (no paidBy), 4 GPUs: the charge is 4 unfunded with no envelope; the envelope is untouched
    (used 0, unfunded 0) and nothing is reported — an unfunded mint is legitimate."""
    book = book_of(team_budget(), lease("l", owner=OWNER, gpus=4, paid_by=None))
    charge = book.charges["team/l"]
    assert (charge.envelope, charge.unfunded, charge.funded) == (None, 4, 0)
    assert (book.envelopes[KEY].used, book.envelopes[KEY].unfunded) == (0, 0)
    assert book.findings == []


@pytest.mark.parametrize(
    "paid_by",
    [("b", "east"), ("nobudget", "west"), ("elsewhere", "b", "west")],
    ids=["unknown-envelope", "unknown-budget", "other-namespace"],
)
def test_a_lease_charged_to_a_missing_envelope_is_unfunded_with_a_finding(paid_by):
    """A 4-GPU lease paid by an envelope that does not exist: 4 unfunded and an UnknownEnvelope finding; the
    existing envelope team/b west is untouched (used 0, headroom 8)."""
    book = book_of(team_budget(), lease("l", owner=OWNER, gpus=4, paid_by=paid_by))
    assert book.charges["team/l"].unfunded == 4
    assert book.envelopes[KEY].headroom == 8
    [finding] = book.findings
    assert (finding.kind, finding.lease) == (fk.UNKNOWN_ENVELOPE, "team/l")
    ns, bud, env = paid_by if len(paid_by) == 3 else ("team", *paid_by)
    assert finding.detail == f"paid by {ns}/{bud} envelope {env}, which does not exist: its 4 GPUs are unfunded"


def test_paid_by_without_a_namespace_means_the_runs_namespace():
    """The lease object lives in ``ops`` but its run is ``team/r``; paidBy omits the namespace, so it names
    team/b west: 2 owned there."""
    book = book_of(team_budget(), lease("l", "ops", owner=OWNER, gpus=2, run_name="r", run_namespace="team"))
    assert book.envelopes[KEY].owned == 2


def test_leases_of_an_unbound_namespace_are_unfunded():
    """Namespace ``lab`` has Budgets of two owners (org:lab:a, org:lab:b), so it is unbound: its run's 4-GPU lease
    paid by lab/a west (owner org:lab:a, the lease's own owner) is unfunded — used 0, unfunded 4, headroom 8 —
    and one UnboundNamespace finding names the namespace and both owners."""
    book = book_of(
        budget("a", "lab", owner="org:lab:a"),
        budget("b", "lab", owner="org:lab:b"),
        lease("l", "lab", owner="org:lab:a", gpus=4, paid_by=("a", "west")),
    )
    usage = book.envelopes[("lab", "a", "west")]
    assert (usage.used, usage.unfunded, usage.headroom) == (0, 4, 8)
    [finding] = book.findings
    assert (finding.kind, finding.lease, finding.namespace) == (fk.UNBOUND_NAMESPACE, None, "lab")
    assert finding.detail == (
        "namespace lab has Budgets of 2 owners (org:lab:a, org:lab:b): its runs are unfunded until its Budgets "
        "name one owner"
    )


# --- spares ------------------------------------------------------------------------------------------------------


def test_spare_slots_are_charged_like_active_ones_and_counted_in_spare():
    """Concurrency 8: active (T0, 6 GPUs) funds 6; its spare lease (T0, 4 GPUs; sorts after by name) funds the
    last 2 slots and 2 are overdraft. Used 8 (spares count), spare 2 (funded spare slots only, so spare <= used),
    unfunded 2."""
    book = book_of(
        team_budget(),
        lease("a-active", owner=OWNER, gpus=6),
        lease("b-spare", owner=OWNER, gpus=4, role="Spare"),
    )
    usage = book.envelopes[KEY]
    assert (usage.used, usage.spare, usage.unfunded, usage.headroom) == (8, 2, 2, 0)


# --- GPU-hours -------------------------------------------------------------------------------------------------


def _hours_fleet(cap=None):
    """Window [T0+1d, T0+3d); leases:
    A 2 GPUs [T0, T0+1d6h)         -> in window [T0+1d, T0+1d6h)
    B 4 GPUs [T0+1d12h, open)
    C 8 GPUs from T0+2d1h           (after the T0+2d clock)
    D 8 GPUs closed with no ended   (no hours)
    E 1 GPU  [T0+1d20h, T0+2d5h)"""
    day = timedelta(days=1)
    return (
        team_budget(start=T0 + day, end=T0 + 3 * day, max_gpu_hours=cap),
        lease("a", owner=OWNER, gpus=2, start=T0, ended=at(days=1, hours=6)),
        lease("b", owner=OWNER, gpus=4, start=at(days=1, hours=12)),
        lease("c", owner=OWNER, gpus=8, start=at(days=2, hours=1)),
        lease("d", owner=OWNER, gpus=8, start=at(days=1), closed=True),
        lease("e", owner=OWNER, gpus=1, start=at(days=1, hours=20), ended=at(days=2, hours=5)),
    )


def test_consumed_gpu_hours_clip_to_the_window_and_the_clock():
    """At T0+2d (inside the window, so the window is clipped to [T0+1d, T0+2d)):
    A 2 × 6 h = 12; B 4 × 12 h = 48; C not started = 0; D = 0; E 1 × 4 h (clipped at the clock) = 4.
    Consumed 64 GPU-hours; maxGPUHours 100 leaves 36."""
    book = book_of(*_hours_fleet(cap=100), when=at(days=2))
    usage = book.envelopes[KEY]
    assert usage.consumed_gpu_hours == 64
    assert usage.gpu_hours_headroom == 36
    assert plain(envelope_row(usage))["consumedGPUHours"] == 64.0
    assert plain(envelope_row(usage))["gpuHoursHeadroom"] == 36.0


def test_consumed_gpu_hours_stop_at_the_window_end():
    """At T0+5d the window [T0+1d, T0+3d) is over: A 12; B 4 × 36 h = 144; C 8 × 23 h [T0+2d1h, T0+3d) = 184;
    D 0; E 1 × 9 h = 9. Consumed 349 GPU-hours; the cap of 300 is overrun: headroom 300-349 = -49 (reported,
    never enforced). B and C are still open but the window is closed: 12 GPUs unfunded, headroom 0."""
    book = book_of(*_hours_fleet(cap=300), when=at(days=5))
    usage = book.envelopes[KEY]
    assert usage.consumed_gpu_hours == 349
    assert usage.gpu_hours_headroom == -49
    assert (usage.used, usage.unfunded, usage.headroom) == (0, 12, 0)


def test_gpu_hours_headroom_is_null_without_a_cap():
    """No maxGPUHours: gpuHoursHeadroom is None (JSON null) while consumed hours are still counted (64)."""
    book = book_of(*_hours_fleet(cap=None), when=at(days=2))
    usage = book.envelopes[KEY]
    assert usage.gpu_hours_headroom is None
    assert plain(envelope_row(usage))["gpuHoursHeadroom"] is None
    assert plain(envelope_row(usage))["maxGPUHours"] is None
    assert usage.consumed_gpu_hours == 64


def test_overdraft_slots_still_consume_gpu_hours():
    """Concurrency 2, one 4-GPU lease open since T0: 2 funded, 2 overdraft; all 4 are charged to the envelope, so
    at T0+10h it has consumed 4 × 10 = 40 GPU-hours."""
    book = book_of(team_budget(concurrency=2), lease("l", owner=OWNER, gpus=4))
    usage = book.envelopes[KEY]
    assert (usage.used, usage.unfunded, usage.consumed_gpu_hours) == (2, 2, 40)


# --- the report: --owner, --flavor, namespaces --------------------------------------------------------------------


def _report_fleet():
    return snapshot(
        budget("ai", "ai", owner="org:ai", envelopes=[envelope("h100"), envelope("mi300", flavor="MI300X")]),
        budget("rai", "rai", owner="org:ai:rai", envelopes=[envelope("h100")]),
        budget("sys", "rai-sys", owner="org:ai:rai:sys", envelopes=[envelope("h100")]),
        budget("rais", "rais", owner="org:ai:rais", envelopes=[envelope("h100")]),
        budget("ext", "ext", owner="org:ext", envelopes=[envelope("h100")]),
        lease("x", "ext", owner="org:ext", gpus=2, paid_by=("rai", "rai", "h100")),  # ACLViolation at rai/rai
        lease("y", "ext", owner="org:ext", gpus=1, paid_by=("ext", "nope")),  # UnknownEnvelope in ext
    )


def _rows(report):
    return [e.key for e in report.envelopes]


@pytest.mark.parametrize(
    ("owner", "flavor", "namespace", "rows", "finding_kinds"),
    [
        (None, None, None,
         [("ai", "ai", "h100"), ("ai", "ai", "mi300"), ("ext", "ext", "h100"), ("rai", "rai", "h100"),
          ("rai-sys", "sys", "h100"), ("rais", "rais", "h100")],
         [fk.UNKNOWN_ENVELOPE, fk.ACL_VIOLATION]),
        ("org:ai:rai", None, None, [("rai", "rai", "h100"), ("rai-sys", "sys", "h100")], [fk.ACL_VIOLATION]),
        ("org:ai", "MI300X", None, [("ai", "ai", "mi300")], []),
        (None, "H100", None,
         [("ai", "ai", "h100"), ("ext", "ext", "h100"), ("rai", "rai", "h100"), ("rai-sys", "sys", "h100"),
          ("rais", "rais", "h100")],
         [fk.UNKNOWN_ENVELOPE, fk.ACL_VIOLATION]),
        ("org:nobody", None, None, [], []),
        (None, None, "rai", [("rai", "rai", "h100")], [fk.ACL_VIOLATION]),
        (None, None, "ext", [("ext", "ext", "h100")], [fk.UNKNOWN_ENVELOPE, fk.ACL_VIOLATION]),
    ],
    ids=["all", "owner-and-descendants", "owner-and-flavor", "flavor", "unknown-owner", "namespace-rai",
         "namespace-ext"],
)
def test_budget_usage_filters(owner, flavor, namespace, rows, finding_kinds):
    """Envelopes in namespace/budget order. ``--owner org:ai:rai`` keeps org:ai:rai and its descendant
    org:ai:rai:sys, not org:ai (ancestor) nor org:ai:rais (a character prefix). ``-n`` keeps that namespace's
    envelopes and the findings about them or its leases (so ``-n ext`` shows the ACLViolation of its lease
    ext/x at rai/rai). ext/x borrows 2 GPUs from rai/rai without lending
    (ACLViolation there); ext/y names a missing envelope (UnknownEnvelope, a finding of namespace ext)."""
    report = budget_usage(_report_fleet(), NOW, owner=owner, flavor=flavor, namespace=namespace)
    assert _rows(report) == rows
    assert [f.kind for f in report.findings] == finding_kinds


def test_narrowing_to_a_namespace_does_not_change_the_arithmetic():
    """Row rai/rai h100 is the same with or without ``-n rai``: the 2 GPUs ext/x charged to it are unfunded
    (10 h × 2 = 20 GPU-hours consumed) either way — the ledger is computed over the whole fleet first."""
    everything = budget_usage(_report_fleet(), NOW)
    narrowed = budget_usage(_report_fleet(), NOW, namespace="rai")
    row = next(e for e in everything.envelopes if e.key == ("rai", "rai", "h100"))
    [narrow_row] = narrowed.envelopes
    assert plain(envelope_row(narrow_row)) == plain(envelope_row(row))
    assert (row.unfunded, row.consumed_gpu_hours) == (2, 20)
