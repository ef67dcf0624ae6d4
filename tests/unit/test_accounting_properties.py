"""Invariants of the ledger on random small fleets (hypothesis): whatever the leases, an envelope never funds
more than its concurrency, headroom is never negative (and 0 outside the window), every charged open slot is
either used or unfunded, and the classes partition the funded slots."""

from __future__ import annotations

from datetime import timedelta

from builders import T0, budget, envelope, lease, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_runs.engine.accounting import ledger

OWNERS = ["org:ai", "org:ai:rai", "org:ai:rai:sys", "org:ai:rai:eval", "org:ai:mm", "org:ai:mm:vision", "org:ext"]
NAMESPACES = ["ns0", "ns1", "ns2"]
PATTERNS = ["*", "org:ai:*", "org:ext", "org:ai:rai:*", "org:ai:mm:vision"]
HOUR = timedelta(hours=1)


@st.composite
def envelopes(draw, name):
    start = draw(st.integers(0, 60))
    length = draw(st.integers(1, 80))
    lending = draw(
        st.none()
        | st.fixed_dictionaries(
            {"allow": st.booleans(), "to": st.lists(st.sampled_from(PATTERNS), max_size=2)},
            optional={"maxConcurrency": st.integers(0, 8)},
        )
    )
    concurrency = draw(st.integers(1, 16))
    return envelope(
        name,
        concurrency=concurrency,
        start=T0 + start * HOUR,
        end=T0 + (start + length) * HOUR,
        # the CRD's rule: maxGPUHours <= concurrency × window hours
        max_gpu_hours=draw(st.none() | st.floats(0, min(500, concurrency * length))),
        lending=lending,
    )


@st.composite
def fleets(draw):
    budgets = []
    keys = []
    for index in range(draw(st.integers(1, 4))):
        namespace = draw(st.sampled_from(NAMESPACES))
        name = f"b{index}"
        envs = [draw(envelopes(f"e{i}")) for i in range(draw(st.integers(1, 3)))]
        caps = []
        if len(envs) > 1 and draw(st.booleans()):
            members = draw(st.lists(st.sampled_from([e["name"] for e in envs]), min_size=1, unique=True))
            caps.append({"name": "cap", "envelopes": members, "maxConcurrency": draw(st.integers(0, 20))})
        budgets.append(budget(name, namespace, owner=draw(st.sampled_from(OWNERS)), envelopes=envs,
                              aggregate_caps=caps))
        keys.extend((namespace, name, e["name"]) for e in envs)
    leases = []
    for index in range(draw(st.integers(0, 12))):
        namespace = draw(st.sampled_from(NAMESPACES))
        payer = draw(st.none() | st.sampled_from(keys) | st.just((namespace, "missing", "e0")))
        start = draw(st.integers(0, 120))
        ended = draw(st.none() | st.integers(start, 160))
        leases.append(
            lease(
                f"l{index}",
                namespace,
                owner=draw(st.sampled_from(OWNERS)),
                gpus=draw(st.integers(1, 6)),
                role=draw(st.sampled_from(["Active", "Spare"])),
                paid_by=payer,
                start=T0 + start * HOUR,
                ended=None if ended is None else T0 + ended * HOUR,
                closed=True if ended is not None else draw(st.sampled_from([None, None, None, True])),
            )
        )
    return snapshot(*budgets, *leases)


CLOCK = st.integers(0, 170).map(lambda h: T0 + h * HOUR)


@settings(max_examples=200, deadline=None)
@given(fleet=fleets(), at=CLOCK)
def test_ledger_invariants(fleet, at):
    book = ledger(fleet, at)
    open_leases = [x for x in fleet.leases if x.open_at(at)]
    # every open lease is charged exactly once, every charge is an open lease
    assert set(book.charges) == {x.key for x in open_leases}
    for charge in book.charges.values():
        # the classes partition the lease's slots
        assert min(charge.owned, charge.shared, charge.borrowed, charge.unfunded) >= 0
        assert charge.owned + charge.shared + charge.borrowed + charge.unfunded == charge.lease.gpus

    for key, usage in book.envelopes.items():
        envelope_ = usage.envelope
        charged = [c for c in book.charges.values() if c.envelope == key]
        charged_slots = sum(x.gpus for x in open_leases if x.payer == key)
        # funded <= concurrency; headroom never negative; 0 outside the window
        assert usage.used <= envelope_.concurrency
        assert usage.headroom >= 0
        assert usage.headroom == (envelope_.concurrency - usage.used if usage.window_active else 0)
        if not usage.window_active:
            assert usage.used == 0
        # used + unfunded = the charged open slots
        assert usage.used + usage.unfunded == charged_slots
        # the classes partition the funded slots, and add up to the charges
        assert usage.used == usage.owned + usage.shared + usage.borrowed
        for cls in ("owned", "shared", "borrowed", "unfunded"):
            assert getattr(usage, cls) == sum(getattr(c, cls) for c in charged)
        # spare counts funded spare slots only
        assert 0 <= usage.spare <= usage.used
        assert usage.spare == sum(c.funded for c in charged if c.lease.spec.slice.role == "Spare")
        # lending never exceeds its cap
        lending = envelope_.lending
        if lending is None or not lending.allow:
            assert usage.borrowed == 0
        elif lending.max_concurrency is not None:
            assert usage.borrowed <= lending.max_concurrency
        assert usage.consumed_gpu_hours >= 0
        if envelope_.max_gpu_hours is None:
            assert usage.gpu_hours_headroom is None

    for cap in book.aggregates:
        assert 0 <= cap.used <= cap.max_concurrency
        members = [book.envelopes[(cap.budget.namespace, cap.budget.name, e)] for e in cap.envelopes]
        assert cap.used == sum(m.used for m in members)

    # leases of unbound namespaces and leases without a known envelope are never funded
    for charge in book.charges.values():
        lease_ = charge.lease
        if lease_.payer is None or lease_.payer not in book.envelopes or \
                lease_.spec.run_ref.namespace in book.owners.unbound:
            assert charge.funded == 0


@settings(max_examples=60, deadline=None)
@given(fleet=fleets(), at=CLOCK, later=st.integers(1, 48))
def test_consumed_hours_never_decrease_as_the_clock_moves_on(fleet, at, later):
    """GPU-hours are a sum over time already passed: evaluating later can only add to them."""
    before = ledger(fleet, at)
    after = ledger(fleet, at + later * HOUR)
    for key, usage in before.envelopes.items():
        assert after.envelopes[key].consumed_gpu_hours >= usage.consumed_gpu_hours - 1e-9
