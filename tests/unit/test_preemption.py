"""Preemption that helps (issue 25): an activation takes only what starts its Run, gives the freed GPUs to that
Run in the same pass, protects Runs from lotteries on a timer, and only the reconciler's own (or an admin's
approved) Reservations may preempt. Each test fails on the resolver and ledger before round 3.

Unless a test says otherwise: nodes n1, n2 in fabric domain d1 and m1 in d2, 8 H100 GPUs each; namespace team
(owner org:x:team) has a 64-GPU envelope ``west``; runs a, b, c hold 8 GPUs each (n1, n2, m1); the Reservation
team/job-r1 is due at DUE = T0 + 1 h and the pass runs at DUE.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
from builders import T0, at, budget, envelope, lease, node, reservation, run, slots, snapshot

from kubectl_runs.engine import resolver
from kubectl_runs.engine.lottery import derive_seed
from kubectl_runs.engine.protection import (
    ADMITTED_BY_ACTIVATION,
    FINISHING_SOON,
    RECENT_VICTIM,
    Windows,
    protections,
)
from kubectl_runs.engine.verify import verify, verify_all
from kubectl_runs.model import Action, Activation, Snapshot
from kubectl_runs.reconciler.actions import Create, PatchStatus
from kubectl_runs.reconciler.ledger import apply_writes, plan_ledger
from kubectl_runs.sources.files import load_snapshot

DUE = at(hours=1)
TEAM = budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=64)])
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"


def holding(name: str, node_name: str, gpus: int = 8, *, group: int = 0, first: int = 0, start=T0):
    return lease(name, "team", owner="org:x:team", run_name=name.split("-g")[0], group=group,
                 slot_list=slots(node_name, gpus, first), paid_by=("b", "west"), start=start)


def fleet(*extra, nodes=None, job_gpus: int = 8, reservation_kw=None, **job) -> Snapshot:
    nodes = nodes or [node("n1", domain="d1"), node("n2", domain="d1"), node("m1", domain="d2")]
    objects = [*nodes, TEAM]
    for name, node_name in (("a", "n1"), ("b", "n2"), ("c", "m1")):
        objects += [run(name, "team", gpus=8, group_gpus=8, created=T0), holding(f"{name}-g0", node_name)]
    pending = run("job", "team", gpus=job_gpus, phase=None, created=at(minutes=5), **job)
    return snapshot(*objects, pending,
                    reservation("job-r1", run_name="job", earliest_start=DUE, **(reservation_kw or {})), *extra)


def closed_by_lottery(name: str, run_name: str, node_name: str, ended: datetime):
    return lease(name, "team", owner="org:x:team", run_name=run_name, slot_list=slots(node_name, 8),
                 paid_by=("b", "west"), start=T0, ended=ended, closed=True, closure_reason="RandomPreempt")


def taken(writes) -> list[str]:
    return [w.key for w in writes if isinstance(w, PatchStatus) and w.kind == "GPULease" and w.status.get("closed")]


def minted(writes, run_name: str) -> list[Create]:
    return [w for w in writes if isinstance(w, Create) and w.kind == "GPULease"
            and w.body["spec"]["runRef"]["name"] == run_name]


def held(snap: Snapshot, run_key: str, when=DUE) -> int:
    return sum(x.gpus for x in snap.leases if x.run_key == run_key and x.open_at(when))


def state(writes, key: str = "team/job-r1") -> tuple[str, str]:
    last = [w.status for w in writes if isinstance(w, PatchStatus) and w.kind == "Reservation" and w.key == key][-1]
    return last.get("state"), last.get("reason")


# --- placement-aware activation --------------------------------------------------------------------------------


def test_slots_on_a_cordoned_node_are_not_candidates():
    """n2 is cordoned: b's lease there would free nothing job could start on. job needs 8; the conflict set
    is a's and c's groups only (the rule before round 3 counted b's 8 GPUs too), and one of them is taken."""
    nodes = [node("n1", domain="d1"), node("n2", domain="d1", unschedulable=True), node("m1", domain="d2")]
    snap = fleet(nodes=nodes, group_gpus=8)
    result = resolver.resolve(snap, snap.reservations_by_key["team/job-r1"], DUE)
    assert sorted(e.run for e in result.conflict_set) == ["team/a", "team/c"]
    assert result.placed and len(result.actions) == 1 and result.actions[0].run != "team/b"


def test_victims_split_across_domains_are_not_taken_when_they_cannot_place_the_run():
    """job wants 16 GPUs in one domain (groups of 8, no cross-group spread). d1 (n1, n2) holds a and b; d2 (m1)
    holds c and has only 8 slots. By count, any two victims free 16; only a and b, both in d1, start job. The
    shortest prefix of the draw that places it must contain both a and b: c, if drawn first, is taken only when
    it comes before them in the draw — and then job still starts (it takes d1)."""
    snap = fleet(job_gpus=16, group_gpus=8, spread=False)
    result = resolver.resolve(snap, snap.reservations_by_key["team/job-r1"], DUE)
    assert result.placed
    victims = [a.run for a in result.actions]
    assert {"team/a", "team/b"} <= set(victims)
    # a prefix of the draw order, and the shortest one that places
    order = [e.run for e in result.conflict_set]
    assert victims == order[: len(victims)]
    writes = plan_ledger(snap, DUE)
    after = apply_writes(snap, writes)
    assert held(after, "team/job") == 16
    assert all(v.verified for v in verify_all(after))


def test_freed_but_not_placeable_takes_nothing():
    """job wants 16 in one domain, but every domain has 8 slots (n1 in d1, m1 in d2, p1 in d3): taking all
    three victims would free 24 GPUs by count, and none places: nothing is taken, Failed NotPlaceable."""
    nodes = [node("n1", domain="d1"), node("n2", domain="d2"), node("m1", domain="d3")]
    snap = fleet(nodes=nodes, job_gpus=16, group_gpus=16)
    writes = plan_ledger(snap, DUE)
    assert taken(writes) == []
    assert state(writes) == ("Failed", "NotPlaceable")


def test_not_enough_to_free_takes_nothing():
    """job wants 32 (no groups); the whole fleet has 24 slots: nothing is taken, Failed NotEnoughToFree."""
    writes = plan_ledger(fleet(job_gpus=32), DUE)
    assert taken(writes) == [] and state(writes) == ("Failed", "NotEnoughToFree")


def test_the_freed_gpus_go_to_the_reserving_run_in_the_same_pass_and_no_victim_gets_them_back():
    """job needs 8: one victim is taken, job is admitted on its slots in the same pass, the victim is not
    re-admitted anywhere (nothing else is free) and gets no Reservation (it queues behind job)."""
    snap = fleet(group_gpus=8)
    writes = plan_ledger(snap, DUE)
    after = apply_writes(snap, writes)
    (victim_lease,) = taken(writes)
    victim = victim_lease.rsplit("-g", 1)[0]
    assert held(after, "team/job") == 8
    lost = set(snap.leases_by_key[victim_lease].spec.slice.slots)
    job_slots = {s for x in after.leases if x.run_key == "team/job" and x.open_at(DUE) for s in x.spec.slice.slots}
    assert job_slots == lost
    assert held(after, victim) == 0
    assert not [w for w in writes if isinstance(w, Create) and w.kind == "Reservation"]
    assert plan_ledger(after, DUE) == []


def test_a_victim_is_not_readmitted_onto_the_slots_it_just_lost():
    """job needs 4 GPUs (no groups): the draw takes a whole 8-GPU group, job uses 4 of its slots, and the other
    4 stay free in this pass rather than going back to the victim (which needs 8 anyway in one group)."""
    snap = fleet(job_gpus=4)
    writes = plan_ledger(snap, DUE)
    (victim_lease,) = taken(writes)
    victim = victim_lease.rsplit("-g", 1)[0].split("/")[1]
    assert minted(writes, victim) == []
    assert len(minted(writes, "job")) == 1


# --- no thrash ------------------------------------------------------------------------------------------------


def test_a_run_started_by_an_activation_is_protected_for_the_minimum_run_time():
    """a started through job0-r1's activation 10 minutes ago (lease start >= the activation): with the default
    1 h minimum run time it is out of every remedy; the draw takes b or c, and the record names a's protection."""
    objects = [node("n1", domain="d1"), node("n2", domain="d1"), node("m1", domain="d2"), TEAM]
    started = DUE - timedelta(minutes=10)
    objects += [run("a", "team", gpus=8, group_gpus=8, created=T0), holding("a-g0", "n1", start=started)]
    for name, node_name in (("b", "n2"), ("c", "m1")):
        objects += [run(name, "team", gpus=8, group_gpus=8, created=T0), holding(f"{name}-g0", node_name)]
    old = reservation("a-r1", run_name="a", earliest_start=started, state="Activated")
    old = msgspec.structs.replace(old, status=msgspec.structs.replace(
        old.status, activation=Activation(at=started, seed=derive_seed("team/a-r1", started))))
    snap = snapshot(*objects, run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)), old,
                    reservation("job-r1", run_name="job", earliest_start=DUE))
    shield = protections(snap, DUE, Windows())
    assert shield["team/a"].reason == ADMITTED_BY_ACTIVATION
    assert shield["team/a"].until == started + timedelta(hours=1)
    result = resolver.resolve(snap, snap.reservations_by_key["team/job-r1"], DUE, protected=shield)
    assert "team/a" not in {a.run for a in result.actions} | {e.run for e in result.conflict_set}
    assert [p.run for p in result.protected] == ["team/a"]
    # without the window a is a candidate again
    bare = resolver.resolve(snap, snap.reservations_by_key["team/job-r1"], DUE)
    assert "team/a" in {e.run for e in bare.conflict_set}


