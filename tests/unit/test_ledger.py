"""The ledger keeper of ``reconcile --manage-leases`` (reconciler/ledger/) on small hand-built fleets.

Unless a test says otherwise: nodes n1, n2 in fabric domain d1 and m1 in d2, 8 H100 GPUs each; namespace team
(owner org:x:team) has a 32-GPU envelope ``west``; the pass runs at NOW = T0 + 1 h.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from builders import (
    T0,
    at,
    budget,
    envelope,
    iso,
    lease,
    node,
    reservation,
    run,
    slots,
    snapshot,
    to_manifest,
)

from kubectl_runs.engine.lottery import derive_seed
from kubectl_runs.engine.verify import verify_all
from kubectl_runs.model import Run, Snapshot
from kubectl_runs.reconciler.actions import Create, PatchStatus
from kubectl_runs.reconciler.ledger import LedgerOptions, apply_writes, plan_ledger

NOW = at(hours=1)
NODES = [node("n1", domain="d1"), node("n2", domain="d1"), node("m1", domain="d2")]
TEAM = budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=32)])


def pending(name: str, gpus: int = 8, **kw) -> Run:
    kw.setdefault("group_gpus", 8)
    return run(name, "team", gpus=gpus, phase=None, **kw)


def holding(name: str, node_name: str, gpus: int = 8, *, group: int = 0, first: int = 0, run_name: str | None = None,
            paid_by=("b", "west"), start=T0, role: str = "Active"):
    return lease(name, "team", owner="org:x:team", run_name=run_name or name.split("-g")[0], group=group,
                 slot_list=slots(node_name, gpus, first), paid_by=paid_by, start=start, role=role)


def creates(writes, kind: str = "GPULease") -> list[Create]:
    return [w for w in writes if isinstance(w, Create) and w.kind == kind]


def patches(writes, kind: str) -> list[PatchStatus]:
    return [w for w in writes if isinstance(w, PatchStatus) and w.kind == kind]


def open_slots(snap: Snapshot, when=NOW) -> list[str]:
    return [s for x in snap.leases if x.open_at(when) for s in x.spec.slice.slots]


def converge(snap: Snapshot, when=NOW) -> tuple[Snapshot, list]:
    writes = plan_ledger(snap, when)
    after = apply_writes(snap, writes)
    assert plan_ledger(after, when) == [], "a second pass over the result must write nothing"
    return after, writes


# --- admission ---------------------------------------------------------------------------------------------------


def test_admit_mints_one_lease_per_group_with_slots_payer_owner_reason_start_and_labels():
    snap = snapshot(*NODES, TEAM, pending("job", 16))
    after, writes = converge(snap)
    minted = creates(writes)
    assert [w.name for w in minted] == ["job-g0-active-0", "job-g1-active-0"]
    bodies = [w.body for w in minted]
    # best fit: each group of 8 on one node, n1 first (tightest, then by name), then n2 (d1 keeps the run together)
    assert [b["spec"]["slice"]["slots"] for b in bodies] == [slots("n1", 8), slots("n2", 8)]
    for group, body in enumerate(bodies):
        spec = body["spec"]
        assert spec["owner"] == "org:x:team"
        assert spec["runRef"] == {"namespace": "team", "name": "job"}
        assert spec["group"] == group
        assert spec["paidBy"] == {"namespace": "team", "budget": "b", "envelope": "west"}
        assert spec["reason"] == "Start"
        assert spec["start"] == iso(NOW)
        assert spec["slice"]["role"] == "Active"
        assert body["metadata"]["labels"] == {"jobtree.dev/run": "job", "jobtree.dev/group": str(group),
                                              "jobtree.dev/role": "Active"}
    assert all(w.cause.startswith("Start: mint team/job-g") for w in minted)
    assert len(open_slots(after)) == 16


def test_runs_admitted_in_one_pass_never_share_a_slot():
    """Three runs of 8: each gets a whole node; the fourth does not fit and gets a Reservation instead."""
    snap = snapshot(*NODES, TEAM, *(pending(f"r{i}", created=at(minutes=i)) for i in range(4)))
    after, writes = converge(snap)
    used = open_slots(after)
    assert len(used) == len(set(used)) == 24
    assert [w.body["spec"]["runRef"]["name"] for w in creates(writes)] == ["r0", "r1", "r2"]
    assert [w.name for w in creates(writes, "Reservation")] == ["r3-r1"]


def test_a_group_straddling_two_envelopes_is_split_by_payer():
    """Own envelope has 4 GPUs of headroom, the parent's 16: group 0 (8) gets two leases, 4 + 4."""
    snap = snapshot(
        *NODES,
        budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=4)]),
        budget("p", "org", owner="org:x", envelopes=[envelope("all", concurrency=16)]),
        pending("job"),
    )
    _, writes = converge(snap)
    minted = creates(writes)
    assert [(w.name, len(w.body["spec"]["slice"]["slots"]), w.body["spec"]["paidBy"]) for w in minted] == [
        ("job-g0-active-0", 4, {"namespace": "team", "budget": "b", "envelope": "west"}),
        ("job-g0-active-1", 4, {"namespace": "org", "budget": "p", "envelope": "all"}),
    ]
    assert sorted(s for w in minted for s in w.body["spec"]["slice"]["slots"]) == slots("n1", 8)


