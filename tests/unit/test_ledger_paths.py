"""Ledger keeper paths (reconciler/ledger/) that no other test ran: a Run marked for deletion (a finalizer holds
it), the Released paths of ``reserve`` for a Reservation that is not due yet, and a closure's ``ended`` that is
never before the lease's ``start``. Each test names the single-line mutation of ledger.py it kills (applied by
hand, seen failing, restored).

Unless a test says otherwise: nodes n1, n2 in fabric domain d1 and m1 in d2, 8 H100 GPUs each; namespace team
(owner org:x:team) has a 32-GPU envelope ``west``; the pass runs at NOW = T0 + 1 h.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec
import pytest
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
from kubectl_runs.reconciler.ledger import apply_writes, merge_patch, plan_ledger

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


# --- other branches no unit test ran (found with coverage) ------------------------------------------------------


def test_a_due_reservation_of_a_deleted_run_is_released_run_deleted_without_an_activation():
    """The fleet is full (a, b, c hold all 24 GPUs); job-r1 (Pending, earliestStart DUE = T0 + 2 h) names Run job,
    which is gone. At DUE ``activate_due`` releases it (reason RunDeleted) before any resolution: the only write,
    no lease of a, b or c closed.

    Kills: ``activate_due``'s first ``continue`` dropped (the resolver would be handed a Run that is None:
    AttributeError), or its reason changed."""
    writes = plan_ledger(busy_fleet(reservation("job-r1", run_name="job", earliest_start=DUE)), DUE)
    assert summary(writes) == [released("job-r1", "RunDeleted")]


def test_a_recorded_activation_whose_victim_run_is_gone_closes_run_deleted_and_records_on_nobody():
    """job-r1's activation (recorded at NOW) took a-g0-active-0 (Lottery, 8 GPUs) and the replica died before the
    closure; meanwhile Run a was deleted (gone). The pass at NOW + 5 s: step 1 closes the lease first, reason
    RunDeleted (its Run is gone), so step 2 finds it closed and writes no RandomPreempt over it; there is no Run a
    to record the preemption on. job is minted the freed n1#0-7. A second pass writes nothing.

    Kills: ``_record_on_runs`` without its ``if run is None: continue`` (AttributeError on a Run that is None)."""
    seed = "0x" + "cd" * 8
    record = {"at": iso(NOW), "seed": seed, "deficitGPUs": 8,
              "conflictSet": [{"run": "team/a", "group": 0, "owner": "org:x:team", "class": "owned", "gpus": 8,
                               "ticket": "00" * 32}],
              "actions": [{"kind": "Lottery", "run": "team/a", "group": 0, "lease": "team/a-g0-active-0",
                           "gpus": 8}],
              "freedGPUs": 8}
    snap = snapshot(*NODES, TEAM, held("a-g0-active-0", "n1", run_name="a"),
                    run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0),
                    activated(reservation("job-r1", run_name="job", earliest_start=NOW), record))
    when = NOW + timedelta(seconds=5)
    writes = plan_ledger(snap, when)
    assert summary(writes)[0] == ("PatchStatus", "GPULease", "a-g0-active-0",
                                  {"closed": True, "ended": iso(when), "closureReason": "RunDeleted"})
    assert [(w.name, w.body["spec"]["slice"]["slots"]) for w in writes[1:]] == [("job-g0-active-0", slots("n1", 8))]
    assert plan_ledger(apply_writes(snap, writes), when) == []


def test_a_lease_name_another_run_holds_is_skipped():
    """Namespace team already has a GPULease named job-g0-active-0 — of Run zzz (closed at T0 + 30 min). job's
    first lease of group 0 would be job-g0-active-0 (n = 0 leases of its own); the name is taken, so it is
    job-g0-active-1.

    Kills: ``_lease``'s ``while … in self.taken_names: n += 1`` never looping (``if``-less: the name of another
    run's lease would be a Create that the API server answers AlreadyExists, and job would never start)."""
    other = lease("job-g0-active-0", "team", owner="org:x:team", run_name="zzz", slot_list=slots("n1", 8),
                  paid_by=("b", "west"), ended=at(minutes=30), closure_reason="Completed")
    writes = plan_ledger(snapshot(*NODES, TEAM, run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0),
                                  other), NOW)
    assert [w.name for w in writes] == ["job-g0-active-1"]