def test_no_run_is_a_lottery_victim_twice_within_the_window():
    """a lost a lease to a lottery 30 minutes ago (victim protection 6 h): it is protected and the record says
    so; 5 h 35 min later it is a candidate again."""
    lost = closed_by_lottery("a-g0-old", "a", "n1", DUE - timedelta(minutes=30))
    snap = fleet(lost, group_gpus=8)
    shield = protections(snap, DUE, Windows())
    assert shield["team/a"].reason == RECENT_VICTIM
    assert "team/a" not in protections(snap, DUE + timedelta(hours=5, minutes=35), Windows())
    writes = plan_ledger(snap, DUE)
    decision = next(w for w in writes if isinstance(w, PatchStatus) and "activation" in w.status)
    assert [p["run"] for p in decision.status["activation"]["protected"]] == ["team/a"]
    assert "team/a-g0" not in taken(writes)
    assert all(v.verified for v in verify_all(apply_writes(snap, writes)))


def test_a_recent_lottery_victim_gets_no_reservation_so_lotteries_do_not_chain():
    """v lost its lease to a lottery 20 minutes ago and is pending again; the fleet is full. Before round 3 it got
    a Reservation due in 15 minutes and set off the next lottery; now it waits for free GPUs until its victim
    protection (6 h) ends."""
    lost = closed_by_lottery("v-g0-old", "v", "n2", DUE - timedelta(minutes=20))
    objects = [node("n1", domain="d1"), node("n2", domain="d1"), TEAM, lost,
               run("v", "team", gpus=8, group_gpus=8, phase=None, created=T0)]
    for name, node_name in (("a", "n1"), ("b", "n2")):
        objects += [run(name, "team", gpus=8, group_gpus=8, created=T0), holding(f"{name}-g0", node_name)]
    writes = plan_ledger(snapshot(*objects), DUE)
    assert not [w for w in writes if isinstance(w, Create) and w.kind == "Reservation"]
    later = plan_ledger(snapshot(*objects), DUE + timedelta(hours=6))
    assert [w.name for w in later if isinstance(w, Create) and w.kind == "Reservation"] == ["v-r1"]


