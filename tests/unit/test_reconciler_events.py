"""The Events of the ledger keeper (reconciler/events.py: the writes that were made -> events.k8s.io/v1 Events),
their bodies (apply.report_body), and the loop that reports them only after a write succeeded, best effort.

The fleets are test_ledger.py's: nodes n1, n2 (domain d1) and m1 (d2) of 8 H100 GPUs; runs a, b, c hold one
each; ``job`` waits with Reservation job-r1 due at DUE."""

from __future__ import annotations

import io
from datetime import timedelta

import msgspec
import pytest
from builders import activated, lease, reservation, run, slots, snapshot
from test_ledger import DUE, NODES, NOW, TEAM, full_fleet, holding, pending, reserved_fleet

from kubectl_runs.engine.lottery import derive_seed
from kubectl_runs.model import Snapshot
from kubectl_runs.reconciler.actions import Create, ObjectRef, PatchStatus, ReportEvent
from kubectl_runs.reconciler.apply import Outcome, report_body
from kubectl_runs.reconciler.events import ledger_events, slots_text
from kubectl_runs.reconciler.ledger import apply_writes, plan_ledger
from kubectl_runs.reconciler.loop import Logger, Reconciler, Settings


def with_uids(snap: Snapshot) -> Snapshot:
    """Every object with a uid, as the API server gives them (``uid-<name>``)."""
    def uid(obj):
        return msgspec.structs.replace(obj, metadata=msgspec.structs.replace(obj.metadata, uid=f"uid-{obj.name}"))

    return Snapshot(nodes=snap.nodes, budgets=snap.budgets, runs=tuple(map(uid, snap.runs)),
                    reservations=tuple(map(uid, snap.reservations)), leases=tuple(map(uid, snap.leases)))


def made(snap: Snapshot, writes) -> list[tuple]:
    """Every write made, answered with the object as the API server would store it (with a uid)."""
    after = with_uids(apply_writes(snap, writes))
    objects = {("Run", x.key): x for x in after.runs} | {("Reservation", x.key): x for x in after.reservations} | {
        ("GPULease", x.key): x for x in after.leases}
    return [(w, objects.get((w.kind, w.key))) for w in writes]


def by(events, kind: str, reason: str) -> list[ReportEvent]:
    return [e for e in events if e.kind == kind and e.reason == reason]


def activation_pass():
    snap = with_uids(reserved_fleet())
    late = DUE + timedelta(seconds=7)
    writes = plan_ledger(snap, late)
    after = with_uids(apply_writes(snap, writes))
    return snap, writes, after, ledger_events(made(snap, writes), after)


def test_an_activation_by_lottery_is_told_on_the_reservation_the_victim_lease_and_both_runs():
    _snap, writes, _after, events = activation_pass()
    seed = derive_seed("team/job-r1", DUE)
    victim = writes[1]
    victim_run = writes[2].name
    (activated_,) = by(events, "Reservation", "Activated")
    assert (activated_.name, activated_.uid, activated_.type, activated_.verb) == (
        "job-r1", "uid-job-r1", "Normal", "Activate")
    assert f"with seed {seed}" in activated_.note and "deficit 8 GPUs" in activated_.note
    assert "Lottery 8" in activated_.note and "conflict set 3 groups" in activated_.note
    assert activated_.related == ObjectRef(kind="Run", namespace="team", name="job", uid="uid-job")
    (on_job,) = by(events, "Run", "ReservationActivated")
    assert on_job.name == "job" and on_job.uid == "uid-job" and seed in on_job.note and "team/job-r1" in on_job.note
    (closed,) = by(events, "GPULease", "RandomPreempt")
    assert (closed.name, closed.uid, closed.type, closed.verb) == (victim.name, f"uid-{victim.name}", "Warning",
                                                                      "Close")
    assert f"by reservation team/job-r1 with seed {seed}" in closed.note and "8 GPUs (" in closed.note
    (preempted,) = by(events, "Run", "Preempted")
    assert (preempted.name, preempted.uid, preempted.type) == (victim_run, f"uid-{victim_run}", "Warning")
    assert preempted.note.startswith(f"preempted (RandomPreempt) by reservation team/job-r1 with seed {seed}: "
                                     f"8 GPUs closed in 1 lease: {victim.key} (group 0, 8 Active GPUs: ")
    assert preempted.related == ObjectRef(kind="Reservation", namespace="team", name="job-r1", uid="uid-job-r1")
    (minted,) = by(events, "GPULease", "Minted")
    assert minted.name == "job-g0-active-0" and "paid by team/b/west" in minted.note
    (admitted,) = by(events, "Run", "Admitted")
    assert admitted.name == "job" and "job-g0-active-0" in admitted.note and "8 GPUs" in admitted.note
    # the victim queues behind job: within its victim protection it gets no Reservation (round 3), so no
    # ReservationCreated; the victim run's preemption record is no news
    assert by(events, "Reservation", "ReservationCreated") == []
    assert len(events) == 6, [(e.kind, e.name, e.reason) for e in events]


