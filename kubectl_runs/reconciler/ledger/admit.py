"""Stage 5: admit Runs — Runs with an Activated Reservation first, then oldest first, the victims of this
instant's activations last and never onto the slots they lost. A Run that is not finished, not blocked
(InvalidRequest, UnboundNamespace) and whose plan (``engine/plan.plan_run``) has no deficit gets the GPULeases
its plan needs (``minting.Minting``: concrete slots, payers, names). An elastic Run starts at its start width
and, when more fits, grows toward ``desiredTotalGPUs`` in the same pass (reason ``Grow``): all the way when its
plan for that width has no deficit and its groups place, else by as many whole ``stepGPUs`` as fit."""

from __future__ import annotations

from ...engine.plan import plan_run
from ...model import Run
from ..actions import Create
from .holdings import below_start, full, held, live, pending, start_width, unfinished_width
from .minting import Minting
from .options import ACTIVATED, FAR, RELEASED
from .pass_state import PassState


def admit(state: PassState) -> None:
    activated = {r.spec.run_ref.key for r in state.snap.reservations if r.status.state == ACTIVATED}
    order = sorted(
        (r for r in state.snap.runs if live(r)),
        key=lambda r: (r.key not in activated, r.metadata.creation_timestamp or FAR, r.key),
    )
    # a victim of this pass queues behind every other Run, and never onto the slots it just lost
    for run in sorted(order, key=lambda r: r.key in state.victims):
        admit_run(state, run.key)


def admit_run(state: PassState, run_key: str) -> None:
    for _ in range(2):  # start, then grow toward the desired width
        release_started(state, run_key)
        if not admit_one(state, state.snap.runs_by_key[run_key]):
            break


def release_started(state: PassState, run_key: str) -> None:
    """A run that holds its start width has no use for a Pending Reservation (nor for its scope, which would
    keep its growth in one domain)."""
    snap = state.snap
    if state.waiting is None or state.waiting[0] is not snap:
        state.waiting = (snap, {r.spec.run_ref.key for r in snap.reservations if pending(r)})
    if run_key not in state.waiting[1]:
        return
    run = snap.runs_by_key[run_key]
    holding = held(snap, run, state.at)
    if below_start(run, holding) or not holding.active:
        return
    for reservation in sorted(snap.reservations, key=lambda r: r.key):
        if reservation.spec.run_ref.key == run_key and pending(reservation):
            state.settle(reservation, RELEASED, "Started", f"run {run_key} started without it")


def admit_one(state: PassState, run: Run, *, start_only: bool = False) -> bool:
    """Mint the leases of one step of ``run`` (its start width, the rest of a half-minted width, or growth);
    False when there is nothing to mint or it does not place and fund. ``start_only``: no width above its start
    width (an activation's admission: growing comes with everyone else's)."""
    snap = state.snap
    holding = held(snap, run, state.at)
    if full(run, holding):
        return False
    ev = state.evaluation()
    book = ev.book
    plan = plan_run(snap, run, state.at, evaluation=ev)
    if plan.blocked is not None:
        return False
    widths = [plan.planned_width] if plan.need > 0 and plan.deficit == 0 else []
    unfinished = unfinished_width(run, holding)
    if unfinished is not None and unfinished not in widths:
        # It holds part of a group, or fewer groups than its start width (a pass cut short, a group lost):
        # the plan counts whole groups only, so whether the rest fits is the placement's to say.
        widths.append(unfinished)
    elif plan.growing:
        # Not all the way to desiredTotalGPUs: as many whole steps as fit, largest first. Also when the plan
        # has no deficit: the plan counts capacity in any domain, but groups kept in one domain
        # (allowCrossGroupSpread: false) must grow where the run already is, so the full width may not place
        # now and fit one pass later, once other runs' leases changed the plan (the pass would not converge).
        malleable = run.spec.malleable
        held_gpus = holding.total_active
        widths += [w for w in range(malleable.min_total_gpus, plan.planned_width, malleable.step_gpus)
                   if w > held_gpus][::-1]
    if start_only:
        widths = [w for w in widths if w <= start_width(run)]
    for width in widths:
        minted = Minting(state, run, plan, book, width).compute()
        if minted is None:
            continue
        for body, cause in minted:
            meta = body["metadata"]
            state.emit(Create(kind="GPULease", namespace=meta["namespace"], name=meta["name"], body=body,
                              cause=cause))
        return True
    return False