def test_an_envelope_whose_selector_matches_the_group_pays_first():
    """west pays only for region=east nodes (none of the group's), east for all of them: east pays."""
    snap = snapshot(
        *(node(n.name, domain=n.domain, labels={"region": "east"}) for n in NODES),
        budget("b", "team", owner="org:x:team", envelopes=[
            envelope("west", concurrency=8, selector={"region": "west"}),
            envelope("east", concurrency=8, selector={"region": "east"}),
        ]),
        pending("job"),
    )
    _, writes = converge(snap)
    assert [w.body["spec"]["paidBy"]["envelope"] for w in creates(writes)] == ["east"]


def test_spares_get_their_own_lease_in_the_group_domain():
    snap = snapshot(*NODES, TEAM, pending("job", 8, group_gpus=4, spares_per_group=2))
    _, writes = converge(snap)
    got = [(w.name, w.body["spec"]["slice"]["role"], w.body["spec"]["slice"]["slots"]) for w in creates(writes)]
    assert got == [
        ("job-g0-active-0", "Active", slots("n1", 4)),
        ("job-g0-spare-0", "Spare", slots("n1", 2, 4)),
        ("job-g1-active-0", "Active", slots("n2", 4)),
        ("job-g1-spare-0", "Spare", slots("n2", 2, 4)),
    ]


def test_no_cross_group_spread_keeps_every_group_in_one_domain():
    """n1 has 4 free, n2 8 (d1: 12, 1 group of 8), m1 8 and m2 8 (d2: 16, 2 groups): both groups in d2."""
    nodes = [*NODES, node("m2", domain="d2")]
    other = holding("other-g0", "n1", 4)
    job = run("job", "team", gpus=16, phase=None, group_gpus=8)
    job = msgspec.convert({**to_manifest(job), "spec": {**to_manifest(job)["spec"],
                                                        "locality": {"groupGPUs": 8, "allowCrossGroupSpread": False}}},
                          Run)
    _, writes = converge(snapshot(*nodes, TEAM, run("other", "team", gpus=4), other, job))
    assert [w.body["spec"]["slice"]["slots"] for w in creates(writes)] == [slots("m1", 8), slots("m2", 8)]


def test_elastic_run_starts_at_its_minimum_and_grows_in_the_same_pass():
    job = pending("job", 24, malleable={"minTotalGPUs": 8, "maxTotalGPUs": 24, "stepGPUs": 8,
                                         "desiredTotalGPUs": 16})
    _, writes = converge(snapshot(*NODES, TEAM, job))
    assert [(w.name, w.body["spec"]["reason"]) for w in creates(writes)] == [
        ("job-g0-active-0", "Start"), ("job-g1-active-0", "Grow")]


def test_a_run_short_of_funding_is_not_admitted():
    snap = snapshot(*NODES, budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=4)]),
                    pending("job"))
    assert creates(plan_ledger(snap, NOW)) == []


def test_blocked_runs_get_nothing():
    """No Budget in the namespace (UnboundNamespace): no lease, no Reservation."""
    snap = snapshot(*NODES, TEAM, run("job", "lonely", gpus=8, phase=None))
    assert plan_ledger(snap, NOW) == []


