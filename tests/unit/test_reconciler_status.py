"""reconciler/status.py: the status the reconciler writes is what the reports compute, it is written only when
it changed, and a fleet that does not change is not rewritten as the clock moves (docs/reconciler.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from builders import at, budget, envelope, lease, node, reservation, run, snapshot
from test_crd_schema import schema, value_problems

from kubectl_runs.engine.plan import plan_run
from kubectl_runs.engine.reports import aggregate_row, envelope_row, plain
from kubectl_runs.engine.usage import budget_usage
from kubectl_runs.reconciler.actions import PatchStatus, RecordEvent
from kubectl_runs.reconciler.status import BadObject, Stored, next_change, stable_text, status_writes
from kubectl_runs.sources.files import load_snapshot

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")
AT = at("2025-11-20T12:00:00Z")


def stored_after(writes, before=None):
    """What the API server would hold after these merge patches (top-level keys of status replaced)."""
    out = dict(before or {})
    for w in writes:
        if isinstance(w, PatchStatus):
            key = (w.kind, w.namespace, w.name)
            status = dict(out[key].status) if key in out else {}
            for k, v in w.status.items():
                if v is None:
                    status.pop(k, None)
                else:
                    status[k] = v
            out[key] = Stored(status=status)
    return out


@pytest.fixture(scope="module")
def fleet():
    return load_snapshot([EXAMPLE])


def test_budget_status_is_the_budgets_usage_report(fleet):
    writes = {(w.kind, w.namespace, w.name): w for w in status_writes(fleet, AT, {})}
    report = budget_usage(fleet, AT)
    assert report.envelopes
    for row in (plain(envelope_row(e)) for e in report.envelopes):
        entry = next(e for e in writes[("Budget", row["namespace"], row["budget"])].status["envelopes"]
                     if e["name"] == row["envelope"])
        for key in ("flavor", "windowActive", "concurrency", "usedGPUs", "headroomGPUs", "ownedGPUs", "sharedGPUs",
                    "borrowedGPUs", "unfundedGPUs", "spareGPUs", "consumedGPUHours", "gpuHoursHeadroom"):
            assert entry[key] == row[key], (row["budget"], row["envelope"], key)
    for agg in (plain(aggregate_row(a)) for a in report.aggregates):
        entries = writes[("Budget", agg["namespace"], agg["budget"])].status["aggregates"]
        assert {"name": agg["name"], "usedGPUs": agg["usedGPUs"], "headroomGPUs": agg["headroomGPUs"]} in entries


def test_run_status_is_the_plan(fleet):
    writes = {(w.kind, w.namespace, w.name): w for w in status_writes(fleet, AT, {})}
    for r in fleet.runs:
        plan = plain(plan_run(fleet, r, AT).report)
        status = writes[("Run", r.metadata.namespace, r.metadata.name)].status
        assert status["width"] == plan["width"]
        for key in ("deficitGPUs", "capacityDeficitGPUs", "fundingDeficitGPUs"):
            assert status["plan"][key] == plan[key]
        assert status["plan"]["reasons"] == [{**x, "message": stable_text(x["message"])} for x in plan["reasons"]]
        assert status["plan"]["remedies"] == [{**x, "message": stable_text(x["message"])} for x in plan["remedies"]]
        ready = status["conditions"][0]
        assert ready["type"] == "Ready"
        if plan["reasons"] and not r.finished and status.get("phase") != "Running":
            assert ready["reason"] == plan["reasons"][0]["code"]


def test_every_status_written_is_in_the_crd_schema(fleet):
    """The API server prunes what the schema does not name: every key written must be declared."""
    writes = status_writes(fleet, AT, {})
    assert {w.kind for w in writes} == {"Budget", "Run", "Reservation"}
    for w in writes:
        assert value_problems({"status": w.status}, schema(w.kind), "") == [], (w.kind, w.key)


def test_an_unchanged_fleet_is_not_rewritten_as_the_clock_moves(fleet):
    """Up to the first instant a fact changes by itself: train-16 reports completion at 2025-11-21T06:00Z; from
    05:45 (its ETA less the 15-minute grace) it is out of pretrain-32-r1's lottery, and once its ETA has passed
    it is stale and the forecasts that counted on it change (both are written; next_change names each)."""
    first = status_writes(fleet, AT, {})
    stored = stored_after(first)
    for hours in (0.5, 3, 12, 17.7):
        assert status_writes(fleet, AT + timedelta(hours=hours), stored) == [], hours
    assert next_change(fleet, AT + timedelta(hours=17.7)) == at("2025-11-21T05:45:00Z")
    assert {(w.kind, w.name) for w in status_writes(fleet, at("2025-11-21T05:46:00Z"), stored)} == {
        ("Run", "pretrain-32"), ("Run", "elastic-24"), ("Reservation", "pretrain-32-r1")}  # their Lottery remedy
    later = {(w.kind, w.name) for w in status_writes(fleet, at("2025-11-21T06:01:00Z"), stored)}
    assert later == {("Run", "pretrain-32"), ("Run", "elastic-24"), ("Reservation", "pretrain-32-r1")}


def test_consumed_hours_are_as_of_updated_at_and_a_real_change_rewrites_them():
    """One 4-GPU lease open in an open window: its consumed GPU-hours grow 4 per hour. Written at +1 h, the
    status still holds at +5 h (4 + 16 = 20 GPU-hours, projected from updatedAt); a second lease makes a write
    with the fresh numbers and updatedAt."""
    nodes = [node("n1", gpus=8)]
    b = budget(envelopes=[envelope(concurrency=8, max_gpu_hours=1000)])
    one = lease("l1", gpus=4, node_name="n1")
    fleet = snapshot(*nodes, b, one)
    first = status_writes(fleet, at(hours=1), {})
    [budget_write] = [w for w in first if w.kind == "Budget"]
    entry = budget_write.status["envelopes"][0]
    assert (entry["consumedGPUHours"], entry["gpuHoursHeadroom"], budget_write.status["updatedAt"]) == (
        4.0, 996.0, "2025-11-01T01:00:00Z")
    stored = stored_after(first)
    assert status_writes(fleet, at(hours=5), stored) == []

    two = lease("l2", gpus=2, node_name="n1", start=at(hours=3), slot_list=["n1#6", "n1#7"])
    changed = snapshot(*nodes, b, one, two)
    [write] = [w for w in status_writes(changed, at(hours=5), stored) if w.kind == "Budget"]
    entry = write.status["envelopes"][0]
    assert (entry["usedGPUs"], entry["consumedGPUHours"], write.status["updatedAt"]) == (6, 24.0, "2025-11-01T05:00:00Z")


def test_a_back_dated_change_breaks_the_projection():
    """A lease that opened and closed between two resyncs leaves the discrete numbers alone but adds GPU-hours:
    the projection no longer holds, so the status is written."""
    nodes = [node("n1", gpus=8)]
    b = budget()
    one = lease("l1", gpus=4, node_name="n1")
    stored = stored_after(status_writes(snapshot(*nodes, b, one), at(hours=1), {}))
    blip = lease("l2", gpus=2, node_name="n1", start=at(hours=2), ended=at(hours=3), slot_list=["n1#6", "n1#7"])
    [write] = [w for w in status_writes(snapshot(*nodes, b, one, blip), at(hours=5), stored) if w.kind == "Budget"]
    assert write.status["envelopes"][0]["consumedGPUHours"] == 22.0


def test_a_window_closing_is_a_change():
    nodes = [node("n1", gpus=8)]
    b = budget(envelopes=[envelope(end=at(hours=10))])
    one = lease("l1", gpus=4, node_name="n1")
    stored = stored_after(status_writes(snapshot(*nodes, b, one), at(hours=1), {}))
    assert status_writes(snapshot(*nodes, b, one), at(hours=9), stored) == []
    [write] = status_writes(snapshot(*nodes, b, one), at(hours=11), stored)
    assert write.status["envelopes"][0]["windowActive"] is False
    assert write.status["envelopes"][0]["consumedGPUHours"] == 40.0


def test_relative_times_are_left_out_of_status_text():
    assert stable_text("wait until 2025-12-01 00:00 UTC (in 10 days, 3 hours and 5 minutes): x") == (
        "wait until 2025-12-01 00:00 UTC: x")
    assert stable_text("closed on 2025-10-01 00:00 UTC (2 days ago)") == "closed on 2025-10-01 00:00 UTC"
    assert stable_text("no time here (in a box)") == "no time here (in a box)"


def test_a_startable_run_keeps_the_instant_it_became_startable():
    """``earliestStart`` = now in the plan of a run that fits; the stored instant still means "now" later."""
    fleet = snapshot(node("n1", gpus=8), budget(), run("r", gpus=4, phase="Pending"))
    first = status_writes(fleet, at(hours=1), {})
    [w] = [w for w in first if w.kind == "Run"]
    assert (w.status["earliestStart"], w.status["phase"], w.status["reason"]) == (
        "2025-11-01T01:00:00Z", "Pending", "Startable")
    assert status_writes(fleet, at(hours=3), stored_after(first)) == []


def test_a_run_that_starts_becomes_running_and_only_what_changed_is_sent():
    n1, b = node("n1", gpus=8), budget()
    pending = run("r", gpus=4, phase="Pending")
    stored = stored_after(status_writes(snapshot(n1, b, pending), at(hours=1), {}))
    started = lease("r-g0", gpus=4, node_name="n1", run_name="r", start=at(hours=2))
    writes = status_writes(snapshot(n1, b, pending, started), at(hours=2), stored)
    [w] = [w for w in writes if w.kind == "Run"]
    assert w.status["phase"] == "Running"
    assert w.status["earliestStart"] is None  # removed: a merge patch deletes a null key
    assert w.status["observedGeneration"] == 0
    assert "phase Pending -> Running" in w.cause
    assert "width" in w.status and "plan" not in w.status  # deficit 0 before and after: not sent


def test_a_finished_phase_is_never_written():
    fleet = snapshot(node("n1"), budget(), run("done", phase="Succeeded"))
    [w] = [w for w in status_writes(fleet, at(hours=1), {}) if w.kind == "Run"]
    assert "phase" not in w.status and "reason" not in w.status
    assert w.status["conditions"][0]["reason"] == "Succeeded"


def test_conditions_keep_their_transition_time_until_they_flip():
    n1, b = node("n1", gpus=8), budget()
    big = run("r", gpus=16, phase="Pending")
    stored = stored_after(status_writes(snapshot(n1, b, big), at(hours=1), {}))
    bigger_node = node("n1", gpus=16)
    [w] = [w for w in status_writes(snapshot(bigger_node, budget(envelopes=[envelope(concurrency=16)]), big),
                                    at(hours=2), stored) if w.kind == "Run"]
    by_type = {c["type"]: c for c in w.status["conditions"]}
    assert by_type["Placeable"]["status"] == "True"
    assert by_type["Placeable"]["lastTransitionTime"] == "2025-11-01T02:00:00Z"
    assert by_type["Ready"]["lastTransitionTime"] == "2025-11-01T01:00:00Z"  # still False


def test_a_pending_reservation_gets_its_forecast():
    fleet = snapshot(node("n1", gpus=8), budget(), run("big", gpus=16, phase="Pending"),
                     reservation("big-r1", run_name="big", earliest_start=at(hours=5)))
    writes = {(w.kind, w.name): w for w in status_writes(fleet, at(hours=1), {})}
    forecast = writes[("Reservation", "big-r1")].status["forecast"]
    assert forecast["deficitGPUs"] == 8
    assert forecast["confidence"] == "unknown"
    run_status = writes[("Run", "big")].status
    assert (run_status["phase"], run_status["pendingReservation"]) == ("Reserved", "big-r1")


def test_a_bad_object_gets_an_event_and_a_condition_once():
    bad = BadObject(kind="Run", namespace="team", name="broken", uid="u1", generation=2,
                    error="status.preemptions[0].reservation: required field is missing")
    key = bad.key
    writes = status_writes(snapshot(), at(hours=1), {}, [key], {key: bad})
    patch, event = writes
    assert isinstance(patch, PatchStatus) and isinstance(event, RecordEvent)
    [condition] = patch.status["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "InvalidObject")
    assert "status.preemptions[0].reservation" in condition["message"]
    assert event.type == "Warning" and "status.preemptions[0].reservation" in event.message
    again = BadObject(**{**bad.__dict__, "status": stored_after([patch])[key].status})
    assert status_writes(snapshot(), at(hours=2), {}, [key], {key: again}) == []


def test_a_bad_lease_gets_an_event_only():
    bad = BadObject(kind="GPULease", namespace="team", name="l", error="spec.slice.slots: expected at least 1 item")
    [event] = status_writes(snapshot(), at(hours=1), {}, [bad.key], {bad.key: bad})
    assert isinstance(event, RecordEvent)


def test_the_next_change_is_the_first_instant_a_fact_changes_by_itself(fleet):
    from kubectl_runs.reconciler.status import next_change

    assert next_change(fleet, AT) == at("2025-11-21T05:45:00Z")  # train-16 reports 06:00: its grace starts 05:45
    assert next_change(fleet, at("2025-11-21T05:45:00Z")) == at("2025-11-21T06:00:00Z")  # its ETA itself
    later = snapshot(budget(envelopes=[envelope(start=at(hours=2), end=at(hours=9))]),
                     lease("l", start=at(hours=5), ended=at(hours=7)))
    assert [next_change(later, at(hours=h)) for h in (1, 2, 5, 7, 9)] == [
        at(hours=2), at(hours=5), at(hours=7), at(hours=9), None]


def test_a_replica_whose_clock_is_behind_does_not_rewrite_the_hours():
    """Written at +5 h by one replica; another whose clock says +4 h 59 min 58 s projects backwards."""
    fleet = snapshot(node("n1", gpus=8), budget(), lease("l1", gpus=8, node_name="n1"))
    stored = stored_after(status_writes(fleet, at(hours=5), {}))
    assert status_writes(fleet, at(hours=5) - timedelta(seconds=2), stored) == []
