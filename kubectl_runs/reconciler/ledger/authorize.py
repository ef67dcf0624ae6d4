"""Stage 3: refuse the pending Reservations the reconciler did not make and no admin approved."""

from __future__ import annotations

from .holdings import authorized, pending
from .options import APPROVAL_ANNOTATION, APPROVED, FAILED, MANAGED_BY, MANAGED_BY_LABEL
from .pass_state import PassState


def refuse_unauthorized(state: PassState) -> None:
    """A Reservation is the right to preempt: only those the reconciler made (label
    ``app.kubernetes.io/managed-by: kubectl-runs-reconciler``) or an admin approved (annotation
    ``jobtree.dev/preemption: approved``) are ever activated. Any other pending one is Failed at once, takes
    nothing, and its Run is queued like any other (it gets the reconciler's own Reservation)."""
    for reservation in sorted(state.snap.reservations, key=lambda r: r.key):
        if pending(reservation) and not authorized(reservation):
            state.settle(
                reservation, FAILED, "NotAuthorized",
                f"neither made by the reconciler (label {MANAGED_BY_LABEL}: {MANAGED_BY}) nor approved by an "
                f"admin (annotation {APPROVAL_ANNOTATION}: {APPROVED}): it takes nothing",
            )