def test_event_names_are_deterministic_and_free_of_times_and_causes():
    snap, writes, after, events = activation_pass()
    assert [e.event for e in ledger_events(made(snap, writes), after)] == [e.event for e in events]
    assert len({e.event for e in events}) == len(events)
    for event in events:
        assert event.event.startswith(event.name + ".") and len(event.event.split(".")[-1]) == 16
    # the same closure sent again later (a retry: another ``ended``, a reworded cause) has the same name
    victim = writes[1]
    later = msgspec.structs.replace(victim, status={**victim.status, "ended": "2030-01-01T00:00:00Z"},
                                    cause="reworded")
    again = ledger_events([(later, after.leases_by_key[victim.key])], after)
    assert {e.event for e in again} <= {e.event for e in events}
    # another object of the same name (another uid) is another Event
    other = msgspec.structs.replace(after.leases_by_key[victim.key],
                                    metadata=msgspec.structs.replace(after.leases_by_key[victim.key].metadata,
                                                                     uid="uid-new"))
    assert ledger_events([(victim, other)], after)[0].event not in {e.event for e in events}


def test_without_answers_the_cache_gives_the_uids_and_the_lease():
    snap = with_uids(reserved_fleet())
    writes = plan_ledger(snap, DUE)
    events = ledger_events([(w, None) for w in writes], with_uids(apply_writes(snap, writes)))
    (preempted,) = by(events, "Run", "Preempted")
    assert preempted.uid == f"uid-{preempted.name}"
    assert by(events, "GPULease", "RandomPreempt")[0].uid.startswith("uid-")


@pytest.mark.parametrize(("reason", "run_reason"), [("Shrink", "Shrunk"), ("DropSpare", "SpareDropped")])
def test_shrink_and_drop_spare_name_the_reservation_from_its_recorded_activation(reason, run_reason):
    seed = derive_seed("team/job-r1", DUE)
    action_kind = {"Shrink": "Shrink", "DropSpare": "DropSpare"}[reason]
    res = activated(reservation("job-r1", run_name="job", earliest_start=DUE), {
        "at": DUE.strftime("%Y-%m-%dT%H:%M:%SZ"), "seed": seed, "deficitGPUs": 4, "freedGPUs": 4,
        "actions": [{"kind": action_kind, "run": "team/el", "group": 1, "lease": "team/el-g1-active-0", "gpus": 4}]})
    held = lease("el-g1-active-0", run_name="el", group=1, slot_list=slots("m1", 4, 4), paid_by=("b", "west"))
    snap = with_uids(snapshot(*NODES, TEAM, run("el", gpus=8), held, res))
    write = PatchStatus(kind="GPULease", namespace="team", name="el-g1-active-0",
                        status={"closed": True, "ended": "2025-11-20T12:00:00Z", "closureReason": reason})
    events = ledger_events([(write, None)], snap)
    (on_lease,) = by(events, "GPULease", reason)
    assert on_lease.type == "Normal" and "by reservation team/job-r1 with seed" in on_lease.note
    (on_run,) = by(events, "Run", run_reason)
    assert on_run.name == "el" and on_run.type == "Normal"
    words = {"Shrunk": "shrunk", "SpareDropped": "spares dropped"}[run_reason]
    assert on_run.note == (f"{words} ({reason}) by reservation team/job-r1 with seed {seed}: 4 GPUs "
                           f"closed in 1 lease: team/el-g1-active-0 (group 1, 4 Active GPUs: m1#4-7)")


