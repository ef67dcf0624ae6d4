"""Stage 2: finish recorded activations. An Activated Reservation whose recorded actions name leases that are
still open gets their closures *from the record* (closureReason, ended, preemption {reservation, seed}); its
victim Runs get the ``status.preemptions`` entry; and the Run it was for is admitted on the freed GPUs at once.
Nothing recorded is ever decided again: this is what a pass does after a crash between the decision and its
closures, and what activation (stage 4) does right after writing its decision."""

from __future__ import annotations

from typing import Any

import msgspec

from ...engine.lottery import CLOSURE_REASON, LOTTERY, PREEMPTING_KINDS, is_activated
from ...model import Reservation
from ...timeutil import rfc3339
from ..actions import PatchStatus
from .admit import admit_one, release_started
from .close import ended
from .holdings import TAKEN, below_start, held, live
from .pass_state import PassState


def finish_recorded(state: PassState, only: Reservation | None = None) -> None:
    reservations = [only] if only is not None else sorted(state.snap.reservations, key=lambda r: r.key)
    for reservation in reservations:
        activation = reservation.status.activation
        if activation is None or not is_activated(reservation):
            continue
        seed = activation.seed
        for action in activation.actions:
            lease = state.snap.leases_by_key.get(action.lease)
            reason = CLOSURE_REASON.get(action.kind)
            if lease is None or reason is None or lease.status.closed:
                continue
            status: dict[str, Any] = {"closed": True, "ended": ended(state, lease), "closureReason": reason}
            preempts = action.kind in PREEMPTING_KINDS
            if preempts:
                status["preemption"] = {"reservation": reservation.key, "seed": seed}
            tag = f"{reason}({seed})" if preempts else reason
            ticket = ""
            if action.kind == LOTTERY:
                entry = next((e for e in activation.conflict_set
                              if (e.run, e.group) == (action.run, action.group)), None)
                ticket = f", ticket {entry.ticket[:16]}" if entry is not None else ""
            state.emit(PatchStatus(
                kind="GPULease", namespace=lease.namespace, name=lease.name, status=status,
                cause=f"{tag} by {reservation.key}: close {lease.key} ({lease.gpus} GPUs of {action.run} "
                      f"group {action.group}{ticket})",
            ))
        record_on_runs(state, reservation)
        admit_reserving(state, reservation)


def admit_reserving(state: PassState, reservation: Reservation) -> None:
    """The GPUs an activation freed go to the Run it was for, at once, before any other decision of the pass
    (also when a pass cut short resumes from the record: the decision was recent and the Run still lacks
    its start width). Its victims are those that lost a lease to an activation at this instant."""
    activation = reservation.status.activation
    decided = activation.decided_at if activation is not None else None
    if decided is None or state.at - decided > state.options.unknown_forecast_delay:
        return
    for lease in state.snap.leases:
        status = lease.status
        if status.closed and status.ended == state.at and status.closure_reason in TAKEN:
            state.victims.setdefault(lease.run_key, set()).update(lease.spec.slice.slots)
    run = state.snap.runs_by_key.get(reservation.spec.run_ref.key)
    if run is not None and live(run):
        # even when an earlier activation of this instant took from it: the resolver counted the slots it lost
        # then (and no one used) as free for it, so its own Reservation may give them back to it. Its start
        # width only: growing comes with everyone else's admission (the GPUs were taken to start it)
        holding = held(state.snap, run, state.at)
        if holding.active and not below_start(run, holding):
            return  # started already (a decision that took nothing, or a pass resumed after its leases)
        state.serving = run.key
        try:
            release_started(state, run.key)
            admit_one(state, state.snap.runs_by_key[run.key], start_only=True)
        finally:
            state.serving = None


def record_on_runs(state: PassState, reservation: Reservation) -> None:
    """Each victim Run's ``status.preemptions`` gets the activation's entry (once)."""
    activation = reservation.status.activation
    taken: dict[str, int] = {}
    for action in activation.actions:
        if action.kind in PREEMPTING_KINDS:
            taken[action.run] = taken.get(action.run, 0) + action.gpus
    for run_key, gpus in sorted(taken.items()):
        run = state.snap.runs_by_key.get(run_key)
        if run is None:
            continue
        had = run.status.preemptions
        if any((p.reservation, p.seed) == (reservation.key, activation.seed) for p in had):
            continue
        entries = [msgspec.to_builtins(p) for p in had]
        entries.append({"reservation": reservation.key, "seed": activation.seed,
                        "at": rfc3339(activation.at), "gpus": gpus})
        state.emit(PatchStatus(
            kind="Run", namespace=run.namespace, name=run.name, status={"preemptions": entries},
            cause=f"preempted by {reservation.key} (seed {activation.seed}): {gpus} GPUs of {run_key}",
        ))