def test_a_reservation_name_another_object_holds_is_skipped():
    """The fleet is full; job (8 GPUs) gets a Reservation. It has none of its own, so it would be job-r1 — but a
    Reservation of that name exists for another Run (zzz, Released): job's is job-r2.

    Kills: ``_reservation_body``'s ``number += 1`` loop not taken (job-r1: AlreadyExists, and job would never get
    a Reservation)."""
    snap = busy_fleet(run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)),
                      reservation("job-r1", run_name="zzz", earliest_start=at(hours=9), state="Released"))
    writes = plan_ledger(snap, NOW)
    assert [(type(w).__name__, w.name) for w in writes] == [("Create", "job-r2"), ("PatchStatus", "job-r2")]


def test_a_run_waiting_for_its_window_reserves_paid_by_the_envelope_that_opens():
    """The team's only envelope, west (32 GPUs), opens at T0 + 3 h; the fleet is free. At NOW job (8 GPUs) has no
    funding source with headroom (WindowNotOpen), but the forecast is window-aligned: the Reservation's
    earliestStart is T0 + 3 h and its payingEnvelope the envelope whose window opens then, b/west.

    Kills: the ``elif outlook.opened:`` branch of ``_reservation_body`` skipped (no payingEnvelope)."""
    later = budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=32, start=at(hours=3))])
    writes = plan_ledger(snapshot(*NODES, later, run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0)),
                         NOW)
    (made,) = [w for w in writes if isinstance(w, Create)]
    assert made.body["spec"]["earliestStart"] == iso(at(hours=3))
    assert made.body["spec"]["payingEnvelope"] == {"budget": "b", "envelope": "west"}


def test_a_reservation_of_a_run_kept_in_one_domain_names_the_domain_it_already_holds():
    """job (16 GPUs, groups of 8, allowCrossGroupSpread: false) holds group 0 on m1 (d2) and lacks group 1; a and
    b hold n1, n2 (d1): nothing is free. Its Reservation's scope names d2, where its group 0 is — freeing GPUs
    in d1 would not let its group 1 join it.

    Kills: ``_reservation_domain`` ignoring the leases the Run holds (the plan's best domain instead, d1)."""
    manifest = to_manifest(run("job", "team", gpus=16, group_gpus=8, phase=None, created=T0))
    manifest["spec"]["locality"]["allowCrossGroupSpread"] = False
    snap = snapshot(*NODES, TEAM,
                    run("a", "team", gpus=8, group_gpus=8, created=T0), held("a-g0-active-0", "n1", run_name="a"),
                    run("b", "team", gpus=8, group_gpus=8, created=T0), held("b-g0-active-0", "n2", run_name="b"),
                    msgspec.convert(manifest, Run), held("job-g0-active-0", "m1", run_name="job"))
    (made,) = [w for w in plan_ledger(snap, NOW) if isinstance(w, Create)]
    assert made.body["spec"]["scope"] == {"flavor": "H100", "domain": "d2"}