def test_a_run_about_to_finish_is_not_a_victim_and_the_activation_waits_for_it():
    """Every holder reports its completion 5 minutes after DUE (within the 15-minute grace): none is a victim.
    The Reservation stays Pending (AwaitingRelease) and takes nothing, rather than preempting a run exactly
    as it finishes; once the grace has passed without them finishing, the lottery may take one."""
    snap = snapshot(
        node("n1", domain="d1"), TEAM,
        run("a", "team", gpus=8, group_gpus=8, created=T0, eta=DUE + timedelta(minutes=5)), holding("a-g0", "n1"),
        run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)),
        reservation("job-r1", run_name="job", earliest_start=DUE),
    )
    assert protections(snap, DUE, Windows())["team/a"].reason == FINISHING_SOON
    writes = plan_ledger(snap, DUE)
    assert taken(writes) == [] and state(writes) == ("Pending", "AwaitingRelease")
    again = plan_ledger(apply_writes(snap, writes), DUE + timedelta(minutes=1))
    assert again == []  # said once
    overdue = plan_ledger(apply_writes(snap, writes), DUE + timedelta(minutes=25))
    assert taken(overdue) == ["team/a-g0"]


# --- who may preempt ---------------------------------------------------------------------------------------------


def test_a_reservation_the_reconciler_did_not_make_is_failed_at_once_and_takes_nothing():
    """A hand-written Reservation (no managed-by label, no approval) due now: Failed NotAuthorized before it
    could activate, nothing closed; job then gets the reconciler's own Reservation, queued like any other."""
    snap = fleet(group_gpus=8, reservation_kw={"managed": False})
    writes = plan_ledger(snap, DUE)
    assert taken(writes) == []
    assert state(writes) == ("Failed", "NotAuthorized")
    made = [w for w in writes if isinstance(w, Create) and w.kind == "Reservation"]
    assert [w.body["metadata"]["labels"]["app.kubernetes.io/managed-by"] for w in made] == ["kubectl-runs-reconciler"]


