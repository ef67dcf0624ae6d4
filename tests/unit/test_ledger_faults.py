"""Ledger faults the API server accepts and an audit must not pass silently (issue #28, docs/arithmetic.md
Findings): a closed lease with a reversed or missing end, slots that name no GPU, a lease from the future, an
Activated Reservation naming what is not there, a sponsor that owns no Budget — each its own finding kind in
``leases audit`` and, where they count the lease, in ``budgets usage`` and ``explain``. And three cases found by
mutating the code, each pinned here: an ordinal equal to the node's GPUs is no used slot; GPU-hours are rounded
to 4 decimals; a Kueue node-affinity term with no flavor key matches every flavor."""

from __future__ import annotations

import json
from datetime import timedelta

import msgspec
import pytest
from builders import T0, activated, at, budget, lease, node, reservation, run, run_cli, snapshot, write_fleet

from kubectl_runs.engine import reports
from kubectl_runs.engine.audit import audit
from kubectl_runs.engine.explain import explain_run
from kubectl_runs.engine.packing import free_by_node, used_slots
from kubectl_runs.engine.slots import gpu_of, slot_fault
from kubectl_runs.engine.usage import budget_usage
from kubectl_runs.kueue.assign import affinity_matches
from kubectl_runs.kueue.model import PodSpec

AT = at(days=2)
SINCE, UNTIL = T0, at(days=2)


def kinds(findings) -> list[tuple[str, str | None]]:
    return [(f.kind, f.lease) for f in findings]


def audited(*objects, **kw):
    return audit(snapshot(*objects, taken_at=kw.pop("taken_at", None)), AT, since=SINCE, until=UNTIL, **kw)


# --- 1. closed leases with no sound interval --------------------------------------------------------------------


def test_a_closed_lease_that_ended_before_it_started_is_reported_and_counted_zero():
    bad = lease("backwards", node_name="n1", gpus=2, start=at(hours=5), ended=at(hours=1))
    report = audited(node("n1"), budget(), run("backwards"), bad)
    assert kinds(report.findings) == [("InvalidInterval", "team/backwards")]
    assert report.total_gpu_seconds == 0
    assert "ended 2025-11-01T01:00:00Z before its start 2025-11-01T05:00:00Z" in report.findings[0].detail


def test_a_closed_lease_without_ended_is_reported_and_counted_zero():
    bad = lease("endless", node_name="n1", start=at(hours=5), closed=True, closure_reason="Completed")
    report = audited(node("n1"), budget(), run("endless"), bad)
    assert kinds(report.findings) == [("ClosedWithoutEnd", "team/endless")]
    assert report.total_gpu_seconds == 0


def test_interval_faults_belong_to_the_window_holding_their_start():
    bad = lease("backwards", node_name="n1", start=at(days=-5), ended=at(days=-6))
    assert audited(node("n1"), budget(), run("backwards"), bad).findings == []
    whole = audit(snapshot(node("n1"), budget(), run("backwards"), bad), AT, since=at(days=-7), until=AT)
    assert kinds(whole.findings) == [("InvalidInterval", "team/backwards")]


def test_a_lease_closed_at_its_start_is_sound():
    assert audited(node("n1"), budget(), run("r"), lease("r", node_name="n1", ended=T0)).findings == []


# --- 2. slots that name no GPU ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("slot", "kind"), [
    ("n1#0", None), ("n1#7", None), ("n1#8", "SlotOutOfRange"), ("n1#99", "SlotOutOfRange"),
    ("n1", "MalformedSlot"), ("#3", "MalformedSlot"), ("n1#", "MalformedSlot"), ("n1#x", "MalformedSlot"),
    ("n1#07", "MalformedSlot"), ("n1#\u00b3", "MalformedSlot"), ("n1#-1", "MalformedSlot"),
    ("gone#0", "UnknownNode"), ("a#b#3", "UnknownNode"),
], ids=lambda v: repr(v))
def test_slot_kinds(slot, kind):
    assert slot_fault(slot, {"n1": node("n1", gpus=8)}) == kind