def test_an_activation_after_its_earliest_start_counts_a_lease_minted_since_from_earliest_start():
    """job-r1 is due at DUE = T0 + 2 h and the pass runs at DUE + 5 min. a and b hold n1, n2 since T0; d was
    minted m1 at DUE + 1 min, after earliestStart. The resolver decides as at DUE, and sees d's lease as open
    since DUE (``_as_of``): d is in the conflict set with a and b (3 groups of 8), and with this seed the lottery
    draws d.

    Kills: ``_as_of`` without moving a later start back to ``when``: d's lease is not open at DUE, so the conflict
    set would be a and b only."""
    objects = [*NODES, TEAM]
    for name, node_name, start in (("a", "n1", T0), ("b", "n2", T0), ("d", "m1", DUE + timedelta(minutes=1))):
        objects += [run(name, "team", gpus=8, group_gpus=8, created=T0),
                    held(f"{name}-g0-active-0", node_name, run_name=name, start=start)]
    snap = snapshot(*objects, run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)),
                    reservation("job-r1", run_name="job", earliest_start=DUE))
    decision = plan_ledger(snap, DUE + timedelta(minutes=5))[0]
    activation = decision.status["activation"]
    assert (decision.name, activation["at"]) == ("job-r1", iso(DUE))
    assert sorted(e["run"] for e in activation["conflictSet"]) == ["team/a", "team/b", "team/d"]
    assert [a["lease"] for a in activation["actions"]] == ["team/d-g0-active-0"]


def test_long_run_names_give_lease_names_within_253_and_labels_within_63_characters():
    """A Run named with 250 characters: its lease is ``<first 232>-<8 hex of sha256>-g0-active-0`` (253 characters)
    and its jobtree.dev/run label ``<first 54>-<8 hex>`` (63), the same in every pass.

    Kills: the cut branches of ``_name`` and ``_label`` (a 262-character name or a 250-character label value: the
    API server refuses both)."""
    name = "x" * 250
    snap = snapshot(*NODES, TEAM, run(name, "team", gpus=8, group_gpus=8, phase=None, created=T0))
    (minted,) = plan_ledger(snap, NOW)
    assert len(minted.name) == 253 and minted.name.startswith("x" * 232 + "-") and minted.name.endswith("-g0-active-0")
    label = minted.body["metadata"]["labels"]["jobtree.dev/run"]
    assert len(label) == 63 and label.startswith("x" * 54 + "-")
    assert minted.body["spec"]["runRef"]["name"] == name
    assert plan_ledger(snap, NOW) == [minted]


def test_ledger_options_refuse_a_settle_delay_under_a_second_or_above_the_unknown_forecast_delay():
    """settle_delay < 1 s could let a Reservation fall due in the pass that made it; an unknown_forecast_delay
    below settle_delay would make earliestStart sooner than the settle delay allows.

    Kills: either check of ``LedgerOptions.__post_init__`` dropped."""
    from kubectl_runs.reconciler.ledger import LedgerOptions

    with pytest.raises(ValueError, match="settle_delay must be at least one second"):
        LedgerOptions(settle_delay=timedelta(milliseconds=500))
    with pytest.raises(ValueError, match="unknown_forecast_delay must be at least settle_delay"):
        LedgerOptions(settle_delay=timedelta(minutes=20), unknown_forecast_delay=timedelta(minutes=15))
    LedgerOptions(settle_delay=timedelta(seconds=1), unknown_forecast_delay=timedelta(seconds=1))