def test_an_admin_approved_reservation_may_preempt():
    snap = fleet(group_gpus=8, reservation_kw={"managed": False,
                                               "annotations": {"jobtree.dev/preemption": "approved"}})
    writes = plan_ledger(snap, DUE)
    assert len(taken(writes)) == 1 and state(writes)[0] == "Activated"


# --- seeds verify on the placement rule ---------------------------------------------------------------------------


def test_verify_refuses_victims_that_are_not_a_prefix_of_the_draw():
    """A placement-rule record whose lottery skipped the first group of the draw is not what the draw takes."""
    snap = fleet(group_gpus=8)
    after = apply_writes(snap, plan_ledger(snap, DUE))
    rsv = after.reservations_by_key["team/job-r1"]
    activation = rsv.status.activation
    assert activation.rule == "placement" and verify(rsv, after.leases_by_key).verified
    second = activation.conflict_set[1]
    forged_action = Action(kind="Lottery", run=second.run, group=second.group, lease=f"{second.run}-g0", gpus=8)
    forged = msgspec.structs.replace(rsv, status=msgspec.structs.replace(
        rsv.status, activation=msgspec.structs.replace(activation, actions=(forged_action,))))
    differences = verify(forged, after.leases_by_key).differences
    assert any("wrong victim" in d for d in differences)


# --- the example fleet ---------------------------------------------------------------------------------------------


