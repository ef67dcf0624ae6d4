"""Ledger keeper paths (reconciler/ledger.py) that no other test ran: a Run marked for deletion (a finalizer holds
it), the Released paths of ``reserve`` for a Reservation that is not due yet, and a closure's ``ended`` that is
never before the lease's ``start``. Each test names the single-line mutation of ledger.py it kills (applied by
hand, seen failing, restored).

Unless a test says otherwise: nodes n1, n2 in fabric domain d1 and m1 in d2, 8 H100 GPUs each; namespace team
(owner org:x:team) has a 32-GPU envelope ``west``; the pass runs at NOW = T0 + 1 h.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec
from builders import (
    T0,
    activated,
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

from kubectl_runs.model import Run, Snapshot
from kubectl_runs.reconciler.actions import AnyWrite, Create, PatchStatus
from kubectl_runs.reconciler.ledger import apply_writes, plan_ledger

NOW = at(hours=1)
DUE = at(hours=2)
LATER = at(hours=5)
NODES = [node("n1", domain="d1"), node("n2", domain="d1"), node("m1", domain="d2")]
TEAM = budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=32)])


def deleting(obj: Run, when: datetime = at(minutes=50)) -> Run:
    """The Run as the API server keeps it after ``kubectl delete`` while a finalizer holds it: the same object with
    ``metadata.deletionTimestamp`` (and the finalizer) set."""
    manifest = to_manifest(obj)
    manifest["metadata"]["deletionTimestamp"] = iso(when)
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    return msgspec.convert(manifest, Run)


def held(name: str, node_name: str, *, run_name: str, start: datetime = T0):
    """An open 8-GPU Active lease of group 0 on ``node_name``, paid by team/b/west."""
    return lease(name, "team", owner="org:x:team", run_name=run_name, slot_list=slots(node_name, 8),
                 paid_by=("b", "west"), start=start)


def busy_fleet(*extra) -> Snapshot:
    """n1, n2, m1 all held by running runs a, b, c (8 GPUs each, created at T0), plus ``extra``."""
    objects: list = [*NODES, TEAM]
    for name, node_name in (("a", "n1"), ("b", "n2"), ("c", "m1")):
        objects += [run(name, "team", gpus=8, group_gpus=8, created=T0),
                    held(f"{name}-g0-active-0", node_name, run_name=name)]
    return snapshot(*objects, *extra)


def summary(writes: list[AnyWrite]) -> list[tuple]:
    """(action, kind, name, status or None) of each write, in order."""
    return [(type(w).__name__, w.kind, w.name, w.status if isinstance(w, PatchStatus) else None) for w in writes]


def released(name: str, reason: str) -> tuple:
    return ("PatchStatus", "Reservation", name, {"state": "Released", "reason": reason})


# --- a Run marked for deletion --------------------------------------------------------------------------------


def test_leases_of_a_run_marked_for_deletion_close_run_deleted_at_the_pass():
    """Run job (8 GPUs, Running) holds job-g0-active-0 (n1#0-7, since T0) and was deleted at T0 + 50 min; a finalizer
    keeps the object, now with a deletionTimestamp. The pass at NOW = T0 + 1 h closes the lease: closed, ended =
    NOW (not the deletionTimestamp: the pass is when the keeper closes it, and NOW > start = T0), closureReason
    RunDeleted. Nothing else: the Run is not admitted again (it is not live) and gets no Reservation. A second
    pass writes nothing.

    Kills: ``_Pass.close_finished`` without its deletionTimestamp condition (``if run is None:``): the Run exists
    and is not finished, so its lease would stay open and the pass would write nothing."""
    snap = snapshot(*NODES, TEAM, deleting(run("job", "team", gpus=8, group_gpus=8, created=T0)),
                    held("job-g0-active-0", "n1", run_name="job"))
    writes = plan_ledger(snap, NOW)
    assert summary(writes) == [("PatchStatus", "GPULease", "job-g0-active-0",
                                {"closed": True, "ended": iso(NOW), "closureReason": "RunDeleted"})]
    assert writes[0].cause == "RunDeleted: close team/job-g0-active-0 (8 GPUs): run team/job was deleted"
    assert plan_ledger(apply_writes(snap, writes), NOW) == []


def test_a_due_reservation_of_a_run_marked_for_deletion_is_released_and_preempts_nobody():
    """The fleet is full (a, b, c hold n1, n2, m1: 24 of 24 GPUs); job (8 GPUs, no leases) is marked for deletion and
    its Reservation job-r1 is Pending with earliestStart DUE = T0 + 2 h. The pass at DUE releases job-r1 (reason
    RunDeleted) and does nothing else: no activation, no lease of a, b or c closed, no preemption recorded.

    Kills: ``_Pass.activate_due`` without its deletionTimestamp condition (``if run is None:``): job is not
    finished, so the resolver would run for its deficit of 8 GPUs with nothing free: job-r1 Activated, the lottery
    closes b-g0-active-0 (RandomPreempt, seed 0x096cb86e0efd99a8) and records it on b — and since job is not live,
    nothing takes those 8 GPUs: b is minted b-g0-active-1 on the same n2 in the same pass. A preemption for a Run
    that is going away."""
    snap = busy_fleet(deleting(run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5))),
                      reservation("job-r1", run_name="job", earliest_start=DUE))
    writes = plan_ledger(snap, DUE)
    assert summary(writes) == [released("job-r1", "RunDeleted")]
    assert writes[0].cause == "released team/job-r1: run team/job is gone"
    assert plan_ledger(apply_writes(snap, writes), DUE) == []


# --- reserve: a Reservation not due yet whose Run is gone or finished ------------------------------------------


def test_a_reservation_not_yet_due_of_a_deleted_run_is_released_run_deleted():
    """Reservation job-r1 is Pending until LATER = T0 + 5 h; its Run job is gone (deleted, no finalizer). At NOW =
    T0 + 1 h it is not due, so ``activate_due`` does not see it: ``reserve`` releases it (reason RunDeleted) in
    this pass rather than at T0 + 5 h. That is the only write.

    Kills: the reason of ``reserve``'s first Released path (``"RunDeleted"``) changed or its ``continue`` dropped
    (the latter would plan a Run that is None: AttributeError)."""
    snap = snapshot(*NODES, TEAM, reservation("job-r1", run_name="job", earliest_start=LATER))
    writes = plan_ledger(snap, NOW)
    assert summary(writes) == [released("job-r1", "RunDeleted")]
    assert plan_ledger(apply_writes(snap, writes), NOW) == []


def test_a_reservation_not_yet_due_of_a_run_marked_for_deletion_is_released_run_deleted():
    """job (8 GPUs, no leases) is marked for deletion; its Reservation job-r1 is Pending until LATER = T0 + 5 h. The
    fleet has 24 free GPUs, so job's plan has no deficit — but job is not live, so nothing admits it. At NOW the
    Reservation is released (reason RunDeleted); nothing is minted.

    Kills: ``reserve`` without its deletionTimestamp condition (``if run is None:``): job is not finished and its
    plan still needs 8 GPUs (need 8, not growing), so job-r1, already Pending, would be kept: no write at all,
    and the Reservation would wait (and with its Run gone, never be needed) until T0 + 5 h."""
    snap = snapshot(*NODES, TEAM, deleting(run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0)),
                    reservation("job-r1", run_name="job", earliest_start=LATER))
    writes = plan_ledger(snap, NOW)
    assert summary(writes) == [released("job-r1", "RunDeleted")]
    assert not [w for w in writes if isinstance(w, Create)]


def test_a_reservation_not_yet_due_of_a_finished_run_is_released_run_finished():
    """job finished (phase Succeeded) while its Reservation job-r1 was Pending until LATER = T0 + 5 h. At NOW the
    Reservation is released with reason RunFinished (what ``activate_due`` would say at its time), not Started:
    the Run never started through it.

    Kills: ``reserve``'s ``if run.finished:`` branch skipped (e.g. ``if False:``): a finished Run's plan needs
    nothing (need 0), so the Reservation would be released with reason Started."""
    snap = snapshot(*NODES, TEAM, run("job", "team", gpus=8, group_gpus=8, phase="Succeeded", created=T0),
                    reservation("job-r1", run_name="job", earliest_start=LATER))
    writes = plan_ledger(snap, NOW)
    assert summary(writes) == [released("job-r1", "RunFinished")]
    assert writes[0].cause == "released team/job-r1: run team/job Succeeded"


# --- ended is never before start ------------------------------------------------------------------------------


def test_a_lease_that_starts_after_the_pass_is_closed_at_its_start():
    """Run done (Succeeded) holds done-g0-active-0 with start = NOW + 30 s: minted by a replica whose clock ran 30 s
    ahead of this one's (or back-dated into the future by hand). The pass at NOW closes it with ended = max(NOW,
    start) = NOW + 30 s, so [start, ended) is empty, never negative; closureReason Completed.

    Kills: ``_ended`` ignoring the lease's start (``return rfc3339(self.at)``): ended would be NOW, 30 s before
    the lease began."""
    start = NOW + timedelta(seconds=30)
    snap = snapshot(*NODES, TEAM, run("done", "team", gpus=8, group_gpus=8, phase="Succeeded", created=T0),
                    held("done-g0-active-0", "n1", run_name="done", start=start))
    writes = plan_ledger(snap, NOW)
    assert summary(writes) == [("PatchStatus", "GPULease", "done-g0-active-0",
                                {"closed": True, "ended": iso(start), "closureReason": "Completed"})]


def test_a_recorded_preemption_of_a_lease_that_starts_after_the_pass_ends_at_its_start():
    """A replica whose clock ran 40 s ahead minted a-g0-active-0 at its NOW + 20 s and recorded the activation of
    job-r1 at NOW + 30 s (a Lottery action taking that lease), then died before closing it. This replica, at NOW,
    finishes the record: the lease is closed RandomPreempt with ended = max(NOW, start) = NOW + 20 s (not NOW,
    which is before the lease began), and a gets its preemption entry (at NOW + 30 s, 8 GPUs).

    Kills: ``_ended`` ignoring the lease's start (``return rfc3339(self.at)``), and the same mutation written at
    ``finish_recorded``'s call site (``"ended": rfc3339(self.at)``)."""
    start, decided = NOW + timedelta(seconds=20), NOW + timedelta(seconds=30)
    seed = "0x" + "ab" * 8
    record = {"at": iso(decided), "seed": seed, "deficitGPUs": 8,
              "conflictSet": [{"run": "team/a", "group": 0, "owner": "org:x:team", "class": "owned", "gpus": 8,
                               "ticket": "00" * 32}],
              "actions": [{"kind": "Lottery", "run": "team/a", "group": 0, "lease": "team/a-g0-active-0",
                           "gpus": 8}],
              "freedGPUs": 8}
    snap = snapshot(*NODES, TEAM, run("a", "team", gpus=8, group_gpus=8, created=T0),
                    held("a-g0-active-0", "n1", run_name="a", start=start),
                    run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0),
                    activated(reservation("job-r1", run_name="job", earliest_start=decided), record))
    writes = plan_ledger(snap, NOW)
    closures = [w for w in writes if isinstance(w, PatchStatus) and w.kind == "GPULease"]
    assert [(w.name, w.status) for w in closures] == [
        ("a-g0-active-0", {"closed": True, "ended": iso(start), "closureReason": "RandomPreempt",
                           "preemption": {"reservation": "team/job-r1", "seed": seed}})]
    records = [w for w in writes if isinstance(w, PatchStatus) and w.kind == "Run"]
    assert [(w.name, w.status) for w in records] == [
        ("a", {"preemptions": [{"reservation": "team/job-r1", "seed": seed, "at": iso(decided), "gpus": 8}]})]
