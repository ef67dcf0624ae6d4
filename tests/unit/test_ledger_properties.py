"""Invariants of the ledger keeper (reconciler/ledger/) on random fleets (hypothesis).

A fleet: 1-3 fabric domains of 1-3 nodes (4 or 8 H100 GPUs, some cordoned); running runs holding slots (funded
by their family's envelopes, borrowed, or unfunded; some finished, some deleted, some reporting ETAs); pending
runs of 4-16 GPUs (in groups of 4 or not, with spares, elastic, without cross-group spread) in namespaces whose
owners are org:t:a, org:t:b (siblings), org:t (their parent) and org:x (an outsider that may lend); some with a
Reservation due now or later.

For every fleet: after applying a pass's writes no slot is in two open leases and no envelope is overdrawn
(funded ≤ concurrency), a second pass writes nothing, every recorded activation verifies (``seeds verify``),
and a pass cut short after any number of writes, followed by a full pass, ends with the same ledger — no lease
minted twice, none closed twice.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
from builders import T0, WINDOW_END, budget, envelope, lease, node, reservation, run, snapshot, to_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_runs.engine.accounting import ledger
from kubectl_runs.engine.verify import verify_all
from kubectl_runs.model import Run, Snapshot
from kubectl_runs.reconciler.actions import PatchStatus
from kubectl_runs.reconciler.ledger import apply_writes, plan_ledger

NOW = T0 + timedelta(hours=10)
OWNERS = {"a": "org:t:a", "t": "org:t", "b": "org:t:b", "x": "org:x"}
PAYERS = [("a", "b", "w"), ("a", "b", "w"), ("t", "b", "w"), ("b", "b", "w"), ("x", "b", "w"), None]


@st.composite
def fleets(draw) -> Snapshot:
    objects: list = []
    for namespace, owner in OWNERS.items():
        lending = None
        if namespace == "x" and draw(st.booleans()):
            lending = {"allow": True, "to": ["org:t:*"], "maxConcurrency": draw(st.integers(0, 16))}
        objects.append(budget("b", namespace, owner=owner, envelopes=[envelope(
            "w", concurrency=draw(st.sampled_from([2, 8, 16, 32, 32])), end=WINDOW_END, lending=lending,
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
        while used < n.gpus and draw(st.integers(0, 3)):
            size = draw(st.integers(1, n.gpus - used))
            namespace = draw(st.sampled_from(["a", "t", "b", "x"]))
            name = f"r{count}"
            count += 1
            fate = draw(st.sampled_from(["Running", "Running", "Running", "Succeeded", "deleted"]))
            if fate != "deleted":
                elastic = size > 1 and draw(st.booleans()) and draw(st.booleans())
                objects.append(run(
                    name, namespace, gpus=size, phase=fate, created=T0,
                    eta=NOW + timedelta(hours=draw(st.integers(-2, 5))) if draw(st.booleans()) else None,
                    malleable={"minTotalGPUs": 1, "maxTotalGPUs": size, "stepGPUs": 1} if elastic else None,
                ))
            objects.append(lease(
                f"{name}-g0", namespace, owner=OWNERS[namespace], run_name=name,
                slot_list=[f"{n.name}#{k}" for k in range(used, used + size)],
                role=draw(st.sampled_from(["Active", "Active", "Active", "Spare"])),
                paid_by=draw(st.sampled_from(PAYERS)), start=T0 + timedelta(hours=1),
            ))
            used += size
    for i in range(draw(st.integers(0, 4))):
        objects.extend(draw(pending_runs(f"p{i}", minutes=i)))
    return snapshot(*objects)


@st.composite
def pending_runs(draw, name: str, minutes: int) -> list:
    gpus = draw(st.sampled_from([4, 8, 12, 16]))
    group = draw(st.sampled_from([None, 4, 4]))
    namespace = draw(st.sampled_from(["a", "a", "b", "x"]))
    malleable = None
    if draw(st.booleans()) and draw(st.booleans()):
        malleable = {"minTotalGPUs": 4, "maxTotalGPUs": gpus, "stepGPUs": 4, "desiredTotalGPUs": gpus}
    job = run(name, namespace, gpus=gpus, phase=None, group_gpus=group, malleable=malleable,
              spares_per_group=draw(st.sampled_from([0, 0, 1])), created=T0 + timedelta(minutes=minutes))
    if group and draw(st.booleans()):
        manifest = to_manifest(job)
        manifest["spec"]["locality"]["allowCrossGroupSpread"] = False
        job = msgspec.convert(manifest, Run)
    out: list = [job]
    if draw(st.booleans()):
        when = NOW + timedelta(minutes=draw(st.sampled_from([-30, -1, 0, 30])))
        out.append(reservation(f"{name}-r1", namespace, run_name=name, earliest_start=when,
                               domain=draw(st.sampled_from([None, "d0"]))))
    return out


PROPERTIES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def open_slots(snap: Snapshot) -> list[str]:
    return [s for x in snap.leases if x.open_at(NOW) for s in x.spec.slice.slots]


def ledger_state(snap: Snapshot) -> dict:
    """Everything the ledger keeper decides: leases (spec and closure), reservations (spec, state, activation),
    the runs' preemption records."""
    return {
        "leases": {x.key: (msgspec.to_builtins(x.spec), x.status.closed, x.status.closure_reason,
                           msgspec.to_builtins(x.status.preemption)) for x in snap.leases},
        "reservations": {r.key: (msgspec.to_builtins(r.spec), r.status.state,
                                 msgspec.to_builtins(r.status.activation)) for r in snap.reservations},
        "preemptions": {r.key: msgspec.to_builtins(r.status.preemptions) for r in snap.runs},
    }