def test_apply_writes_behaves_as_the_api_server():
    """What the pass's own view (and every converge check) relies on: a Create of a name that exists is a no-op
    (AlreadyExists), a Create drops ``status`` (the status subresource), a status patch of a missing object is
    skipped (NotFound), a ``null`` in a merge patch removes the key, and writes of other kinds or actions
    (a Budget, an Event) change nothing.

    Kills: any guard of ``_Objects.apply`` dropped (a Create over an existing name would replace the lease; a
    patch of a missing object or of a Budget: AttributeError), and ``merge_patch`` keeping nulls."""
    from kubectl_runs.reconciler.actions import RecordEvent

    existing = held("a-g0-active-0", "n1", run_name="a")
    snap = snapshot(*NODES, TEAM, run("a", "team", gpus=8, group_gpus=8, created=T0), existing)
    body = to_manifest(held("a-g0-active-0", "n2", run_name="a"))
    fresh = to_manifest(held("new-g0", "m1", run_name="a"))
    fresh["status"] = {"closed": True, "closureReason": "Completed"}
    after = apply_writes(snap, [
        Create(kind="GPULease", namespace="team", name="a-g0-active-0", body=body),
        Create(kind="GPULease", namespace="team", name="new-g0", body=fresh),
        PatchStatus(kind="GPULease", namespace="team", name="missing", status={"closed": True}),
        PatchStatus(kind="Run", namespace="team", name="a", status={"phase": "Running", "eta": None}),
        PatchStatus(kind="Budget", namespace="team", name="b", status={"updatedAt": iso(NOW)}),
        RecordEvent(kind="Run", namespace="team", name="a", reason="Test", message="nothing"),
    ])
    leases = after.leases_by_key
    assert sorted(leases) == ["team/a-g0-active-0", "team/new-g0"]
    assert leases["team/a-g0-active-0"].spec.slice.slots == tuple(slots("n1", 8))  # the first one kept
    assert not leases["team/new-g0"].status.closed
    assert after.budgets == snap.budgets
    a_run = after.runs_by_key["team/a"]
    assert a_run.status.phase == "Running" and a_run.status.eta is None
    # RFC 7386: null removes the key (at any depth), anything else replaces or merges
    assert merge_patch({"a": 1, "b": {"c": 2, "e": 5}}, {"a": None, "b": {"c": None, "d": 3}, "x": None}) == {
        "b": {"e": 5, "d": 3}}


def test_an_envelope_whose_selector_misses_the_group_pays_only_after_those_that_match():
    """Envelope a-west (8 GPUs, selector region=west) comes first in the funding walk (by name), b-any (8, no
    selector) second. n1 and m1 are region=east, n2 region=west; job's one group of 8 goes to n1 (the tightest
    fit, then by name). a-west matches a candidate node (n2), so the plan counts it, but not n1: b-any pays.

    Kills: ``_pay`` taking the sources in walk order (``eligible`` = every source), or ``_selects_all`` always
    True: a-west would pay for GPUs on a node its selector does not match."""
    east, west = {"region": "east"}, {"region": "west"}
    snap = snapshot(node("n1", domain="d1", labels=east), node("n2", domain="d1", labels=west),
                    node("m1", domain="d2", labels=east),
                    budget("b", "team", owner="org:x:team", envelopes=[
                        envelope("a-west", concurrency=8, selector=west), envelope("b-any", concurrency=8)]),
                    run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0))
    (minted,) = plan_ledger(snap, NOW)
    assert minted.body["spec"]["slice"]["slots"] == slots("n1", 8)
    assert minted.body["spec"]["paidBy"] == {"namespace": "team", "budget": "b", "envelope": "b-any"}


def test_an_elastic_run_short_of_funding_mints_no_group_its_envelope_cannot_pay_for_in_full():
    """job: 8 to 24 GPUs (desired 24) in steps and groups of 8; the fleet's 24 GPUs are free but envelope west
    pays for 12. It starts at 8 (Start, n1#0-7); growing, the keeper tries width 16, whose group 1 places on n2
    but finds 4 GPUs of funding for 8: nothing of it is minted (no partly paid group). A second pass writes
    nothing.

    Kills: ``_pay`` returning what it could pay instead of None when the sources run short (a lease of 4 of group
    1's 8 GPUs)."""
    job = run("job", "team", gpus=24, group_gpus=8, phase=None, created=T0,
              malleable={"minTotalGPUs": 8, "maxTotalGPUs": 24, "stepGPUs": 8, "desiredTotalGPUs": 24})
    snap = snapshot(*NODES, budget("b", "team", owner="org:x:team", envelopes=[envelope("west", concurrency=12)]), job)
    writes = plan_ledger(snap, NOW)
    assert [(w.name, w.body["spec"]["reason"], w.body["spec"]["slice"]["slots"]) for w in writes] == [
        ("job-g0-active-0", "Start", slots("n1", 8))]
    assert plan_ledger(apply_writes(snap, writes), NOW) == []


