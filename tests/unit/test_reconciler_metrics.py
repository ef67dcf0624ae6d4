"""The loop's side of the metrics (reconciler/loop.py): the ledger keeper's decisions are counted when, and only
when, their write is made, and the fleet gauges after a batch are those of the fleet as its writes left it.

Driven in-process (metrics_driver.py): the real ledger keeper, Reconciler.compute/apply, and reconciler/apply.py's
Applier whose requests go to an in-memory copy of the fleet. tests/integration/test_metrics_live.py does the
same against the real API server."""

from __future__ import annotations

import msgspec
import pytest
from builders import budget, envelope
from metrics_driver import PASS, fleet, one_batch, reconciler
from prometheus_client.parser import text_string_to_metric_families

from kubectl_runs.engine.reports import plain
from kubectl_runs.engine.usage import budget_usage
from kubectl_runs.model import Snapshot
from kubectl_runs.reconciler.actions import PatchStatus
from kubectl_runs.reconciler.ledger import apply_writes, plan_ledger
from kubectl_runs.reconciler.metrics import ReconcilerMetrics


def scrape(metrics: ReconcilerMetrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition()[0].decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def values(scraped, name: str, **labels) -> dict[tuple, float]:
    return {lbl: v for (n, lbl), v in scraped.items() if n == name and set(labels.items()) <= set(lbl)}


def decisions(sent) -> list[PatchStatus]:
    return [w for w in sent if isinstance(w, PatchStatus) and w.kind == "Reservation" and "activation" in w.status]


def run_batch(snap: Snapshot, refuse=None) -> tuple[ReconcilerMetrics, list, object]:
    metrics = ReconcilerMetrics()
    rec = reconciler(snap, metrics, refuse)
    try:
        outcomes = one_batch(rec, snap)
    finally:
        rec.shutdown()
    return metrics, outcomes, rec.applier


def test_an_activation_is_counted_once_with_its_scope_and_the_victims_namespace():
    metrics, _outcomes, applier = run_batch(fleet())
    (decision,) = decisions(applier.sent)
    (action,) = decision.status["activation"]["actions"]
    assert action["kind"] == "Lottery" and action["run"] in ("lab/a", "lab/b") and action["gpus"] == 8
    scraped = scrape(metrics)
    labels = {"kind": "Lottery", "flavor": "H100", "scope": "H100/d1", "namespace": "lab"}
    assert values(scraped, "jobtree_resolver_actions_total") == {tuple(sorted(labels.items())): 1}
    assert values(scraped, "jobtree_preempted_gpus_total") == {tuple(sorted(labels.items())): 8}
    assert values(scraped, "jobtree_reservation_activations_total") == {
        (("flavor", "H100"), ("outcome", "Activated"), ("scope", "H100/d1")): 1}
    assert values(scraped, "jobtree_api_writes_total", kind="Reservation", action="PatchStatus", outcome="ok")

    # the next pass over what was written decides nothing: nothing more is counted
    again = ReconcilerMetrics()
    rec = reconciler(applier.objects.snapshot, again)
    try:
        one_batch(rec, applier.objects.snapshot)
    finally:
        rec.shutdown()
    assert values(scrape(again), "jobtree_resolver_actions_total") == {}


def test_a_pass_that_finishes_a_recorded_activation_counts_nothing():
    """A crash right after the decision was written: the next pass closes the victim from the record. The
    actions were counted when the decision was written, not again."""
    snap = fleet()
    writes = plan_ledger(snap, PASS)
    decided = apply_writes(snap, writes[:1])
    metrics, _outcomes, applier = run_batch(decided)
    closed = [w for w in applier.sent if w.kind == "GPULease" and isinstance(w, PatchStatus)
              and w.status.get("closureReason") == "RandomPreempt"]
    assert len(closed) == 1 and not decisions(applier.sent)
    scraped = scrape(metrics)
    assert values(scraped, "jobtree_resolver_actions_total") == {}
    assert values(scraped, "jobtree_reservation_activations_total") == {}


@pytest.mark.parametrize("status", [409, 403, 500])
def test_a_decision_whose_write_fails_is_not_counted(status):
    metrics, outcomes, applier = run_batch(fleet(), refuse={"team/job-r1": status})
    (decision,) = decisions(applier.sent)  # it was tried
    assert next(o.outcome for o in outcomes if o.write is decision) == {409: "conflict", 403: "forbidden"}.get(
        status, "error")
    scraped = scrape(metrics)
    assert values(scraped, "jobtree_resolver_actions_total") == {}
    assert values(scraped, "jobtree_preempted_gpus_total") == {}
    assert values(scraped, "jobtree_reservation_activations_total") == {}


def test_a_failed_activation_counts_its_reason_and_takes_nothing():
    """job needs 32 GPUs (funded) and its scope holds 16: Failed NotEnoughToFree."""
    snap = fleet()
    manifest = msgspec.to_builtins(snap.runs_by_key["team/job"])
    manifest["spec"]["resources"]["totalGPUs"] = 32
    big_team = budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=64)])
    snap = Snapshot(nodes=snap.nodes, budgets=(snap.budgets[0], big_team),
                    runs=tuple(msgspec.convert(manifest, type(r)) if r.key == "team/job" else r for r in snap.runs),
                    reservations=snap.reservations, leases=snap.leases)
    metrics, _outcomes, _applier = run_batch(snap)
    scraped = scrape(metrics)
    assert values(scraped, "jobtree_reservation_activations_total") == {
        (("flavor", "H100"), ("outcome", "NotEnoughToFree"), ("scope", "H100/d1")): 1}
    assert values(scraped, "jobtree_resolver_actions_total") == {}