@PROPERTIES
@given(fleets())
def test_no_slot_in_two_open_leases_and_no_envelope_overdrawn(snap):
    before = ledger(snap, NOW)
    after = apply_writes(snap, plan_ledger(snap, NOW))
    used = open_slots(after)
    assert len(used) == len(set(used))
    book = ledger(after, NOW)
    for key, usage in book.envelopes.items():
        assert usage.used <= usage.envelope.concurrency
        # new leases are funded in full: the keeper never mints an overdraft
        assert usage.unfunded <= before.envelopes[key].unfunded
    minted = {x.key for x in after.leases} - {x.key for x in snap.leases}
    assert minted <= set(book.charges)  # open
    for key in minted:
        assert book.charges[key].unfunded == 0, key


@PROPERTIES
@given(fleets())
def test_a_second_pass_writes_nothing_and_every_activation_verifies(snap):
    after = apply_writes(snap, plan_ledger(snap, NOW))
    assert plan_ledger(after, NOW) == []
    for check in verify_all(after):
        assert check.verified, check.differences


@PROPERTIES
@given(fleets(), st.data())
def test_a_pass_cut_short_converges_to_the_same_ledger(snap, data):
    writes = plan_ledger(snap, NOW)
    whole = apply_writes(snap, writes)
    cut = data.draw(st.integers(0, len(writes)))
    part = apply_writes(snap, writes[:cut])
    rest = plan_ledger(part, NOW)
    done = apply_writes(part, rest)
    assert ledger_state(done) == ledger_state(whole)
    # no double close: the rest never closes a lease the first part closed
    closed = {x.key for x in part.leases if x.status.closed}
    assert not [w for w in rest if isinstance(w, PatchStatus) and w.kind == "GPULease" and w.key in closed]
    # no lease minted twice: a Create in the rest names a lease the first part did not create
    existing = {x.key for x in part.leases}
    assert not [w for w in rest if w.kind == "GPULease" and type(w).__name__ == "Create" and w.key in existing]
    assert plan_ledger(done, NOW) == []