def test_example_fleet_at_pretrain_32_earliest_start_starts_it_in_that_pass():
    """examples/fleet.yaml at rai-sys/pretrain-32-r1's earliestStart (2025-11-22T00:00:00Z): gpu-b-04 is cordoned
    and gpu-a-04 out of service, so the 8 GPUs there are no candidates. The activation either takes nothing or
    takes what starts pretrain-32 (32 GPUs, groups of 16) in that same pass; today it starts it, and every
    decision replays with seeds verify."""
    snap = load_snapshot([str(EXAMPLE)])
    when = datetime(2025, 11, 22, tzinfo=UTC)
    writes = plan_ledger(snap, when)
    after = apply_writes(snap, writes)
    rsv = after.reservations_by_key["rai-sys/pretrain-32-r1"]
    assert rsv.status.state == "Activated"
    assert held(after, "rai-sys/pretrain-32", when) == 32
    cordoned = {"gpu-b-04", "gpu-a-04"}
    assert not [a for a in rsv.status.activation.actions
                if any(s.split("#")[0] in cordoned for s in snap.leases_by_key[a.lease].spec.slice.slots)]
    assert all(v.verified for v in verify_all(after))
    assert plan_ledger(after, when) == []


# --- the command line -------------------------------------------------------------------------------------------


def test_reconcile_at_without_once_is_a_usage_error(capsys):
    """Before round 3 ``reconcile --at TIME`` was accepted and silently ignored: a watching reconciler runs on the
    wall clock, so --at is refused (exit 2, one line) unless --once or --dry-run decides as of that instant."""
    from builders import run_cli

    code, out, err = run_cli(capsys, "reconcile", "--at", "2025-11-22T00:00:00Z", "--no-leader-elect")
    assert code == 2 and out == ""
    first, *rest = err.strip().splitlines()
    assert first.startswith("error: --at") and "--once" in first and "Traceback" not in err
    assert rest == ["See 'kubectl runs reconcile --help' for usage."]  # kubectl's usage-error hint


def test_reconcile_refuses_a_negative_or_malformed_window(capsys):
    from builders import run_cli

    for flag, value in (("--min-run-time", "-1h"), ("--victim-protection", "soon"), ("--eta-grace", "5x")):
        code, _out, err = run_cli(capsys, "reconcile", "--once", flag, value)
        assert code == 2 and flag in err, (flag, err)


def test_windows_reach_the_ledger_from_the_flags():
    """--min-run-time 0s etc. become the ledger's LedgerOptions (the protection windows)."""
    from kubectl_runs.cli.reconcile import _ledger

    planner = _ledger({"min_run_time": 0.0, "victim_protection": 60.0, "eta_grace": 1.0})
    options = planner.options  # ledger.Keeper: the loop's plan_ledger, with its options
    assert (options.min_run_time, options.victim_protection, options.eta_grace) == (
        timedelta(0), timedelta(minutes=1), timedelta(seconds=1))


def test_a_run_whose_status_names_a_reservation_no_longer_pending_plans_with_its_pending_one():
    """job's status still names job-r1 (Failed since); job-r2 is its pending Reservation: plan shows job-r2's
    draw (instant and seed) and status points at job-r2, never at the Reservation that is no longer pending."""
    from kubectl_runs.engine.plan import plan_run
    from kubectl_runs.reconciler.status import status_writes

    snap = fleet(group_gpus=8, reservation_kw={"state": "Failed"})
    job = snap.runs_by_key["team/job"]
    job = msgspec.structs.replace(job, status=msgspec.structs.replace(job.status, pending_reservation="job-r1"))
    later = DUE + timedelta(hours=1)
    snap = snapshot(*snap.nodes, *snap.budgets, *[r for r in snap.runs if r.name != "job"], job, *snap.leases,
                    *snap.reservations, reservation("job-r2", run_name="job", earliest_start=later))
    plan = plan_run(snap, job, DUE)
    assert plan.report.reservation.name == "team/job-r2" and plan.seed == derive_seed("team/job-r2", later)
    (write,) = [w for w in status_writes(snap, DUE, {}) if w.kind == "Run" and w.name == "job"]
    assert write.status["pendingReservation"] == "job-r2"