@pytest.mark.parametrize("reason", ["Completed", "RunDeleted"])
def test_a_completed_or_deleted_runs_lease_is_told_on_the_lease_only(reason):
    snap = with_uids(snapshot(*NODES, TEAM, run("a", phase="Succeeded"), holding("a-g0-active-0", "n1")))
    write = PatchStatus(kind="GPULease", namespace="team", name="a-g0-active-0",
                        status={"closed": True, "ended": "2025-11-20T12:00:00Z", "closureReason": reason})
    (event,) = ledger_events([(write, None)], snap)
    assert (event.kind, event.reason, event.type) == ("GPULease", reason, "Normal")
    assert event.note == f"closed ({reason}): 8 GPUs (n1#0-7) of run team/a group 0"


def test_an_elastic_run_admitted_and_grown_in_one_pass_gets_one_admitted_event():
    job = pending("job", 24, malleable={"minTotalGPUs": 8, "maxTotalGPUs": 24, "stepGPUs": 8,
                                         "desiredTotalGPUs": 24})
    snap = with_uids(snapshot(*NODES, TEAM, job))
    writes = plan_ledger(snap, NOW)
    assert {w.body["spec"]["reason"] for w in writes if isinstance(w, Create)} == {"Start", "Grow"}
    events = ledger_events(made(snap, writes), with_uids(apply_writes(snap, writes)))
    (admitted,) = [e for e in events if e.kind == "Run"]
    assert admitted.reason == "Admitted" and admitted.note.startswith("admitted: 24 GPUs in 3 leases: ")
    # a run that holds its start width and grows: Grown
    grow = [(w, a) for w, a in made(snap, writes) if isinstance(w, Create) and w.body["spec"]["reason"] == "Grow"]
    (grown,) = [e for e in ledger_events(grow, snap) if e.kind == "Run"]
    assert grown.reason == "Grown" and grown.verb == "Grow"


@pytest.mark.parametrize(("state", "status_reason", "reason", "kind"), [
    ("Failed", "ConflictSetTooSmall", "ReservationFailed", "Warning"),
    ("Failed", "NotEnoughToFree", "ReservationFailed", "Warning"),
    ("Failed", "NotAuthorized", "ReservationFailed", "Warning"),
    ("Released", "Started", "Released", "Normal"),
    ("Expired", "TooLate", "ReservationExpired", "Normal"),
])
def test_reservation_states_map_generically(state, status_reason, reason, kind):
    snap = with_uids(full_fleet(pending("job"), reservation("job-r1", run_name="job", earliest_start=DUE)))
    write = PatchStatus(kind="Reservation", namespace="team", name="job-r1",
                        status={"state": state, "reason": status_reason}, cause="the ledger's words")
    events = ledger_events([(write, None)], snap)
    on_reservation = events[0]
    assert (on_reservation.kind, on_reservation.reason, on_reservation.type, on_reservation.uid) == (
        "Reservation", reason, kind, "uid-job-r1")
    assert on_reservation.note == f"{state.lower()} ({status_reason}) for run team/job: the ledger's words"
    on_run = [e for e in events if e.kind == "Run"]
    if state == "Failed":
        (failed,) = on_run
        assert failed.reason == "ReservationFailed" and failed.type == "Warning" and failed.uid == "uid-job"
        assert status_reason in failed.note and "team/job-r1" in failed.note
    else:
        assert on_run == []


def test_pending_is_no_event_but_a_created_reservation_is():
    snap = with_uids(full_fleet(pending("job", created=NOW - timedelta(minutes=1))))
    writes = plan_ledger(snap, NOW)
    assert [type(w).__name__ for w in writes] == ["Create", "PatchStatus"]
    events = ledger_events(made(snap, writes), with_uids(apply_writes(snap, writes)))
    (created,) = events
    assert created.reason == "ReservationCreated" and created.uid == "uid-job-r1"
    assert created.note.startswith("created for run team/job: H100 GPUs from ")
    pending_again = PatchStatus(kind="Reservation", namespace="team", name="job-r1",
                                status={"state": "Pending", "reason": "AwaitingRelease"})
    assert ledger_events([(pending_again, None)], snap) == []


def test_other_writes_say_nothing():
    snap = with_uids(full_fleet())
    status = PatchStatus(kind="Run", namespace="team", name="a", status={"phase": "Running"})
    forecast = PatchStatus(kind="Reservation", namespace="team", name="x", status={"forecast": {}})
    assert ledger_events([(status, None), (forecast, None)], snap) == []