def gauges_equal_budgets_usage(scraped, snap: Snapshot) -> dict[str, float]:
    """Asserts every envelope's gauges equal ``budgets usage`` of ``snap`` at PASS; returns headroom by
    namespace."""
    rows = plain(budget_usage(snap, PASS).report)["envelopes"]
    assert rows
    headroom = {}
    for row in rows:
        key = {"namespace": row["namespace"], "budget": row["budget"], "envelope": row["envelope"]}
        (value,) = values(scraped, "jobtree_budget_headroom_gpus", **key).values()
        assert value == row["headroomGPUs"]
        for cls in ("owned", "shared", "borrowed", "unfunded", "spare"):
            (gpus,) = values(scraped, "jobtree_budget_gpus", **key, **{"class": cls}).values()
            assert gpus == row[f"{cls}GPUs"], cls
        headroom[row["namespace"]] = value
    states = {}
    for r in snap.reservations:
        states[r.status.state or "Pending"] = states.get(r.status.state or "Pending", 0) + 1
    assert {dict(lbl)["state"]: v for lbl, v in values(scraped, "jobtree_reservations").items() if v} == states
    phases = {}
    for r in snap.runs:
        phases[r.status.phase or ""] = phases.get(r.status.phase or "", 0) + 1
    assert {dict(lbl)["phase"]: v for lbl, v in values(scraped, "jobtree_runs").items()} == phases
    return headroom


def test_the_fleet_gauges_after_a_batch_are_those_of_the_fleet_it_wrote():
    """Not the fleet before the batch (lab 0, team 8 GPUs of headroom, job-r1 Pending, job not Running): the
    fleet after the activation, its lease writes and its status writes."""
    before = fleet()
    assert {r["namespace"]: r["headroomGPUs"] for r in plain(budget_usage(before, PASS).report)["envelopes"]} == {
        "lab": 0, "team": 8}
    metrics, _outcomes, applier = run_batch(before)
    written = applier.objects.snapshot
    assert written.runs_by_key["team/job"].status.phase == "Running"
    assert gauges_equal_budgets_usage(scrape(metrics), written) == {"lab": 8, "team": 0}


def test_when_a_ledger_write_fails_the_gauges_are_those_of_the_writes_that_went_in():
    """The lease minted for job is refused: the victim's lease was closed (lab has 8 GPUs of headroom again)
    but job holds nothing (team still 8)."""
    before = fleet()
    metrics, outcomes, applier = run_batch(before, refuse={"team/job-g0-active-0": 403})
    assert any(o.outcome == "forbidden" for o in outcomes)
    written = applier.objects.snapshot
    assert gauges_equal_budgets_usage(scrape(metrics), written) == {"lab": 8, "team": 8}
