"""Stage 6: reserve. A Run that still cannot start gets one Reservation (``<run>-r<n>``, with the reconciler's
label), unless one is Pending or the Run lost GPUs to a lottery within the victim protection; a Pending
Reservation whose Run has started, finished or is gone is Released. A Reservation never falls due in the pass
that made it (``settle_delay``), so applying a pass's writes and planning again at the same instant gives no
writes, and the victims of one activation cannot set off another in the same pass.

``earliestStart`` = the plan's forecast (at least ``at + settle_delay``); when the forecast is ``unknown``: a
Run short of capacity only gets ``at + unknown_forecast_delay``; a Run short of funding gets none (taking GPUs
from others does not fund it) until a forecast exists. Scope = the Run's flavor, and a fabric domain only when
its groups need one domain; ``payingEnvelope`` = the first envelope of the funding walk with headroom (else the
first window to open)."""

from __future__ import annotations

from typing import Any

from ...engine.forecast import REPORTED, WINDOW_ALIGNED
from ...engine.packing import NO_DOMAIN, node_of
from ...engine.plan import Plan, plan_run
from ...engine.protection import recent_victims
from ...model import API_VERSION, Reservation, Run
from ...timeutil import rfc3339
from ..actions import Create, PatchStatus
from .holdings import NOTHING_STARTS, full, held, live, open_of, pending
from .options import (
    FAILED,
    FAR,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PENDING,
    RELEASED,
    RUN_LABEL,
    label_value,
    object_name,
    second,
)
from .pass_state import PassState


def reserve(state: PassState) -> None:
    # Each plan reads the current view (``plan_in_view``): the Reservations this stage writes are another Run's,
    # which no other Run's plan reads (a plan reads its own Run's Reservations, and only Activated ones count
    # for protections), so every plan is the one the view at the start of the stage gives.
    snap = state.snap
    waiting_for: dict[str, list[Reservation]] = {}
    for reservation in sorted(snap.reservations, key=lambda r: r.key):
        if pending(reservation):
            waiting_for.setdefault(reservation.spec.run_ref.key, []).append(reservation)
    for run_key, mine in waiting_for.items():
        run = snap.runs_by_key.get(run_key)
        if run is None or run.metadata.deletion_timestamp is not None:
            for r in mine:
                state.settle(r, RELEASED, "RunDeleted", f"run {run_key} is gone")
            continue
        if run.finished:
            for r in mine:
                state.settle(r, RELEASED, "RunFinished", f"run {run_key} {run.status.phase}")
            continue
        plan = plan_in_view(state, run)
        if plan.growing or plan.need == 0:
            for r in mine:
                state.settle(r, RELEASED, "Started", f"run {run_key} started without it")
        else:
            for r in mine:
                if r.status.state is None:  # created, its status not written yet (a crash, or this pass)
                    _pending_state(state, r)
    snap = state.snap
    waiting = {r.spec.run_ref.key for r in snap.reservations if pending(r)}
    # a Run that lost GPUs to a lottery within the protection window takes none by a Reservation either: it
    # starts when GPUs are free, so one arrival sets off at most one lottery, never a chain of them
    waiting |= recent_victims(snap, state.at, state.options.victim_protection)
    for run in sorted((r for r in snap.runs if live(r)), key=lambda r: (r.metadata.creation_timestamp or FAR, r.key)):
        if run.key in waiting:
            continue
        if full(run, held(snap, run, state.at)):
            continue
        plan = plan_in_view(state, run)
        if plan.blocked is not None or plan.need <= 0 or plan.deficit <= 0 or plan.growing:
            continue
        body = _reservation_body(state, run, plan)
        if body is None:
            continue
        meta = body["metadata"]
        state.emit(Create(
            kind="Reservation", namespace=meta["namespace"], name=meta["name"], body=body,
            cause=f"reserve for {run.key}: short by {plan.deficit} GPUs ({', '.join(plan.codes) or 'no reason'}); "
                  f"earliestStart {body['spec']['earliestStart']} ({plan.forecast.confidence})",
        ))
        _pending_state(state, state.snap.reservations_by_key[f"{meta['namespace']}/{meta['name']}"])


def plan_in_view(state: PassState, run: Run) -> Plan:
    """``plan_run`` of ``run`` in the pass's current view, with the Evaluation every plan of it shares."""
    return plan_run(state.snap, run, state.at, evaluation=state.evaluation())


def _pending_state(state: PassState, reservation: Reservation) -> None:
    state.emit(PatchStatus(
        kind="Reservation", namespace=reservation.namespace, name=reservation.name,
        status={"state": PENDING, "reason": "Waiting"},
        cause=f"pending {reservation.key}: activates at {rfc3339(reservation.spec.earliest_start)}",
    ))


def _reservation_body(state: PassState, run: Run, plan: Plan) -> dict | None:
    at, options = state.at, state.options
    outlook = plan.forecast
    if outlook.earliest_start is not None and outlook.confidence in (REPORTED, WINDOW_ALIGNED):
        start = max(at + options.settle_delay, second(outlook.earliest_start))
    elif plan.funding_deficit == 0:
        start = at + options.unknown_forecast_delay
    else:
        return None  # short of funding with no forecast: a lottery frees GPUs, not budget
    if any(r.spec.run_ref.key == run.key and r.status.state == FAILED and r.status.reason in NOTHING_STARTS
           and r.spec.earliest_start > at - options.unknown_forecast_delay
           for r in state.snap.reservations):
        # its last activation found nothing that would start it: not again in 10 s (plan's forecast counts
        # candidates the resolver may not take), but after the grace of an unknown forecast
        start = max(start, at + options.unknown_forecast_delay)
    spec: dict[str, Any] = {
        "runRef": {"namespace": run.namespace, "name": run.name},
        "scope": {"flavor": plan.flavor},
        "earliestStart": rfc3339(start),
    }
    domain = _reservation_domain(state, run, plan)
    if domain:
        spec["scope"]["domain"] = domain
    payer = next((s for s in plan.funding.sources if s.usable > 0), None)
    if payer is not None:
        spec["payingEnvelope"] = {"budget": payer.key[1], "envelope": payer.key[2]}
    elif outlook.opened:
        spec["payingEnvelope"] = {"budget": outlook.opened[0].key[1], "envelope": outlook.opened[0].key[2]}
    taken = {r.name for r in state.snap.reservations if r.namespace == run.namespace}
    mine = sum(1 for r in state.snap.reservations if r.spec.run_ref.key == run.key)
    number = mine + 1
    while object_name(run.name, f"-r{number}") in taken:
        number += 1
    name = object_name(run.name, f"-r{number}")
    return {
        "apiVersion": API_VERSION,
        "kind": "Reservation",
        "metadata": {"name": name, "namespace": run.namespace,
                     "labels": {RUN_LABEL: label_value(run.name), MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": spec,
    }


def _reservation_domain(state: PassState, run: Run, plan: Plan) -> str | None:
    locality = run.spec.locality
    if locality is None or not locality.group_gpus or locality.allow_cross_group_spread:
        return None
    nodes = state.snap.nodes_by_name
    for lease in open_of(state.snap, run, state.at):
        for slot in lease.spec.slice.slots:
            node = nodes.get(node_of(slot))
            if node is not None and node.domain:
                return node.domain
    best = plan.capacity.best_domain
    return best.domain if best is not None and best.domain != NO_DOMAIN else None