# --- closing ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("phase", "reason"), [("Succeeded", "Completed"), ("Failed", "Completed")])
def test_leases_of_a_finished_run_close_completed(phase, reason):
    done = run("done", "team", gpus=8, phase=phase)
    snap = snapshot(*NODES, TEAM, done, holding("done-g0", "n1"),
                    holding("done-old", "n2", run_name="done", start=T0, paid_by=("b", "west")))
    closed_before = apply_writes(snap, [PatchStatus(kind="GPULease", namespace="team", name="done-old",
                                                    status={"closed": True, "ended": iso(at(minutes=30)),
                                                            "closureReason": "Completed"})])
    writes = plan_ledger(closed_before, NOW)
    assert [(w.name, w.status) for w in patches(writes, "GPULease")] == [
        ("done-g0", {"closed": True, "ended": iso(NOW), "closureReason": reason})]


def test_leases_of_a_deleted_run_close_run_deleted():
    writes = plan_ledger(snapshot(*NODES, TEAM, holding("ghost-g0", "n1")), NOW)
    assert [(w.name, w.status["closureReason"]) for w in writes] == [("ghost-g0", "RunDeleted")]
    assert plan_ledger(apply_writes(snapshot(*NODES, TEAM, holding("ghost-g0", "n1")), writes), NOW) == []


# --- reservations ------------------------------------------------------------------------------------------------


def full_fleet(*extra, eta=None, team=TEAM):
    """n1, n2, m1 all held by three running runs a, b, c (8 each, owned), plus ``extra``."""
    objects = [*NODES, team]
    for name, node_name in (("a", "n1"), ("b", "n2"), ("c", "m1")):
        objects += [run(name, "team", gpus=8, group_gpus=8, eta=eta, created=T0), holding(f"{name}-g0-active-0",
                                                                                        node_name)]
    return snapshot(*objects, *extra)


def test_reservation_with_unknown_forecast_waits_the_delay():
    snap = full_fleet(pending("job", created=at(minutes=5)))
    _, writes = converge(snap)
    (made,) = creates(writes, "Reservation")
    assert made.name == "job-r1"
    assert made.body["spec"] == {
        "runRef": {"namespace": "team", "name": "job"},
        "scope": {"flavor": "H100"},
        "earliestStart": iso(NOW + timedelta(minutes=15)),
        "payingEnvelope": {"budget": "b", "envelope": "west"},
    }
    assert [w.status["state"] for w in patches(writes, "Reservation")] == ["Pending"]
    longer = plan_ledger(snap, NOW, LedgerOptions(unknown_forecast_delay=timedelta(hours=2)))
    assert creates(longer, "Reservation")[0].body["spec"]["earliestStart"] == iso(NOW + timedelta(hours=2))


def test_reservation_earliest_start_is_the_reported_forecast():
    snap = full_fleet(pending("job"), eta=at(hours=3))
    (made,) = creates(plan_ledger(snap, NOW), "Reservation")
    assert made.body["spec"]["earliestStart"] == iso(at(hours=3))


def test_reservation_of_a_run_without_spread_names_a_domain():
    job = pending("job", 8)
    manifest = to_manifest(job)
    manifest["spec"]["locality"]["allowCrossGroupSpread"] = False
    snap = full_fleet(msgspec.convert(manifest, Run))
    (made,) = creates(plan_ledger(snap, NOW), "Reservation")
    assert made.body["spec"]["scope"] == {"flavor": "H100", "domain": "d1"}


def test_no_reservation_for_a_run_short_of_funding_without_forecast():
    snap = snapshot(*NODES, budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=4)]),
                    pending("job"))
    assert plan_ledger(snap, NOW) == []


def test_pending_reservation_is_released_when_its_run_starts_before_it():
    snap = snapshot(*NODES, TEAM, pending("job"), reservation("job-r1", run_name="job", earliest_start=at(hours=5)))
    writes = plan_ledger(snap, NOW)
    assert [w.name for w in creates(writes)] == ["job-g0-active-0"]
    assert [(w.name, w.status) for w in patches(writes, "Reservation")] == [
        ("job-r1", {"state": "Released", "reason": "Started"})]


# --- activation --------------------------------------------------------------------------------------------------

DUE = at(hours=2)


