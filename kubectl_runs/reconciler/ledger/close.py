"""Stage 1: close the open leases of finished Runs (``Completed``) and of deleted ones (gone, or marked for
deletion: ``RunDeleted``), ``ended`` = the pass's instant (never before the lease's start)."""

from __future__ import annotations

from ...model import GPULease
from ...timeutil import rfc3339
from ..actions import PatchStatus
from .options import COMPLETED, RUN_DELETED
from .pass_state import PassState


def close_finished(state: PassState) -> None:
    runs = state.snap.runs_by_key
    closing = []
    for run_key, leases in state.snap.leases_by_run.items():  # one look-up per Run, not per lease
        run = runs.get(run_key)
        if run is None or run.metadata.deletion_timestamp is not None:
            reason, why = RUN_DELETED, f"run {run_key} was deleted"
        elif run.finished:
            reason, why = COMPLETED, f"run {run_key} {run.status.phase}"
        else:
            continue
        closing += [(lease.key, lease, reason, why) for lease in leases if not lease.status.closed]
    for _, lease, reason, why in sorted(closing, key=lambda c: c[0]):  # by lease, as they are listed
        state.emit(PatchStatus(
            kind="GPULease", namespace=lease.namespace, name=lease.name,
            status={"closed": True, "ended": ended(state, lease), "closureReason": reason},
            cause=f"{reason}: close {lease.key} ({lease.gpus} GPUs): {why}",
        ))


def ended(state: PassState, lease: GPULease) -> str:
    """A closure's ``ended``: the pass's instant, never before the lease started."""
    return rfc3339(max(state.at, lease.spec.start))
