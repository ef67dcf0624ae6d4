"""The ledger keeper of ``kubectl runs reconcile --manage-leases``: (snapshot, at) -> the writes that keep the
GPULease ledger and the Reservations (API.md §1, §3, §4, §6). Pure: no clock, no I/O; ``reconciler/apply.py``
turns the writes into API calls.

One pass, in this order, each stage a function of the one pass state (``pass_state.PassState``: the snapshot,
the instant, the options, the writes so far and the view they make) and seeing the writes of the stages before
it (``writes.apply_writes``): ``close``, ``finish``, ``authorize``, ``activate``, ``admit`` (placement and
payers in ``minting``), ``reserve``; ``holdings`` is what a Run holds and lacks, ``options`` the options and
the names written.

1. **Close** the open leases of finished Runs (phase Succeeded/Failed: ``Completed``) and of deleted Runs (gone,
   or marked for deletion: ``RunDeleted``), ``ended`` = at. A closed lease is never closed again.
2. **Finish recorded activations.** An Activated Reservation whose recorded actions name leases that are still
   open gets their closures *from the record* (closureReason, ended, preemption {reservation, seed}); its victim
   Runs get the ``status.preemptions`` entry. Nothing recorded is ever decided again: this is what a pass does
   after a crash between the decision and its closures.
3. **Refuse** the pending Reservations it did not make (label ``app.kubernetes.io/managed-by:
   kubectl-runs-reconciler``) and no admin approved (annotation ``jobtree.dev/preemption: approved``): Failed,
   reason ``NotAuthorized``, nothing taken. A Reservation is the right to preempt.
4. **Activate** each Pending Reservation whose ``earliestStart`` has come (earliest first) with
   ``engine/resolver.resolve``, evaluated at ``earliestStart`` — not the wall clock — so the seed is the one
   ``plan`` already shows and anyone can derive it; the protection windows (``engine/protection.py``) are those
   of the pass's instant. The resolver takes the shortest prefix of the remedies after which the Run starts, or
   nothing: Failed with ``NotEnoughToFree`` / ``NotPlaceable`` / ``NotFunded``; or, when only Runs about to
   finish stand in the way, Pending with ``AwaitingRelease``. The decision is written first (state Activated
   and ``status.activation``), then step 2's closures follow from the record, then the Run is admitted on the
   freed GPUs before anything else. A Reservation whose Run finished or was deleted before it activated is
   Released.
5. **Admit** Runs (Runs with an Activated Reservation first, then oldest first, the victims of this instant's
   activations last and never onto the slots they lost): a Run that is not finished,
   not blocked (InvalidRequest, UnboundNamespace) and whose plan (``engine/plan.plan_run``) has no deficit gets
   the GPULeases its plan needs, one lease per (group, role, payer): slots from a concrete placement that
   follows ``engine/packing`` (a group and its spares inside one fabric domain; without cross-group spread all
   groups in one domain), payers from the funding walk (``engine/funding``). An elastic Run starts at its start
   width and, when more fits, grows toward ``desiredTotalGPUs`` in the same pass (reason ``Grow``): all the way
   when its plan for that width has no deficit and its groups place, else by as many whole ``stepGPUs`` as can
   be placed and funded.
6. **Reserve**: a Run that still cannot start gets one Reservation (``<run>-r<n>``, with the reconciler's
   label), unless one is Pending or the Run lost GPUs to a lottery within the victim protection; a Pending
   Reservation whose Run has started, finished or is gone is Released. A Reservation never falls due in the
   pass that made it (``settle_delay``), so applying a pass's writes and planning again at the same instant
   gives no writes, and the victims of one activation cannot set off another in the same pass.

Choices (docs/reconciler.md says the same for admins):

- **Lease names** are ``<run>-g<group>-<role>-<n>`` (role ``active``/``spare``), ``n`` = the number of the Run's
  leases of that group and role that exist already (open or closed), skipping a name another object holds.
  A crash after some of a Run's writes leaves fewer leases; the next pass recomputes the missing ones with the
  same numbers — the same names — so a lease that was in fact created (a cache that had not seen it yet) is an
  AlreadyExists, never a second lease. Labels: ``jobtree.dev/run``, ``jobtree.dev/group``, ``jobtree.dev/role``.
- **A group funded by several envelopes is split**: the funding walk's sources are taken in order, and a group
  whose GPUs straddle two sources gets one lease per payer (same group, next ``n``). Among the sources, those
  whose selector matches every node of the group come first; the others only when those do not cover it (the
  plan counts an envelope whose selector matches any candidate node, so admission never waits on this).
- **Placement**: groups in index order; a group goes to the domain the Run already uses (then the activated
  Reservation's domain, then the domain with the most free GPUs); inside a domain, a group's slots continue on
  the nodes the group already holds, else on the node that fits the group most tightly, else on nodes with
  the most free GPUs first; ordinals ascending. Every choice depends only on what is free and what the Run
  holds, so finishing a half-minted Run gives the slots the whole pass would have given.
- **Lease reason**: ``Start`` for the GPUs of the start width (groups below it), ``Grow`` above it.
- **Reservations**: scope = the Run's flavor, and a fabric domain only when its groups need one domain
  (``allowCrossGroupSpread: false``: the best domain of the plan); ``payingEnvelope`` = the first envelope of the
  funding walk with headroom (else the first window to open); ``earliestStart`` = the plan's forecast (at least
  ``at + settle_delay``, default 10 s: a forecast of "now" means the gentle remedies suffice). When the
  forecast is ``unknown``: a Run short of capacity only (funding covers it) gets ``at + unknown_forecast_delay``
  (default 15 minutes: the lottery is the last resort, not the first); a Run short of funding gets no
  Reservation (taking GPUs from others does not fund it) until a forecast exists; a recent lottery victim gets
  none either (no chains of lotteries on a timer).
- **Activated stays Activated** after the Run starts: it is the record ``seeds verify`` reads. ``Released`` is
  for a Reservation that was not needed (its Run started before it, finished, or is gone).
"""

