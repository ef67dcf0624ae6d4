"""Stage 4: activate each Pending Reservation whose ``earliestStart`` has come (earliest first) with
``engine/resolver.resolve``, evaluated at ``earliestStart`` — not the wall clock — so the seed is the one
``plan`` already shows; the protection windows (engine/protection.py) are those of the pass's instant. The
decision is written first (state Activated and ``status.activation``), then stage 2's closures follow from the
record and the Run is admitted on the freed GPUs. Failed (``NotEnoughToFree`` / ``NotPlaceable`` /
``NotFunded``) when the resolver finds nothing that starts the Run; Pending ``AwaitingRelease`` when only Runs
about to finish stand in the way; Released when its Run finished or is gone."""

from __future__ import annotations

from datetime import datetime

import msgspec

from ...engine.lottery import activation_json
from ...engine.packing import open_leases
from ...engine.protection import FINISHING_SOON, protections
from ...engine.resolver import resolve
from ...model import Reservation, Snapshot
from ...timeutil import rfc3339
from ..actions import PatchStatus
from .admit import admit_one
from .finish import finish_recorded
from .holdings import below_start, held, pending
from .options import ACTIVATED, FAILED, PENDING, RELEASED
from .pass_state import PassState


def activate_due(state: PassState) -> None:
    for due in _due(state):
        reservation = state.snap.reservations_by_key.get(due.key)
        if reservation is None or not pending(reservation):  # settled earlier in this pass
            continue
        run = state.snap.runs_by_key.get(reservation.spec.run_ref.key)
        if run is None or run.metadata.deletion_timestamp is not None:
            state.settle(reservation, RELEASED, "RunDeleted", f"run {reservation.spec.run_ref.key} is gone")
            continue
        if run.finished:
            state.settle(reservation, RELEASED, "RunFinished",
                         f"run {run.key} {run.status.phase} before the reservation activated")
            continue
        when = reservation.spec.earliest_start
        view = as_of(state.snap, state.at, when)
        shield = protections(state.snap, state.at, state.options.windows)  # this pass's earlier decisions count
        if state.at > when + state.options.eta_grace:
            # a Reservation waits out one grace, not a reported ETA that keeps moving later
            shield = {k: p for k, p in shield.items() if p.reason != FINISHING_SOON}
        admits = _admits(state, run.key)
        resolution = resolve(view, reservation, when, protected=shield, admits=admits)
        if not resolution.placed:
            soon = [p for p in shield.values() if p.reason == FINISHING_SOON]
            rest = {k: p for k, p in shield.items() if p.reason != FINISHING_SOON}
            if soon and resolve(view, reservation, when, protected=rest, admits=admits).placed:
                _await(state, reservation, soon)
                continue
            state.settle(reservation, FAILED, resolution.failure,
                         f"at {rfc3339(when)} nothing was taken: {resolution.detail}")
            continue
        kinds: dict[str, int] = {}
        for action in resolution.actions:
            kinds[action.kind] = kinds.get(action.kind, 0) + action.gpus
        summary = ", ".join(f"{kind} {gpus}" for kind, gpus in kinds.items()) or "nothing to take"
        decision = PatchStatus(
            kind="Reservation", namespace=reservation.namespace, name=reservation.name,
            status={"state": ACTIVATED, "reason": "Activated",
                    "activation": activation_json(resolution.activation(decided_at=state.at))},
            cause=f"activate {reservation.key} at {rfc3339(when)} with seed {resolution.seed}: deficit "
                  f"{resolution.deficit_gpus} GPUs, conflict set {len(resolution.conflict_set)} groups"
                  f"{f', {len(resolution.protected)} runs protected' if resolution.protected else ''}, "
                  f"{summary}",
        )
        state.emit(decision)
        # then the closures: a crash in between is finished from the record by the next pass, never decided
        # again (and the loop sends nothing after a write that failed: each write assumes the ones before)
        finish_recorded(state, state.snap.reservations_by_key[reservation.key])


def _due(state: PassState) -> list[Reservation]:
    return sorted(
        (r for r in state.snap.reservations if pending(r) and r.spec.earliest_start <= state.at),
        key=lambda r: (r.spec.earliest_start, r.key),
    )


def _admits(state: PassState, run_key: str):
    """Admission itself, asked about a snapshot without some candidates' leases: would this pass mint the
    Run's start width there (its concrete placement and payers, not only the counts)?"""

    def admits(view: Snapshot) -> bool:
        trial = PassState(view, state.at, state.options)
        trial.serving = run_key
        run = view.runs_by_key.get(run_key)
        return run is not None and admit_one(trial, run) and not below_start(run, held(trial.snap, run, state.at))

    return admits


def _await(state: PassState, reservation: Reservation, soon: list) -> None:
    """Due, but the GPUs it needs are held by Runs that report they finish within the grace: it stays
    Pending and takes nothing until they finish or their grace ends."""
    names = ", ".join(f"{p.run} ({p.detail})" for p in soon)
    if reservation.status.reason == "AwaitingRelease" and reservation.status.state == PENDING:
        return
    state.emit(PatchStatus(
        kind="Reservation", namespace=reservation.namespace, name=reservation.name,
        status={"state": PENDING, "reason": "AwaitingRelease"},
        cause=f"pending {reservation.key}: due, but waits for {names} to finish by itself",
    ))


def as_of(snapshot: Snapshot, at: datetime, when: datetime) -> Snapshot:
    """The leases open now, as seen at ``when`` (an activation a little late): closed leases are gone, leases
    minted after ``when`` count from ``when``. What a resolver evaluated at ``when`` should take from."""
    current = []
    for lease in open_leases(snapshot, at):
        if lease.spec.start > when:
            lease = msgspec.structs.replace(lease, spec=msgspec.structs.replace(lease.spec, start=when))
        current.append(lease)
    return Snapshot(nodes=snapshot.nodes, budgets=snapshot.budgets, runs=snapshot.runs,
                    reservations=snapshot.reservations, leases=tuple(current), taken_at=snapshot.taken_at)
