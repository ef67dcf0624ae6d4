"""engine/evaluation.py on random fleets (hypothesis): what a batch of plans shares is computed once and is
exactly what each stage function computes from the snapshot alone; planning every run of a fleet with one
``Evaluation`` gives the very plans that planning each run alone gives; and the reconciler's batched status
writes (one Evaluation for every object) are the writes it makes object by object (a fresh Evaluation each).

The fleets are test_plan_properties's (1-3 fabric domains, leases of runs of the family and of an outsider,
funded or not, Active or Spare, elastic, with ETAs; Budgets with windows open or opening later, an outsider that
may lend), plus 1-4 planned runs in any of the namespaces — grouped, with spares, elastic, borrowing, of a flavor
no node offers, finished — some with a pending Reservation whose scope may name a domain, and a Reservation
already activated.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
from builders import reservation, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_plan_properties import NOW, fleets, runs
from test_reconciler_status import stored_after

from kubectl_runs.engine.accounting import ledger
from kubectl_runs.engine.evaluation import Evaluation
from kubectl_runs.engine.funding import funding
from kubectl_runs.engine.packing import capacity, group_unit, open_leases
from kubectl_runs.engine.plan import choose_reservation, open_ledger, plan_run, reservation_of
from kubectl_runs.engine.releases import releases
from kubectl_runs.engine.remedies import remedy_candidates, scope_nodes
from kubectl_runs.engine.reports import plain
from kubectl_runs.model import Node, Run, Scope
from kubectl_runs.reconciler import status as recon_status
from kubectl_runs.reconciler.status import all_keys, status_writes

NAMESPACES = ["a", "t", "b", "x"]


@st.composite
def worlds(draw):
    """A fleet and the runs planned in it (by key)."""
    objects = draw(fleets())
    domains = sorted({o.domain for o in objects if isinstance(o, Node)} | {None}, key=str)
    planned: list[str] = []
    for i in range(draw(st.integers(1, 4))):
        manifest = msgspec.to_builtins(draw(runs()))
        namespace = draw(st.sampled_from(NAMESPACES))
        manifest["metadata"] = {"name": f"p{i}", "namespace": namespace}
        if draw(st.integers(0, 9)) == 0:
            manifest["spec"]["resources"]["gpuType"] = "B200"  # no node offers it: InvalidRequest
        if draw(st.integers(0, 9)) == 0:
            manifest["status"] = {"phase": "Succeeded"}
        objects.append(msgspec.convert(manifest, Run))
        planned.append(f"{namespace}/p{i}")
        if draw(st.booleans()):
            objects.append(reservation(
                f"p{i}-r1", namespace, run_name=f"p{i}", domain=draw(st.sampled_from(domains)),
                earliest_start=NOW + timedelta(hours=draw(st.integers(-2, 30))),
            ))
            if draw(st.booleans()):
                objects.append(reservation(f"p{i}-r0", namespace, run_name=f"p{i}", state="Activated",
                                           earliest_start=NOW - timedelta(hours=3)))
    return objects, planned


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(world=worlds(), order=st.randoms(use_true_random=False))
def test_one_evaluation_for_every_run_gives_each_run_its_own_plan(world, order):
    objects, _planned = world
    fleet = snapshot(*objects)
    shared = Evaluation(fleet, NOW)
    every = list(fleet.runs)
    order.shuffle(every)  # whatever was planned before with the same Evaluation
    for run in every:
        batched = plan_run(fleet, run, NOW, evaluation=shared)
        alone = plan_run(fleet, run, NOW)
        assert batched == alone, run.key
        assert plain(batched.report) == plain(alone.report), run.key


@SETTINGS
@given(world=worlds(), seed=st.sampled_from([None, "0x5eed", "0x00ff"]))
def test_every_shared_value_is_what_the_stage_function_computes(world, seed):
    """Each value an Evaluation hands a plan, after it has served every other run, against the stage function
    called on the snapshot with nothing precomputed."""
    objects, _planned = world
    fleet = snapshot(*objects)
    shared = Evaluation(fleet, NOW)
    for run in fleet.runs:  # warm every cache
        plan_run(fleet, run, NOW, evaluation=shared)
    leases, book = open_ledger(fleet, NOW)
    assert list(shared.open) == leases
    assert shared.book == book
    domains = sorted({n.domain for n in fleet.nodes} | {None}, key=str)
    for run in fleet.runs:
        assert shared.leases_of(run.key) == [x for x in leases if x.run_key == run.key]
        assert shared.charges_of(run.key) == book.charges_of_run(run.key)
        assert shared.reservations_of(run.key) == [r for r in fleet.reservations if r.spec.run_ref.key == run.key]
        spec = run.spec
        group_gpus = spec.locality.group_gpus if spec.locality else None
        unit = group_unit(group_gpus, spec.spares_per_group)
        spread = spec.locality.allow_cross_group_spread if spec.locality else True
        for flavor in ("H100", "B200"):
            for domain in domains:
                room = shared.capacity(flavor, domain=domain, unit=unit, spread=spread)
                assert room == capacity(fleet, leases, flavor, domain=domain, unit=unit, spread=spread)
                assert shared.funding(run, room) == funding(book, run, list(room.nodes)), (run.key, flavor, domain)
                scope = Scope(flavor=flavor, domain=domain)
                for exclude in (run.key, None):
                    assert shared.remedy_candidates(scope, exclude_run=exclude, seed=seed) == remedy_candidates(
                        fleet, book, scope, exclude_run=exclude, seed=seed)
                    assert shared.releases(scope, exclude_run=exclude) == releases(
                        fleet, book, scope_nodes(fleet, scope), NOW, exclude_run=exclude)
        for pending_only in (True, False):
            assert choose_reservation(shared.reservations_of(run.key), run, pending_only=pending_only) == (
                reservation_of(fleet, run, pending_only=pending_only))


@SETTINGS
@given(world=worlds(), earlier=st.integers(0, 40), dropped=st.sets(st.integers(0, 30), max_size=8))
def test_the_batched_status_writes_are_the_writes_made_object_by_object(world, earlier, dropped):
    """status_writes over every Budget, Run and Reservation with one Evaluation == status_writes of each object
    alone (a fresh Evaluation, so nothing is shared), in the same order — from nothing stored, and from what a
    pass ``earlier`` hours before stored, some of it lost."""
    objects, _planned = world
    fleet = snapshot(*objects)
    keys = sorted(all_keys(fleet))
    before = stored_after(status_writes(fleet, NOW - timedelta(hours=earlier), {}))
    before = {k: v for i, (k, v) in enumerate(sorted(before.items())) if i not in dropped}
    for stored in ({}, before):
        batched = status_writes(fleet, NOW, stored)
        alone = [w for key in keys for w in status_writes(fleet, NOW, stored, [key])]
        assert batched == alone
        if not stored:  # every Budget and Run gets its first status
            assert {(w.kind, w.namespace, w.name) for w in batched} >= {k for k in keys if k[0] != "Reservation"}


def test_an_evaluation_serves_only_its_own_snapshot_and_instant():
    fleet = snapshot()
    other = snapshot()
    shared = Evaluation(fleet, NOW)
    run = msgspec.convert({"kind": "Run", "metadata": {"name": "r", "namespace": "a"},
                           "spec": {"resources": {"gpuType": "H100", "totalGPUs": 1}}}, Run)
    for world, when in ((other, NOW), (fleet, NOW + timedelta(seconds=1))):
        try:
            plan_run(world, run, when, evaluation=shared)
        except ValueError as exc:
            assert "only the snapshot and instant" in str(exc)
        else:
            raise AssertionError("a plan of another snapshot or instant used the Evaluation")


def test_the_reconcilers_evaluation_reads_the_full_ledger():
    """The Budgets' consumed GPU-hours need the closed leases: the reconciler's book is ``ledger(snapshot, at)``,
    the engine's the open leases' (same headroom and classes)."""
    from builders import T0, budget, envelope, lease, node

    fleet = snapshot(node("n1"), budget(envelopes=[envelope(concurrency=8)]),
                     lease("old", gpus=2, node_name="n1", start=T0, ended=T0 + timedelta(hours=2)),
                     lease("now", gpus=2, node_name="n1", start=T0 + timedelta(hours=1), slot_list=["n1#4", "n1#5"]))
    at = T0 + timedelta(hours=5)
    full = recon_status.Evaluation(fleet, at).book
    assert full == ledger(fleet, at)
    assert Evaluation(fleet, at).book.envelopes[("team", "b", "west")].consumed_seconds == 2 * 4 * 3600
    assert full.envelopes[("team", "b", "west")].consumed_seconds == 2 * 2 * 3600 + 2 * 4 * 3600
    assert open_leases(fleet, at) == [x for x in fleet.leases if x.metadata.name == "now"]


def test_what_one_plan_takes_is_not_taken_from_the_next():
    """The Active GPUs each run holds are shared; a plan's remedies count what its reclaims take off them on a
    copy. Elastic run e holds groups 0-2 (2 GPUs each, min 2, step 2), group 2 unfunded: ReclaimUnfunded takes
    group 2, then Shrink drops group 1 (4 -> 2) — for every run planned, however many plans came before."""
    from builders import T0, budget, envelope, lease, node, run

    e = run("e", gpus=6, group_gpus=2, malleable={"minTotalGPUs": 2, "maxTotalGPUs": 6, "stepGPUs": 2})
    fleet = snapshot(
        node("n1"), budget(envelopes=[envelope(concurrency=8)]), e,
        *(lease(f"e-g{g}", run_name="e", group=g, slot_list=[f"n1#{2 * g}", f"n1#{2 * g + 1}"], start=T0,
                paid_by=None if g == 2 else ("b", "west")) for g in range(3)),
    )
    shared = Evaluation(fleet, NOW)
    scope = Scope(flavor="H100")
    fresh = remedy_candidates(fleet, open_ledger(fleet, NOW)[1], scope, exclude_run="team/other")
    assert [g.key for g in fresh.reclaim] == [("team/e", 2)]
    assert [(s.run, s.from_gpus, s.to_gpus) for s in fresh.shrinks] == [("team/e", 4, 2)]
    for _ in range(3):
        assert shared.remedy_candidates(scope, exclude_run="team/other") == fresh
