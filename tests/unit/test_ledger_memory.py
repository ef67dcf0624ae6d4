"""The ledger keeper of the live loop (``ledger.Keeper``) starts a pass from the previous pass's Evaluation when
nothing it is made of changed (``ledger/memory.py``): each such pass writes what ``plan_ledger`` writes, and the
Evaluation it shared serves what a new one serves (the open-lease ledger to the consumed second, free GPUs,
capacity, protections, lottery candidates, releases, every Run's plan). What must make a new one does: a
lease-holding Run's reported completion changing, the clock reaching an instant a value changes at, a pass that
wrote."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta

import msgspec

from bench import scale_fleet
from kubectl_runs.engine.evaluation import Evaluation
from kubectl_runs.engine.plan import plan_run
from kubectl_runs.model import Scope, Snapshot
from kubectl_runs.reconciler.ledger import Keeper, apply_writes, plan_ledger
from kubectl_runs.sources.files import load_file

NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
SCOPES = (Scope(flavor=scale_fleet.FLAVOR), Scope(flavor=scale_fleet.FLAVOR, domain="d1"))


def served(ev: Evaluation, snap: Snapshot, at: datetime) -> dict:
    book = ev.book
    out: dict = {
        "at": (book.at, ev.at),
        "envelopes": {k: (u.window_active, u.owned, u.shared, u.borrowed, u.unfunded, u.consumed_seconds)
                      for k, u in book.envelopes.items()},
        "charges": {k: (c.envelope, c.owned, c.shared, c.borrowed, c.unfunded) for k, c in book.charges.items()},
        "findings": [(f.kind, f.lease, f.detail) for f in book.findings],
        "protections": ev.protections(),
        "free": ev.free(scale_fleet.FLAVOR),
    }
    for scope in SCOPES:
        out[f"lottery {scope}"] = ev.lottery_candidates(scope)
        out[f"releases {scope}"] = [(r.run, r.at, r.gpus, r.freed) for r in ev.releases(scope)]
        out[f"capacity {scope}"] = ev.capacity(scope.flavor, domain=scope.domain, unit=1)
    for run in snap.runs:
        out[f"plan {run.key}"] = msgspec.json.encode(plan_run(snap, run, at, evaluation=ev).report)
    return out


class Fleet:
    def __init__(self):
        self.objects = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                        for o in scale_fleet.fleet(range(2), NOW)}
        self.snapshot = self.load()

    def load(self) -> Snapshot:
        doc = {"apiVersion": "v1", "kind": "List", "items": list(self.objects.values())}
        return load_file("fleet.json", msgspec.json.encode(doc))

    def run(self, name: str, edit) -> None:
        """Change one Run; every other object (and every other kind's tuple) stays the very same."""
        key = ("Run", "team0", name)
        o = copy.deepcopy(self.objects[key])
        edit(o)
        self.objects[key] = o
        changed = load_file("run.json", msgspec.json.encode({"apiVersion": "v1", "kind": "List", "items": [o]})).runs[0]
        runs = tuple(changed if r.key == changed.key else r for r in self.snapshot.runs)
        self.snapshot = dataclasses.replace(self.snapshot, runs=runs)


def test_a_pass_starts_from_the_last_one_while_what_it_shares_stands():
    fleet = Fleet()
    keeper = Keeper()
    eta = NOW + timedelta(minutes=30)  # comes within the 15-minute grace at NOW + 15 min

    def step(at: datetime) -> int | str:
        """1: the pass started from the last one's Evaluation, 0: it made its own, "wrote": it wrote (and the
        writes are applied to the fleet)."""
        snap = fleet.snapshot
        before = keeper.memory.reused
        writes = keeper(snap, at)
        assert writes == plan_ledger(snap, at)
        if writes:
            assert keeper.memory._last is None  # a pass that wrote leaves nothing to start from
            fleet.snapshot = apply_writes(snap, writes)
            return "wrote"
        kept = keeper.memory._last[0]
        assert kept.snapshot is snap and kept.at == at
        assert served(kept, snap, at) == served(Evaluation.kept(snap, at), snap, at)
        return keeper.memory.reused - before

    assert step(NOW) == 0  # nothing to start from
    fleet.run("b00-r00", lambda o: o.setdefault("status", {}).update(phase="Running", message="ours"))  # our echo
    fleet.run("b00-r97", lambda o: o["spec"]["resources"].update(totalGPUs=17))  # Pending: holds nothing
    assert step(NOW + timedelta(seconds=1)) == 1
    fleet.run("b00-r98", lambda o: o.setdefault("status", {}).update(eta={  # holds nothing: a protection only
        "estimatedCompletion": scale_fleet.iso(NOW + timedelta(minutes=10)), "source": "trainer"}))
    assert step(NOW + timedelta(seconds=7)) == 1
    fleet.run("b00-r01", lambda o: o.setdefault("status", {}).update(
        eta={"estimatedCompletion": scale_fleet.iso(eta), "source": "trainer"}))  # holds leases: a release now
    assert step(NOW + timedelta(seconds=8)) == "wrote"  # the Pending runs short of funding have a forecast now
    assert step(NOW + timedelta(seconds=9)) == 0  # new Reservations: a new Evaluation
    assert step(NOW + timedelta(minutes=9)) == 1  # the ledger moved 9 minutes: consumed GPU-seconds included
    assert step(NOW + timedelta(minutes=10)) == 0  # b00-r98's reported completion passed
    assert step(NOW + timedelta(minutes=11)) == 1
    assert step(NOW + timedelta(minutes=15)) == 0  # its completion is within the grace: protected from now on
    assert step(NOW + timedelta(minutes=16)) == 1