from __future__ import annotations

from datetime import datetime

from ...model import Snapshot
from ..actions import AnyWrite
from .activate import activate_due
from .admit import admit
from .authorize import refuse_unauthorized
from .close import close_finished
from .finish import finish_recorded
from .holdings import authorized
from .memory import PassMemory
from .options import (
    ACTIVATED,
    ACTIVE,
    APPROVAL_ANNOTATION,
    APPROVED,
    COMPLETED,
    FAILED,
    GROUP_LABEL,
    GROW,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PENDING,
    RELEASED,
    ROLE_LABEL,
    RUN_DELETED,
    RUN_LABEL,
    SPARE,
    START,
    LedgerOptions,
    second,
)
from .pass_state import PassState
from .reserve import reserve
from .writes import Objects, _Objects, apply_writes, merge_patch

__all__ = [
    "ACTIVATED", "ACTIVE", "APPROVAL_ANNOTATION", "APPROVED", "COMPLETED", "FAILED", "GROUP_LABEL", "GROW",
    "MANAGED_BY", "MANAGED_BY_LABEL", "PENDING", "RELEASED", "ROLE_LABEL", "RUN_DELETED", "RUN_LABEL", "SPARE",
    "START", "Keeper", "LedgerOptions", "Objects", "PassMemory", "PassState", "_Objects", "apply_writes",
    "authorized", "merge_patch", "plan_ledger", "run_pass", "second",
]


def plan_ledger(snapshot: Snapshot, at: datetime, options: LedgerOptions | None = None) -> list[AnyWrite]:
    """The writes that bring the lease ledger and the Reservations of ``snapshot`` up to date at ``at``."""
    return run_pass(PassState(snapshot, second(at), options or LedgerOptions()))


class Keeper:
    """``plan_ledger`` with the options of ``reconcile --manage-leases``, for a loop that runs one pass after the
    other: each pass starts from what the previous one computed when that still holds (``memory.PassMemory``).
    The writes are the very ones ``plan_ledger`` gives (tests/unit/test_ledger_incremental.py)."""

    def __init__(self, options: LedgerOptions | None = None):
        self.options = options or LedgerOptions()
        self.memory = PassMemory()

    def __call__(self, snapshot: Snapshot, at: datetime) -> list[AnyWrite]:
        at = second(at)
        state = PassState(snapshot, at, self.options, start=self.memory.start(snapshot, at))
        try:
            writes = run_pass(state)
        except BaseException:
            self.memory.remember(None, True)
            raise
        self.memory.remember(state.shared, bool(writes))
        return writes


def run_pass(state: PassState) -> list[AnyWrite]:
    """Every stage in order over ``state``; the writes."""
    close_finished(state)
    finish_recorded(state)
    refuse_unauthorized(state)
    activate_due(state)
    admit(state)
    reserve(state)
    return state.writes
