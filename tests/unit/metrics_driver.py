"""A small fleet whose due Reservation activates with a lottery, and a loop that really applies it in-process
(the ledger keeper's writes, through Reconciler.apply with an applier that answers as the API server would),
so a ReconcilerMetrics registry holds every series the reconciler exports. Used by test_reconciler_metrics.py
and test_dashboard.py.

Nodes n1, n2 (fabric domain d1) and m1 (d2), 8 H100 GPUs each. Namespace lab (owner org:lab, envelope main of
16) runs a on n1 and b on n2; namespace team (owner org:team, envelope west of 16 under an aggregate cap of 20)
runs c on m1 and waits with job (8 GPUs) for its Reservation job-r1, scope H100 in d1, due at DUE: the lottery
takes a or b (8 GPUs of lab), job starts on them. Headroom before: lab 0, team 8; after: lab 8, team 0. big (24
GPUs) waits for its Reservation big-r1, due in days (the backlog and ETA gauges).
"""

from __future__ import annotations

import io
from datetime import timedelta

from builders import T0, at, budget, envelope, lease, node, reservation, run, slots, snapshot

from kubectl_runs.reconciler.actions import Create, PatchStatus
from kubectl_runs.reconciler.apply import Applier, Outcome
from kubectl_runs.reconciler.cache import ApiError
from kubectl_runs.reconciler.ledger import _Objects, plan_ledger
from kubectl_runs.reconciler.loop import Logger, Reconciler, Settings
from kubectl_runs.reconciler.metrics import ReconcilerMetrics

DUE = at(hours=2)
PASS = DUE + timedelta(seconds=3)
NODES = [node("n1", domain="d1"), node("n2", domain="d1"), node("m1", domain="d2")]


def fleet(*, domain: str | None = "d1"):
    def holding(name: str, namespace: str, owner: str, node_name: str, payer: tuple[str, str]):
        return lease(f"{name}-g0-active-0", namespace, owner=owner, run_name=name, slot_list=slots(node_name, 8),
                     paid_by=payer, start=T0)

    return snapshot(
        *NODES,
        budget("b", "lab", owner="org:lab", envelopes=[envelope("main", concurrency=16)]),
        budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=16)],
               aggregate_caps=[{"name": "all", "envelopes": ["west"], "maxConcurrency": 20}]),
        run("a", "lab", gpus=8, group_gpus=8, created=T0), holding("a", "lab", "org:lab", "n1", ("b", "main")),
        run("b", "lab", gpus=8, group_gpus=8, created=T0), holding("b", "lab", "org:lab", "n2", ("b", "main")),
        run("c", "team", gpus=8, group_gpus=8, created=T0), holding("c", "team", "org:team", "m1", ("b", "west")),
        run("job", "team", gpus=8, group_gpus=8, phase=None, created=at(minutes=5)),
        reservation("job-r1", "team", run_name="job", domain=domain, earliest_start=DUE),
        run("big", "team", gpus=24, group_gpus=8, phase=None, created=at(minutes=6)),
        reservation("big-r1", "team", run_name="big", earliest_start=at(days=3)),
    )


class ApiLikeApplier(Applier):
    """reconciler/apply.py's Applier (its leader check, outcome mapping, write counters and log lines) whose
    requests go to an in-memory copy of the fleet that changes as the API server would, answering with the
    object as stored. ``refuse`` maps object keys to the HTTP status their writes fail with (409, 403, …)."""

    def __init__(self, snap, metrics, refuse: dict[str, int] | None = None):
        super().__init__(None, None, log=Logger(io.StringIO()), metrics=metrics)
        self.objects = _Objects(snap)
        self.refuse = refuse or {}
        self.sent: list = []

    def _apply(self, write, at, echo):
        self.sent.append(write)
        if write.key in self.refuse:
            raise ApiError(self.refuse[write.key], "Refused", f"{write.key}: refused by the test")
        objects = self.objects.by_kind.get(write.kind, {})
        if isinstance(write, Create) and write.key in objects:
            return Outcome(write, "exists")
        if isinstance(write, PatchStatus) and write.key not in objects:
            raise ApiError(404, "NotFound", f"{write.key} not found")
        self.objects.apply(write)
        return Outcome(write, "ok", answer=objects.get(write.key))


def reconciler(snap, metrics: ReconcilerMetrics, refuse: dict[str, int] | None = None) -> Reconciler:
    """A Reconciler of the ledger keeper whose cache holds ``snap`` and whose writes go to ApiLikeApplier."""
    rec = Reconciler(lambda: None, Settings(once=True, manage_leases=True), log=Logger(io.StringIO()),
                     metrics=metrics, ledger=plan_ledger)
    rec.applier = ApiLikeApplier(snap, metrics, refuse)
    return rec


def one_batch(rec: Reconciler, snap, when=PASS) -> list[Outcome]:
    """What Reconciler.process does with a batch, on ``snap`` as the cache view: compute, apply, refresh."""
    ledger_writes, status = rec.compute(None, when, view=(snap, {}, {}))
    outcomes = rec.apply(ledger_writes, status, when)
    rec._refresh_fleet(when, outcomes)
    return outcomes


def driven() -> ReconcilerMetrics:
    """A registry after a real activation and every other kind of event the reconciler counts."""
    metrics = ReconcilerMetrics()
    snap = fleet()
    rec = reconciler(snap, metrics)
    try:
        one_batch(rec, snap)
    finally:
        rec.shutdown()
    metrics.count_decision("H100", None, {"state": "Failed", "reason": "NotEnoughToFree"})
    metrics.count_api_error("patch", "runs", "Forbidden")
    metrics.observe_reconcile(0.1)
    metrics.set_queue_depth(0)
    metrics.set_leader(True)
    metrics.set_ready(True)
    return metrics