def test_a_reported_eta_that_keeps_moving_does_not_hold_a_reservation_for_ever():
    """a keeps reporting it finishes 10 minutes from now. Within one grace of earliestStart the Reservation
    waits (AwaitingRelease); once DUE + 15 min has passed, a moving ETA no longer protects a: the lottery takes it."""
    def fleet_at(now):
        return snapshot(
            node("n1", domain="d1"), TEAM,
            run("a", "team", gpus=8, group_gpus=8, created=T0, eta=now + timedelta(minutes=10)), holding("a-g0", "n1"),
            run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)),
            reservation("job-r1", run_name="job", earliest_start=DUE),
        )
    assert state(plan_ledger(fleet_at(DUE), DUE)) == ("Pending", "AwaitingRelease")
    late = DUE + timedelta(minutes=20)
    assert taken(plan_ledger(fleet_at(late), late)) == ["team/a-g0"]


def test_growth_does_not_renew_the_protection_of_a_run_an_activation_started():
    """e started through an activation at T0 + 1 h and grew a group at T0 + 1 h 50: its protection counts from
    its first lease after the activation (until T0 + 2 h), not from the growth."""
    started = at(hours=1)
    old = reservation("e-r1", run_name="e", earliest_start=started, state="Activated")
    old = msgspec.structs.replace(old, status=msgspec.structs.replace(
        old.status, activation=Activation(at=started, seed=derive_seed("team/e-r1", started), decided_at=started)))
    snap = snapshot(node("n1", domain="d1"), node("n2", domain="d1"), TEAM, old,
                    run("e", "team", gpus=16, group_gpus=8, created=T0,
                        malleable={"minTotalGPUs": 8, "maxTotalGPUs": 16, "stepGPUs": 8}),
                    holding("e-g0", "n1", start=started), holding("e-g1", "n2", group=1, start=at(hours=1, minutes=50)))
    shield = protections(snap, at(hours=1, minutes=55), Windows())
    assert shield["team/e"].reason == ADMITTED_BY_ACTIVATION and shield["team/e"].until == at(hours=2)
    assert "team/e" not in protections(snap, at(hours=2, minutes=1), Windows())


def test_after_an_activation_that_found_nothing_the_next_reservation_waits_the_unknown_forecast_delay():
    """job-r1 Failed NotEnoughToFree a minute ago. a reports it completes 20 s from now, so job's forecast says
    DUE + 20 s; its next Reservation is due in 15 minutes all the same, not 20 s later (no Reservation, and no
    failed activation, every few seconds while the forecast counts what the resolver may not take)."""
    failed = reservation("job-r1", run_name="job", earliest_start=DUE - timedelta(minutes=1), state="Failed")
    failed = msgspec.structs.replace(failed, status=msgspec.structs.replace(failed.status, reason="NotEnoughToFree"))
    objects = [node("n1", domain="d1"), node("n2", domain="d1"), TEAM, failed,
               run("a", "team", gpus=8, group_gpus=8, created=T0, eta=DUE + timedelta(seconds=20)),
               holding("a-g0", "n1"), run("job", "team", gpus=16, group_gpus=8, phase=None, created=at(minutes=5))]
    (made,) = [w for w in plan_ledger(snapshot(*objects), DUE) if isinstance(w, Create) and w.kind == "Reservation"]
    assert made.body["spec"]["earliestStart"] == "2025-11-01T01:15:00Z"
    fresh = plan_ledger(snapshot(*objects[:3], *objects[4:]), DUE)  # without the failed one: the forecast, 20 s
    (first,) = [w for w in fresh if isinstance(w, Create) and w.kind == "Reservation"]
    assert first.body["spec"]["earliestStart"] == "2025-11-01T01:00:20Z"