def test_a_reservation_created_but_not_yet_marked_pending_gets_its_pending_state():
    """A pass created job-r1 and died before writing its status (state unset). The fleet is still full, so job
    still needs it: the next pass writes state Pending, reason Waiting, and nothing else (no second Reservation).

    Kills: ``reserve`` not writing the state of a Reservation whose status is empty (``_pending_state`` skipped):
    it would stay without a state for good."""
    snap = busy_fleet(run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)),
                      reservation("job-r1", run_name="job", earliest_start=at(hours=9), state=None))
    writes = plan_ledger(snap, NOW)
    assert summary(writes) == [("PatchStatus", "Reservation", "job-r1", {"state": "Pending", "reason": "Waiting"})]


def test_a_run_with_an_activated_reservation_is_placed_in_the_reservation_domain():
    """job's Reservation job-r1 activated with scope domain d2 (nothing left to take). d1 has 16 free GPUs, d2 8:
    job's group of 8 goes to d2 (m1), where its Reservation made room, not to the domain with the most free GPUs.

    Kills: ``_Minting`` ignoring the Activated Reservation's domain (``reserved_domain`` never set): n1 in d1."""
    record = {"at": iso(NOW), "seed": "0x" + "ee" * 8, "deficitGPUs": 0, "conflictSet": [], "actions": [],
              "freedGPUs": 0}
    snap = snapshot(*NODES, TEAM, run("job", "team", gpus=8, group_gpus=8, phase=None, created=T0),
                    activated(reservation("job-r1", run_name="job", earliest_start=NOW, domain="d2"), record))
    (minted,) = plan_ledger(snap, NOW)
    assert minted.body["spec"]["slice"]["slots"] == slots("m1", 8)


def test_a_recorded_drop_spare_closes_the_spare_without_a_preemption_record():
    """job-r1's recorded activation took a's spare a-g0-spare-0 (DropSpare, 2 GPUs) and the replica died before
    the closure. The pass at NOW + 5 s closes it with closureReason DropSpare and no ``preemption`` (a DropSpare
    is not a preemption: a keeps running), and writes no ``status.preemptions`` on a.

    Kills: ``finish_recorded`` adding ``preemption`` to every recorded closure, or ``_record_on_runs`` counting
    every action kind."""
    record = {"at": iso(NOW), "seed": "0x" + "ee" * 8, "deficitGPUs": 2, "conflictSet": [],
              "actions": [{"kind": "DropSpare", "run": "team/a", "group": 0, "lease": "team/a-g0-spare-0",
                           "gpus": 2}],
              "freedGPUs": 2}
    spare = lease("a-g0-spare-0", "team", owner="org:x:team", run_name="a", slot_list=slots("n1", 2, 6),
                  paid_by=("b", "west"), role="Spare")
    active = lease("a-g0-active-0", "team", owner="org:x:team", run_name="a", slot_list=slots("n1", 6),
                   paid_by=("b", "west"))
    snap = snapshot(*NODES, TEAM, run("a", "team", gpus=6, group_gpus=6, spares_per_group=2, created=T0), active,
                    spare, run("job", "team", gpus=2, phase=None, created=T0),
                    activated(reservation("job-r1", run_name="job", earliest_start=NOW), record))
    when = NOW + timedelta(seconds=5)
    writes = plan_ledger(snap, when)
    assert summary(writes)[0] == ("PatchStatus", "GPULease", "a-g0-spare-0",
                                  {"closed": True, "ended": iso(when), "closureReason": "DropSpare"})
    assert writes[0].cause == "DropSpare by team/job-r1: close team/a-g0-spare-0 (2 GPUs of team/a group 0)"
    assert not [w for w in writes if w.kind == "Run"]