def _one_domain_growth_fleet() -> Snapshot:
    """The counterexample hypothesis found (CI profile, 2026-11-24): ``p1`` keeps its groups in one domain and
    grows 4 → 12. After its first group lands on d2, the plan still says 12 fits (it counts d1's free GPUs),
    but the placement can only grow where p1 already is: the full width does not place, and the pass used to
    stop there. One pass later ``p2`` holds d1's GPUs, the plan turns to a deficit, the stepwise growth is
    tried and p1 grows by one group: a second pass that writes, and a pass cut short that ends elsewhere."""
    objects: list = [
        budget("b", ns, owner=owner, envelopes=[envelope("w", concurrency=32 if ns == "b" else 2, end=WINDOW_END)])
        for ns, owner in OWNERS.items()
    ]
    objects += [node("n00", gpus=4, domain="d0"), node("n10", gpus=4, domain="d1"), node("n11", gpus=8, domain="d1"),
                node("n20", gpus=4, domain="d2"), node("n21", gpus=4, domain="d2"), node("n22", gpus=8, domain="d2")]
    for i, slot in enumerate(["n00#0", "n00#1", "n11#0", "n21#0", "n21#1"]):
        if i < 3:  # r3 and r4 are deleted: their leases are closed by the pass
            objects.append(run(f"r{i}", "a", gpus=1, phase="Running", created=T0))
        objects.append(lease(f"r{i}-g0", "a", owner=OWNERS["a"], run_name=f"r{i}", slot_list=[slot], role="Active",
                             paid_by=("a", "b", "w"), start=T0 + timedelta(hours=1)))
    objects.append(run("p0", "a", gpus=4, phase=None, group_gpus=4, created=T0))
    grower = to_manifest(run("p1", "a", gpus=12, phase=None, group_gpus=4, spares_per_group=1,
                             created=T0 + timedelta(minutes=1),
                             malleable={"minTotalGPUs": 4, "maxTotalGPUs": 12, "stepGPUs": 4,
                                        "desiredTotalGPUs": 12}))
    grower["spec"]["locality"]["allowCrossGroupSpread"] = False
    objects.append(msgspec.convert(grower, Run))
    objects.append(run("p2", "a", gpus=4, phase=None, created=T0 + timedelta(minutes=2)))
    return snapshot(*objects)


def test_a_run_kept_in_one_domain_grows_by_steps_when_its_full_width_does_not_place():
    snap = _one_domain_growth_fleet()
    writes = plan_ledger(snap, NOW)
    whole = apply_writes(snap, writes)
    grown = sorted(x.name for x in whole.leases if x.spec.run_ref.name == "p1")
    assert grown == ["p1-g0-active-0", "p1-g0-spare-0", "p1-g1-active-0", "p1-g1-spare-0"]
    assert plan_ledger(whole, NOW) == []
    for cut in range(len(writes) + 1):
        part = apply_writes(snap, writes[:cut])
        done = apply_writes(part, plan_ledger(part, NOW))
        assert ledger_state(done) == ledger_state(whole), cut
        assert plan_ledger(done, NOW) == [], cut


def test_a_pass_resumed_after_an_activations_first_lease_gives_its_run_only_the_start_width():
    """Found by the property above: an activation admits its Run at its start width (growing comes with
    everyone else's admission). A pass cut short after the activation's first lease, resumed, used to admit the
    Run at the width the fleet then allowed — growing it onto the GPUs the next activation of the instant would
    have taken — and the two passes ended with different leases."""
    snap = snapshot(
        node("n0", gpus=8, domain="d0"), node("n1", gpus=4, domain="d1"),
        budget("b", "x", owner="org:x", envelopes=[envelope("w", concurrency=16)]),
        budget("b", "a", owner="org:a", envelopes=[envelope("w", concurrency=8)]),
        run("p2", "x", gpus=8, phase=None, spares_per_group=1, created=T0,
            malleable={"minTotalGPUs": 4, "maxTotalGPUs": 8, "stepGPUs": 4, "desiredTotalGPUs": 8}),
        run("p0", "a", gpus=4, phase=None, created=T0 + timedelta(minutes=1)),
        reservation("p2-r1", "x", run_name="p2", earliest_start=NOW - timedelta(minutes=30)),
        reservation("p0-r1", "a", run_name="p0", earliest_start=NOW - timedelta(minutes=1)),
    )
    writes = plan_ledger(snap, NOW)
    whole = apply_writes(snap, writes)
    first = next(i for i, w in enumerate(writes) if w.kind == "GPULease" and w.key.startswith("x/p2-"))
    assert any(w.kind == "GPULease" and w.key.startswith("a/p0-") for w in writes[first:])  # p0 starts too
    part = apply_writes(snap, writes[:first + 1])
    done = apply_writes(part, plan_ledger(part, NOW))
    assert ledger_state(done) == ledger_state(whole)