def test_the_three_reports_agree_on_a_slot_that_names_no_gpu():
    """``gpu-a-01`` (no ordinal) and ``gpu-a-01#99`` on an 8-GPU node: the audit, budgets usage and explain say
    the same kinds, and budgets still count the 2 GPUs (the envelope paid for them)."""
    objects = (node("gpu-a-01"), budget(), run("r"),
               lease("r", slot_list=["gpu-a-01", "gpu-a-01#99", "gpu-a-01#0"], start=T0))
    fleet = snapshot(*objects)
    want = [("MalformedSlot", "team/r"), ("SlotOutOfRange", "team/r")]
    audit_found = audit(fleet, AT, since=SINCE, until=UNTIL).findings
    assert kinds(audit_found) == want
    assert "node gpu-a-01 has 8 GPUs: slots #0-#7" in audit_found[1].detail
    assert "not in the snapshot" not in " ".join(f.detail for f in audit_found)
    usage = budget_usage(fleet, AT)
    assert kinds(usage.findings) == want
    assert usage.envelopes[0].used == 3  # counted: the API server accepted the lease, the envelope paid
    explained = explain_run(fleet, fleet.runs[0], AT)
    assert kinds(explained.findings) == want
    assert [f.detail for f in explained.findings] == [f.detail for f in usage.findings]
    assert [e.kind for e in explained.report.findings] == ["MalformedSlot", "SlotOutOfRange"]


def test_an_unknown_node_is_said_as_one():
    found = audited(node("n1"), budget(), run("r"), lease("r", slot_list=["n9#0"])).findings
    assert kinds(found) == [("UnknownNode", "team/r")]
    assert "n9 (not in the snapshot)" in found[0].detail


def test_malformed_slots_are_found_without_nodes():
    report = audited(budget(), run("r"), lease("r", slot_list=["n1"]))
    assert kinds(report.findings) == [("MalformedSlot", "team/r")]


def test_a_node_failure_excuses_a_missing_node_not_a_malformed_slot():
    closed = lease("r", slot_list=["gone#0", "gone"], ended=at(hours=1), closure_reason="NodeFailure")
    assert kinds(audited(budget(), node("n1"), run("r"), closed).findings) == [("MalformedSlot", "team/r")]


# --- 3. a lease from the future --------------------------------------------------------------------------------


def test_an_open_lease_starting_in_2999_is_reported():
    future = lease("r", node_name="n1", start="2999-01-01T00:00:00Z")
    report = audited(node("n1"), budget(), run("r"), future, taken_at=AT)
    assert kinds(report.findings) == [("FutureStart", "team/r")]
    explained = explain_run(snapshot(node("n1"), budget(), run("r"), future, taken_at=AT), run("r"), AT)
    assert kinds(explained.findings) == [("FutureStart", "team/r")]


def test_a_start_after_an_earlier_at_is_no_fault_and_the_tolerance_holds():
    """--at in the past: leases minted after it are not open yet. Within 5 minutes of the snapshot's stamp:
    clocks differ."""
    later = lease("r", node_name="n1", start=AT - timedelta(hours=1))
    skewed = lease("s", node_name="n1", start=AT + timedelta(minutes=4), slot_list=["n1#1"])
    fleet = snapshot(node("n1"), budget(), run("r"), run("s"), later, skewed, taken_at=AT)
    assert audit(fleet, at(hours=1), since=T0, until=at(hours=1)).findings == []
    # no stamp: the wall clock the CLI read (``read``) is the reference, not --at
    unstamped = snapshot(node("n1"), budget(), run("r"), later)
    assert audit(unstamped, at(hours=1), since=T0, until=at(hours=1), read=AT).findings == []
    too_late = lease("t", node_name="n1", start=AT + timedelta(minutes=6), slot_list=["n1#2"])
    found = audit(snapshot(node("n1"), budget(), run("t"), too_late, taken_at=AT), AT, since=T0, until=AT).findings
    assert kinds(found) == [("FutureStart", "team/t")]


# --- 4. an Activated Reservation naming what is not there ------------------------------------------------------


