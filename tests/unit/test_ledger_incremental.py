"""The incremental ledger pass (issue 27) decides exactly what the pass that rebuilt its view per write decided.

Three ways:

- **recorded**: every pass of four fairness simulations (bench/fairness.py: the small and the default fleet,
  lotteries, reclaims, shrinks, growth, a Run started through its activation) gives the writes — causes
  included, hashed — that the keeper of c389874 gave (tests/unit/data/ledger_passes.json, recorded with
  tests/unit/ledger_passes.py against that tree: the last keeper that made a new Evaluation per write);
- **rebuilt**: on random fleets (test_ledger_properties.fleets: due Reservations, finished and deleted Runs,
  unfunded, borrowed and spare leases, elastic and one-domain Runs), the pass with one Evaluation advanced by
  its writes (``PassState(incremental=True)``, what ``plan_ledger`` runs) and the pass with a new Evaluation per
  view (``incremental=False``, the way before) emit the same writes;
- **advanced**: after each write of a pass, the advanced Evaluation serves what a new Evaluation of the same
  snapshot serves — the ledger (usage, charges, caps, findings), free GPUs and capacity, each Run's leases and
  charges, remedy and lottery candidates, protections, releases, and every Run's plan.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_passes import CASES, passes
from test_ledger_properties import NOW, PROPERTIES, fleets

from kubectl_runs.engine.evaluation import Evaluation
from kubectl_runs.engine.plan import plan_run
from kubectl_runs.model import Scope, Snapshot
from kubectl_runs.reconciler.ledger import LedgerOptions, PassState, plan_ledger, run_pass
from kubectl_runs.reconciler.ledger.free_slots import FreeSlots
from kubectl_runs.reconciler.ledger.writes import Objects

RECORDED = json.loads((Path(__file__).parent / "data" / "ledger_passes.json").read_text())["cases"]


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c['fleet']}-seed{c['seed']}" for c in CASES])
def test_every_pass_of_a_simulation_writes_what_the_keeper_before_wrote(index):
    recorded = RECORDED[index]["passes"]
    assert recorded, "the case must exercise the keeper"
    stats: dict = {}
    now = passes(CASES[index], stats)
    # the loop's keeper started passes from the previous pass's Evaluation (memory.PassMemory), and still wrote
    # what the keeper before wrote
    assert 0 < stats["reused"] < stats["passes"], stats
    first = next((i for i, (a, b) in enumerate(zip(now, recorded, strict=False)) if a != b), None)
    assert first is None and len(now) == len(recorded), (
        f"pass {now[first][0] if first is not None else len(recorded)} differs: {now[first:first + 1]} != "
        f"{recorded[first:first + 1] if first is not None else recorded[len(now):]}"
    )


def _writes(snap: Snapshot, incremental: bool) -> bytes:
    return msgspec.json.encode(run_pass(PassState(snap, NOW, LedgerOptions(), incremental=incremental)))


@PROPERTIES
@given(fleets())
def test_the_incremental_pass_writes_what_a_new_evaluation_per_write_would(snap):
    assert _writes(snap, True) == _writes(snap, False)


def test_the_rebuilding_pass_can_tell_a_difference():
    """The comparison above would see a pass that advanced its Evaluation wrongly: one that never advances it
    plans every Run on the first view, and mints the same free slots twice."""
    from builders import budget, envelope, node, run, snapshot

    snap = snapshot(budget("b", "a", owner="org:t:a", envelopes=[envelope("w", concurrency=16)]),
                    node("n1", gpus=8, domain="d0"), run("p1", "a", gpus=8, phase=None), run("p2", "a", gpus=8,
                                                                                              phase=None))

    class Stale(PassState):
        def evaluation(self):
            if self._ev is None:
                self._ev = Evaluation.kept(self.snap, self.at)
            self._ev.snapshot = self.snap  # never advanced
            return self._ev

    right = plan_ledger(snap, NOW)
    wrong = run_pass(Stale(snap, NOW, LedgerOptions()))
    assert [w.kind for w in right] == ["GPULease", "Reservation", "Reservation"]
    assert msgspec.json.encode(wrong) != msgspec.json.encode(right)


# --- the advanced Evaluation serves what a new one serves ------------------------------------------------------


def _scopes(snap: Snapshot) -> list[Scope]:
    return [Scope(flavor="H100")] + [Scope(flavor="H100", domain=d) for d in sorted({n.domain for n in snap.nodes})]


def _touch(ev: Evaluation, snap: Snapshot) -> None:
    """Compute every cached value, so that advancing has to keep each of them."""
    ev.book  # noqa: B018
    for scope in _scopes(snap):
        ev.free(scope.flavor)
        ev.open_nodes(scope.flavor)
        ev.capacity(scope.flavor, domain=scope.domain, unit=4, spread=False)
        ev.remedy_candidates(scope)
        ev.lottery_candidates(scope)
        ev.releases(scope)
    for run in snap.runs:
        ev.leases_of(run.key)
        ev.charges_of(run.key)
        ev.reservations_of(run.key)
    ev.protections()


def _charge(c) -> tuple:
    return (c.lease.key, c.envelope or (), c.lender or "", c.owned, c.shared, c.borrowed, c.unfunded)


def _served(ev: Evaluation, snap: Snapshot, *, reference: bool = False) -> dict:
    """What ``ev`` serves; ``reference``: the lottery candidates computed as a plan computed them before they
    were shared (every plan its own remedy candidates, less the protected runs)."""
    book = ev.book
    out: dict = {
        "envelopes": {k: (u.window_active, u.owned, u.shared, u.borrowed, u.unfunded, u.spare, u.consumed_seconds,
                          [c.lease.key for c in u.charges]) for k, u in book.envelopes.items()},
        "charges": {k: _charge(c) for k, c in book.charges.items()},
        "aggregates": [(a.name, a.used) for a in book.aggregates],
        "findings": [(f.kind, f.lease, f.detail, f.envelope, f.namespace) for f in book.findings],
        "protections": ev.protections(),
    }
    for scope in _scopes(snap):
        out[f"free {scope}"] = ev.free(scope.flavor)
        out[f"open nodes {scope}"] = list(ev.open_nodes(scope.flavor))
        for unit, spread in ((None, True), (4, False), (5, True)):
            out[f"capacity {scope} {unit} {spread}"] = ev.capacity(scope.flavor, domain=scope.domain, unit=unit,
                                                                   spread=spread)
        out[f"releases {scope}"] = [  # a release's charges in the ledger's order: not kept (engine/book.py)
            (r.run, r.at, r.source, r.gpus, r.freed, sorted(_charge(c) for c in r.charges)) for r in ev.releases(scope)
        ]
        for run in snap.runs:
            for seed in (None, "1f"):
                out[f"remedies {scope} {run.key} {seed}"] = ev.remedy_candidates(scope, exclude_run=run.key, seed=seed)
                out[f"lottery {scope} {run.key} {seed}"] = (
                    ev._shielded(ev.remedy_candidates(scope, exclude_run=run.key, seed=seed)) if reference
                    else ev.lottery_candidates(scope, exclude_run=run.key, seed=seed))
    for run in snap.runs:
        out[f"leases {run.key}"] = ev.leases_of(run.key)
        out[f"charges {run.key}"] = sorted(_charge(c) for c in ev.charges_of(run.key))
        out[f"reservations {run.key}"] = ev.reservations_of(run.key)
        out[f"plan {run.key}"] = msgspec.json.encode(plan_run(snap, run, NOW, evaluation=ev).report)
    return out


@settings(PROPERTIES, max_examples=60)
@given(fleets())
def test_an_advanced_evaluation_serves_what_a_new_one_serves(snap):
    writes = plan_ledger(snap, NOW)
    objects = Objects(snap)
    ev = Evaluation.kept(snap, NOW)
    for write in writes:
        _touch(ev, objects.snapshot)
        change = objects.apply(write)
        if change is None:
            continue
        kind = {"GPULease": "leases", "Reservation": "reservations", "Run": "runs"}[write.kind]
        view = objects.snapshot
        ev.advance(view, **{kind: [change]})
        assert _served(ev, view) == _served(Evaluation(view, NOW), view, reference=True), write.cause


# --- the pass's view after each write is the snapshot of its objects --------------------------------------------


@settings(PROPERTIES, max_examples=60)
@given(fleets())
def test_the_view_after_each_write_is_the_snapshot_of_the_objects_written(snap):
    """``Objects.snapshot`` shares the last view's tuples and indexes, and puts the leases minted since at the end
    of its tuple: each view must still be what a new Snapshot of the same objects holds."""
    writes = plan_ledger(snap, NOW)
    objects = Objects(snap)
    for write in writes:
        objects.apply(write)
        view = objects.snapshot
        fresh = Snapshot(nodes=snap.nodes, budgets=snap.budgets, runs=tuple(objects.by_kind["Run"].values()),
                         reservations=tuple(objects.by_kind["Reservation"].values()),
                         leases=tuple(objects.by_kind["GPULease"].values()))
        for field in ("runs", "reservations", "leases", "runs_by_key", "reservations_by_key", "leases_by_key",
                      "leases_by_run"):
            assert getattr(view, field) == getattr(fresh, field), (field, write.cause)


@settings(PROPERTIES, max_examples=40)
@given(fleets(), st.data())
def test_a_view_whose_leases_are_read_late_or_never_is_still_the_snapshot_of_its_objects(snap, data):
    """A view's lease tuple is made when first read (``writes._Minted``: the leases created since the last view
    appended to a list the views share): views read in any order, some only after many more writes, some never,
    each still holds the leases of the objects when it was made, and compares equal to that Snapshot."""
    writes = plan_ledger(snap, NOW)
    objects = Objects(snap)
    views = []
    for write in writes:
        objects.apply(write)
        view = objects.snapshot
        views.append((view, tuple(objects.by_kind["GPULease"].values()), tuple(objects.by_kind["Run"].values()),
                      tuple(objects.by_kind["Reservation"].values())))
        if data.draw(st.booleans()):  # read now: the views after it append to its tuple
            assert view.leases == views[-1][1], write.cause
    for i in data.draw(st.permutations(range(len(views)))):
        view, leases, runs, reservations = views[i]
        if data.draw(st.booleans()):
            assert view.leases == leases, i
            assert view == Snapshot(nodes=snap.nodes, budgets=snap.budgets, runs=runs, reservations=reservations,
                                    leases=leases, taken_at=snap.taken_at, notes=snap.notes), i


# --- what minting reads, kept as the pass writes -------------------------------------------------------------


def _slots(free) -> tuple:
    return (free.free, {n.name for n in free.nodes}, {d: [n.name for n in ns] for d, ns in free.by_domain.items()},
            free.domain_free)


class _Checked(PassState):
    """A pass that, after every write, holds what it keeps for minting (``free_slots``, ``candidates``) equal
    to what it would make again from its view."""

    checked = 0

    def emit(self, write) -> None:
        super().emit(write)
        for flavor, scope in list(self._free_slots):
            kept = self.free_slots(flavor, scope)
            fresh = FreeSlots.of(PassState(self.snap, self.at, self.options), flavor, scope)
            assert _slots(kept) == _slots(fresh), (write.cause, flavor, scope)
            assert [n.name for n in kept.nodes] == [n.name for n in fresh.nodes], write.cause  # in their order
            _Checked.checked += 1


@settings(PROPERTIES, max_examples=80)
@given(fleets())
def test_the_free_slots_minting_reads_are_after_each_write_those_of_the_view(snap):
    """``PassState.free_slots`` (free_slots.FreeSlots: the candidate nodes with a free ordinal, their ordinals,
    the domains' free slots) is made once and caught up on the nodes each write moved: after every write it is
    what a new pass state makes from the view, and the pass writes what it wrote without the checks."""
    state = _Checked(snap, NOW, LedgerOptions())
    assert run_pass(state) == plan_ledger(snap, NOW)


def test_the_free_slots_checks_ran():
    """The property above checked something: on a 200-run scale fleet, where the pass mints 160 leases."""
    from datetime import UTC, datetime

    from bench import scale_fleet
    from kubectl_runs.sources.files import load_file

    now = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
    doc = scale_fleet.snapshot_document(2, now, scale_fleet.COLD_BUDGET)
    snap = load_file("fleet.json", json.dumps(doc).encode())
    _Checked.checked = 0
    state = _Checked(snap, now, LedgerOptions())
    assert run_pass(state) == plan_ledger(snap, now)
    assert _Checked.checked > 100, _Checked.checked