def reserved_fleet(**kw):
    return full_fleet(pending("job", created=at(minutes=5)),
                      reservation("job-r1", run_name="job", earliest_start=DUE), **kw)


def test_activation_decides_at_earliest_start_then_closes_the_victims_by_lottery():
    snap = reserved_fleet()
    late = DUE + timedelta(seconds=7)  # the pass runs a little after earliestStart
    after, writes = converge(snap, late)
    seed = derive_seed("team/job-r1", DUE)
    kinds = [(type(w).__name__, w.kind) for w in writes]
    # the decision first, then the victim's closure, the victim's record, then the reserving run's lease
    assert kinds[:4] == [("PatchStatus", "Reservation"), ("PatchStatus", "GPULease"), ("PatchStatus", "Run"),
                         ("Create", "GPULease")]
    decision = writes[0].status
    assert decision["state"] == "Activated"
    assert decision["activation"]["at"] == iso(DUE)
    assert decision["activation"]["seed"] == seed
    assert decision["activation"]["deficitGPUs"] == 8
    assert [e["run"] for e in decision["activation"]["conflictSet"]] and len(decision["activation"]["conflictSet"]) == 3
    (action,) = decision["activation"]["actions"]
    victim = writes[1]
    assert victim.key == action["lease"]
    assert victim.status == {"closed": True, "ended": iso(late), "closureReason": "RandomPreempt",
                             "preemption": {"reservation": "team/job-r1", "seed": seed}}
    assert victim.cause.startswith(f"RandomPreempt({seed}) by team/job-r1: close {victim.key}")
    assert writes[2].status == {"preemptions": [{"reservation": "team/job-r1", "seed": seed, "at": iso(DUE),
                                                 "gpus": 8}]}
    assert creates(writes)[0].name == "job-g0-active-0"
    assert [(v.reservation, v.verified) for v in verify_all(after)] == [("team/job-r1", True)]
    # the victim queues behind the run that took its GPUs: within the protection window it gets no Reservation
    # (one arrival sets off at most one lottery, never a chain), and it is not admitted in this pass
    assert creates(writes, "Reservation") == []
    assert not [c for c in creates(writes) if c.body["spec"]["runRef"]["name"] == action["run"].split("/")[1]]


def test_a_recorded_activation_is_finished_from_the_record_never_decided_again():
    """A crash after the decision: the next pass closes the recorded victim, even though the fleet has changed
    so that deciding again would take nothing (another run finished meanwhile and gave back 8 GPUs)."""
    snap = reserved_fleet()
    writes = plan_ledger(snap, DUE)
    decided = apply_writes(snap, writes[:1])
    victim_lease = writes[1].key
    # something else changes before the restart: an unrelated run finishes
    finished = next(r for r in decided.runs if r.key != writes[2].key and r.name in ("a", "b", "c"))
    manifest = to_manifest(finished)
    manifest["status"]["phase"] = "Succeeded"
    changed = Snapshot(nodes=decided.nodes, budgets=decided.budgets,
                       runs=tuple(msgspec.convert(manifest, Run) if r.key == finished.key else r for r in decided.runs),
                       reservations=decided.reservations, leases=decided.leases)
    later = DUE + timedelta(minutes=1)
    again = plan_ledger(changed, later)
    preempts = [w for w in patches(again, "GPULease") if w.status.get("closureReason") == "RandomPreempt"]
    assert [w.key for w in preempts] == [victim_lease]
    assert not [w for w in patches(again, "Reservation") if "activation" in w.status]
    after = apply_writes(changed, again)
    assert all(v.verified for v in verify_all(after))


def test_activation_that_cannot_free_the_deficit_takes_nothing():
    """job needs 32 GPUs (funded: a 64-GPU envelope); the scope holds 24 in all: Failed, no lease closed, and a
    new Reservation follows."""
    snap = full_fleet(pending("job", 32, created=at(minutes=5)),
                      reservation("job-r1", run_name="job", earliest_start=DUE),
                      team=budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=64)]))
    writes = plan_ledger(snap, DUE)
    assert patches(writes, "GPULease") == []
    assert next((w.name, w.status.get("state"), w.status.get("reason")) for w in patches(writes, "Reservation")) == (
        "job-r1", "Failed", "NotEnoughToFree")
    assert [w.name for w in creates(writes, "Reservation")] == ["job-r2"]