def test_slots_text_folds_ordinals_by_node():
    assert slots_text(["n1#0", "n1#1", "n1#2", "n1#5", "n2#3", "odd"]) == "n1#0-2,5, n2#3, odd"


def test_report_body_is_an_events_k8s_io_v1_event():
    _snap, _writes, _after, events = activation_pass()
    (preempted,) = by(events, "Run", "Preempted")
    body = report_body(preempted, DUE, "host_1")
    assert body["apiVersion"] == "events.k8s.io/v1" and body["kind"] == "Event"
    assert body["metadata"] == {"name": preempted.event, "namespace": "team"}
    assert body["eventTime"] == DUE.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    assert body["regarding"] == {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "namespace": "team",
                                 "name": preempted.name, "uid": preempted.uid}
    assert body["related"]["kind"] == "Reservation" and body["related"]["name"] == "job-r1"
    assert (body["reason"], body["type"], body["action"], body["note"]) == (
        "Preempted", "Warning", "RandomPreempt", preempted.note)
    assert body["reportingController"] == "jobtree.dev/kubectl-runs-reconciler"
    assert body["reportingInstance"] == "host_1"


def test_a_long_note_is_cut_to_the_api_limit():
    write = PatchStatus(kind="Reservation", namespace="team", name="job-r1",
                        status={"state": "Failed", "reason": "X", "message": "é" * 2000})
    (event,) = ledger_events([(write, None)], snapshot())
    assert len(event.note.encode()) <= 1024 and event.note.endswith(" …")


# --- the loop: only after a write that was made, best effort -----------------------------------------------


class FakeApplier:
    """Answers each write with the outcome ``outcome_of`` gives; ReportEvents fail with ``event_outcome``."""

    def __init__(self, outcome_of, event_outcome: str = "ok"):
        self.sent: list = []
        self.outcome_of = outcome_of
        self.event_outcome = event_outcome

    def apply(self, write, at, **_):
        self.sent.append(write)
        if isinstance(write, ReportEvent):
            return Outcome(write, self.event_outcome)
        return Outcome(write, self.outcome_of(write))


def loop_with(applier) -> Reconciler:
    loop = Reconciler(lambda: None, Settings(once=True), log=Logger(io.StringIO()))
    loop.applier = applier
    return loop


def test_the_loop_reports_events_only_for_writes_that_were_made():
    writes = plan_ledger(reserved_fleet(), DUE)
    victim = writes[1]
    # the victim's closure is "gone", everything else made: no Event about the victim
    applier = FakeApplier(lambda w: "gone" if w is victim else "ok")
    outcomes = loop_with(applier).apply(writes, [], DUE)
    assert [o.write for o in outcomes] == writes, "Events are not among the outcomes (never retried)"
    reported = [w for w in applier.sent if isinstance(w, ReportEvent)]
    assert {(e.kind, e.reason) for e in reported} >= {("Reservation", "Activated"), ("GPULease", "Minted")}
    assert not [e for e in reported if e.name == victim.name or e.reason == "Preempted"]
    assert applier.sent.index(reported[0]) == len(writes), "after the writes they describe"
    # an AlreadyExists mint (a cache that lagged) or a skipped write says nothing either
    applier = FakeApplier(lambda w: "exists" if isinstance(w, Create) else "forbidden")
    loop_with(applier).apply(writes, [], DUE)
    assert not [w for w in applier.sent if isinstance(w, ReportEvent)]


def test_an_event_that_fails_is_not_retried_and_fails_nothing():
    writes = plan_ledger(reserved_fleet(), DUE)
    applier = FakeApplier(lambda w: "ok", event_outcome="forbidden")
    status = PatchStatus(kind="Run", namespace="team", name="job", status={"phase": "Pending"})
    outcomes = loop_with(applier).apply(writes, [status], DUE)
    assert [o.outcome for o in outcomes] == ["ok"] * (len(writes) + 1)
    assert not [o for o in outcomes if o.retry]
    events = [w for w in applier.sent if isinstance(w, ReportEvent)]
    assert events and len(events) == len({e.event for e in events}), "each said once, not retried"
    assert applier.sent[-1] is status, "the status writes still go out"