def test_an_activated_reservation_naming_no_run_and_no_envelope():
    res = activated(reservation("rsv", run_name="ghost", paying=("nobudget", "noenv")),
                    {"at": "2025-11-01T10:00:00Z", "seed": "0x1", "freedGPUs": 8})
    found = audited(node("n1"), budget(), res).findings
    assert kinds(found) == [("DanglingReservation", None)]
    detail = found[0].detail
    assert "team/rsv" in detail and "team/ghost is not in the snapshot" in detail and "nobudget" in detail
    # outside the window of its activation: not this audit's
    assert audit(snapshot(node("n1"), budget(), res), AT, since=at(days=1), until=AT).findings == []
    # a Pending one, or one whose run was deleted after it (its leases say so), is no fault
    assert audited(node("n1"), budget(), reservation("p", run_name="ghost")).findings == []
    gone = lease("g", run_name="ghost", node_name="n1", ended=at(hours=11), closure_reason="RunDeleted")
    res_ok = activated(reservation("rsv", run_name="ghost", paying=("b", "west")), {"at": "2025-11-01T10:00:00Z"})
    assert audited(node("n1"), budget(), res_ok, gone).findings == []


# --- 5. a sponsor that owns no Budget --------------------------------------------------------------------------


def test_explain_names_a_sponsor_that_owns_no_budget():
    borrower = run("r", funding={"allowBorrow": True, "sponsors": ["org:lender", "org:nobody"]})
    fleet = snapshot(node("n1"), budget(), budget("l", namespace="lender", owner="org:lender"), borrower)
    found = explain_run(fleet, borrower, AT).findings
    assert kinds(found) == [("UnknownSponsor", None)]
    assert "org:nobody" in found[0].detail and "org:lender" not in found[0].detail


# --- through the CLI: exit codes, the table, JSON ----------------------------------------------------------------


def test_leases_audit_strict_exits_3_on_each_new_kind(capsys, tmp_path):
    objects = [node("n1"), budget(), run("a"), run("b"), run("c"),
               lease("a", node_name="n1", start=at(hours=5), ended=at(hours=1)),
               lease("b", node_name="n1", start=at(hours=5), closed=True),
               lease("c", slot_list=["n1#8"], start=T0)]
    path = write_fleet(tmp_path / "fleet.yaml", objects)
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", path, "--at", "2025-11-03T00:00:00Z",
                             "--since", "2025-11-01T00:00:00Z", "--strict", "-o", "json")
    assert code == 3, err
    doc = json.loads(out)
    assert [(f["kind"], f["lease"]) for f in doc["findings"]] == [
        ("SlotOutOfRange", "team/c"), ("InvalidInterval", "team/a"), ("ClosedWithoutEnd", "team/b")]
    code, out, _ = run_cli(capsys, "leases", "audit", "--snapshot", path, "--at", "2025-11-03T00:00:00Z",
                           "--since", "2025-11-01T00:00:00Z")
    assert code == 0 and "InvalidInterval" in out and "ClosedWithoutEnd" in out


def test_explain_shows_its_findings(capsys, tmp_path):
    objects = [node("n1"), budget(), run("r", funding={"allowBorrow": True, "sponsors": ["org:nobody"]}),
               lease("r", slot_list=["n1"], start=T0)]
    path = write_fleet(tmp_path / "fleet.yaml", objects)
    code, out, err = run_cli(capsys, "explain", "r", "-n", "team", "--snapshot", path, "--at", "2025-11-02T00:00:00Z")
    assert code == 0, err
    assert "Findings" in out and "MalformedSlot" in out and "UnknownSponsor" in out
    code, out, _ = run_cli(capsys, "explain", "r", "-n", "team", "--snapshot", path, "--at", "2025-11-02T00:00:00Z",
                           "-o", "json")
    assert [f["kind"] for f in json.loads(out)["findings"]] == ["MalformedSlot", "UnknownSponsor"]


# --- 6. pinned by mutation ----------------------------------------------------------------------------------------