def test_reservation_of_a_finished_run_is_released_at_its_time():
    job = run("job", "team", gpus=8, phase="Succeeded")
    snap = snapshot(*NODES, TEAM, job, reservation("job-r1", run_name="job", earliest_start=DUE))
    writes = plan_ledger(snap, DUE)
    assert [(w.name, w.status) for w in writes] == [("job-r1", {"state": "Released", "reason": "RunFinished"})]


# --- crashes -----------------------------------------------------------------------------------------------------


def test_a_pass_cut_short_is_finished_with_the_same_names_and_slots():
    snap = snapshot(*NODES, TEAM, pending("big", 16, spares_per_group=0), pending("small", 8, created=at(minutes=1)))
    writes = plan_ledger(snap, NOW)
    whole = apply_writes(snap, writes)
    for cut in range(len(writes)):
        part = apply_writes(snap, writes[:cut])
        rest = plan_ledger(part, NOW)
        done = apply_writes(part, rest)
        assert sorted(x.key for x in done.leases) == sorted(x.key for x in whole.leases)
        assert {x.key: x.spec for x in done.leases} == {x.key: x.spec for x in whole.leases}


def test_a_lease_created_but_not_yet_seen_is_an_already_exists_not_a_second_lease():
    """The cache lags: the pass mints the same name again, and the API server answers AlreadyExists."""
    snap = snapshot(*NODES, TEAM, pending("job", 16))
    first = plan_ledger(snap, NOW)
    seen_one = apply_writes(snap, first[:1])
    again = plan_ledger(seen_one, NOW)
    assert [w.name for w in creates(again)] == [first[1].name]


# --- the loop applies the ledger's writes in order ----------------------------------------------------------


def test_the_loop_sends_nothing_after_a_ledger_write_that_failed():
    """The decision's PATCH fails (say, forbidden): neither the closures that carry it out nor the lease minted on
    the slots they free are sent (no lease closed by a preemption that is not on record, no slot booked twice);
    the next pass computes them again. Status writes (independent) still go out."""
    import io

    from kubectl_runs.reconciler.apply import Outcome
    from kubectl_runs.reconciler.loop import Logger, Reconciler, Settings

    snap = reserved_fleet()
    writes = plan_ledger(snap, DUE)
    decision = writes[0]
    assert decision.kind == "Reservation" and "activation" in decision.status
    status = PatchStatus(kind="Run", namespace="team", name="job", status={"phase": "Pending"})
    sent: list = []

    class Applier:
        def apply(self, write, at, **_):
            sent.append(write)
            return Outcome(write, "forbidden" if write is decision else "ok")

    loop = Reconciler(lambda: None, Settings(once=True), log=Logger(io.StringIO()))
    loop.applier = Applier()
    outcomes = loop.apply(writes, [status], DUE)
    assert [o.outcome for o in outcomes] == ["forbidden"] + ["skipped"] * (len(writes) - 1) + ["ok"]
    assert sent == [decision, status]


def test_elastic_run_grows_by_as_many_whole_steps_as_fit():
    """min 8, desired 24, steps of 8; n2 and m1 are free, n1 is held: it starts at 8 and grows to 16, not 24."""
    job = pending("job", 24, malleable={"minTotalGPUs": 8, "maxTotalGPUs": 24, "stepGPUs": 8,
                                         "desiredTotalGPUs": 24})
    snap = snapshot(*NODES, TEAM, run("other", "team", gpus=8), holding("other-g0", "n1"), job)
    after, writes = converge(snap)
    assert [(w.name, w.body["spec"]["reason"]) for w in creates(writes)] == [
        ("job-g0-active-0", "Start"), ("job-g1-active-0", "Grow")]
    # when n1 is given back, the next pass grows it the last step
    done = apply_writes(after, [PatchStatus(kind="GPULease", namespace="team", name="other-g0",
                                            status={"closed": True, "ended": iso(NOW), "closureReason": "Completed"})])
    later = plan_ledger(done, NOW + timedelta(minutes=1))
    assert [(w.name, w.body["spec"]["reason"], w.body["spec"]["slice"]["slots"]) for w in creates(later)] == [
        ("job-g2-active-0", "Grow", slots("n1", 8))]