def test_an_ordinal_equal_to_the_nodes_gpus_is_no_used_slot():
    """(a) ``n1#8`` on an 8-GPU node names no GPU: the node still has 8 free, not 7 (mutant: ``>`` for ``>=``)."""
    n1 = node("n1", gpus=8)
    held = [lease("r", slot_list=["n1#8"])]
    assert used_slots([n1], held) == {}
    assert free_by_node([n1], held) == {"n1": 8}
    assert free_by_node([n1], [lease("r", slot_list=["n1#7"])]) == {"n1": 7}
    assert gpu_of("n1#8") == ("n1", 8) and slot_fault("n1#8", {"n1": n1}) == "SlotOutOfRange"


def test_gpu_hours_are_rounded_to_4_decimals():
    """(b) docs/output.md: GPU-hours carry 4 decimals. 1 GPU for 1 s = 0.000277… h -> 0.0003; 3 decimals would
    give 0.0."""
    assert reports.round_hours(1 / 3600) == 0.0003
    assert reports.round_hours(12.34567) == 12.3457
    one_second = lease("r", node_name="n1", start=T0, ended=T0 + timedelta(seconds=1))
    report = audited(node("n1"), budget(), run("r"), one_second)
    assert report.report.totals.gpu_hours == 0.0003
    assert report.report.rows[0].gpu_hours == 0.0003
    usage = budget_usage(snapshot(node("n1"), budget(), run("r"), one_second), AT)
    assert reports.envelope_row(usage.envelopes[0]).consumed_gpu_hours == 0.0003


def _pod(*terms: list[dict]) -> PodSpec:
    return msgspec.convert({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}}}}, PodSpec)


def test_a_node_affinity_term_with_no_flavor_key_matches_every_flavor():
    """(c) Kueue's flavorSelector keeps only the keys the flavors label: a term left with none matches every
    flavor, and terms are ORed (mutant: skipping such a term instead)."""
    keys = {"gpu.flavor"}
    unrelated = [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["x"]}]
    other_flavor = [{"key": "gpu.flavor", "operator": "In", "values": ["A100"]}]
    assert affinity_matches(_pod(unrelated), keys, {"gpu.flavor": "H100"})
    assert affinity_matches(_pod(other_flavor, unrelated), keys, {"gpu.flavor": "H100"})
    assert not affinity_matches(_pod(other_flavor), keys, {"gpu.flavor": "H100"})


def test_an_open_lease_with_an_end_or_a_closure_reason_is_reported_and_counted_open():
    stray = lease("r", node_name="n1", start=T0, ended=at(hours=1), closed=False)
    report = audited(node("n1"), budget(), run("r"), stray)
    assert kinds(report.findings) == [("OpenWithEnd", "team/r")]
    assert report.total_gpu_seconds == (UNTIL - SINCE).total_seconds()  # counted as open, as `closed` says
    reasoned = lease("s", node_name="n1", start=T0, closure_reason="Completed")
    assert kinds(audited(node("n1"), budget(), run("s"), reasoned).findings) == [("OpenWithEnd", "team/s")]


def test_the_archive_reports_the_time_faults_of_archived_leases(capsys, tmp_path):
    """``leases audit --archive``: a lease with no sound interval held no GPU in any window, so the window's view
    does not hold it; archive/faults.py reads it from the files, and the report equals the snapshot's."""
    from kubectl_runs.archive import store

    faulty = [lease("a", node_name="n1", start=at(hours=5), ended=at(hours=1)),
              lease("b", node_name="n1", start=at(hours=6), closed=True)]
    objects = [node("n1"), budget(), run("a"), run("b")]
    every = write_fleet(tmp_path / "all.yaml", [*objects, *faulty])
    live = write_fleet(tmp_path / "live.yaml", objects)
    store.archive(tmp_path / "archive", faulty, archived_at=AT, before=AT)
    args = ("leases", "audit", "--at", "2025-11-03T00:00:00Z", "--since", "2025-11-01T00:00:00Z", "-o", "json")
    want = run_cli(capsys, *args, "--snapshot", every)
    got = run_cli(capsys, *args, "--snapshot", live, "--archive", str(tmp_path / "archive"))
    assert got == want
    assert [f["kind"] for f in json.loads(got[1])["findings"]] == ["InvalidInterval", "ClosedWithoutEnd"]
