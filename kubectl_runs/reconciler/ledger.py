"""The ledger keeper of ``kubectl runs reconcile --manage-leases``: (snapshot, at) -> the writes that keep the
GPULease ledger and the Reservations (API.md §1, §3, §4, §6). Pure: no clock, no I/O; ``reconciler/apply.py``
turns the writes into API calls.

One pass, in this order, each step seeing the writes of the steps before it (``apply_writes``):

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

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from ..engine.evaluation import Evaluation
from ..engine.forecast import REPORTED, WINDOW_ALIGNED
from ..engine.funding import FundingSource, funding
from ..engine.lottery import CLOSURE_REASON, LOTTERY, PREEMPTING_KINDS, activation_json, is_activated
from ..engine.packing import NO_DOMAIN, candidate_nodes, group_unit, node_of, open_leases
from ..engine.plan import Plan, open_ledger, plan_run
from ..engine.protection import FINISHING_SOON, Windows, protections, recent_victims
from ..engine.resolver import resolve
from ..model import API_VERSION, GPULease, Node, Reservation, Run, Snapshot
from ..timeutil import rfc3339
from .actions import AnyWrite, Create, PatchStatus

RUN_LABEL = "jobtree.dev/run"
MANAGED_BY_LABEL, MANAGED_BY = "app.kubernetes.io/managed-by", "kubectl-runs-reconciler"
APPROVAL_ANNOTATION, APPROVED = "jobtree.dev/preemption", "approved"
GROUP_LABEL = "jobtree.dev/group"
ROLE_LABEL = "jobtree.dev/role"

ACTIVE, SPARE = "Active", "Spare"
START, GROW = "Start", "Grow"
COMPLETED, RUN_DELETED = "Completed", "RunDeleted"
PENDING, ACTIVATED, RELEASED, FAILED = "Pending", "Activated", "Released", "Failed"
MAX_NAME = 253


@dataclass(frozen=True)
class LedgerOptions:
    unknown_forecast_delay: timedelta = timedelta(minutes=15)
    """earliestStart of a Reservation whose forecast is unknown (capacity short, funding covered): at + this."""
    settle_delay: timedelta = timedelta(seconds=10)
    """A Reservation's earliestStart is at least at + this (at least one second): it never activates in the pass
    that made it, so the victims of one activation cannot set off another in the same pass."""
    min_run_time: timedelta = Windows.min_run_time
    """A Run started through an activation is out of every lottery for this long (engine/protection.py)."""
    victim_protection: timedelta = Windows.victim_protection
    """A Run that lost a group to a lottery is out of every lottery for this long, and gets no Reservation."""
    eta_grace: timedelta = Windows.eta_grace
    """A Run whose reported completion is within this of the instant is not a victim: it frees its GPUs itself."""

    @property
    def windows(self) -> Windows:
        return Windows(self.min_run_time, self.victim_protection, self.eta_grace)

    def __post_init__(self) -> None:
        if self.settle_delay < timedelta(seconds=1):
            raise ValueError("settle_delay must be at least one second")
        if self.unknown_forecast_delay < self.settle_delay:
            raise ValueError("unknown_forecast_delay must be at least settle_delay")
        self.windows  # noqa: B018 - validates the protection windows


# --- applying writes to a snapshot (what the API server would do) -----------------------------------------------


_TYPES: dict[str, type] = {"GPULease": GPULease, "Reservation": Reservation, "Run": Run}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _patched(obj: Any, status: dict) -> Any:
    doc = msgspec.to_builtins(obj)
    doc["status"] = merge_patch(doc.get("status") or {}, status)
    return msgspec.convert(doc, type(obj))


class _Objects:
    """The Runs, Reservations and GPULeases of a snapshot by key, changed by writes as the API server would
    change them: a Create of a name that exists is a no-op (AlreadyExists), a patch of a missing object is
    skipped (NotFound), a Create drops any status (the status subresource)."""

    def __init__(self, snapshot: Snapshot):
        self.base = snapshot
        self.by_kind: dict[str, dict[str, Any]] = {
            "Run": {r.key: r for r in snapshot.runs},
            "Reservation": {r.key: r for r in snapshot.reservations},
            "GPULease": {x.key: x for x in snapshot.leases},
        }
        self._snapshot: Snapshot | None = snapshot

    def apply(self, write: AnyWrite) -> None:
        objects = self.by_kind.get(write.kind)
        if objects is None:
            return
        key = write.key
        if isinstance(write, Create):
            if key in objects:
                return
            body = {k: v for k, v in write.body.items() if k != "status"}
            objects[key] = msgspec.convert(body, _TYPES[write.kind])
        elif isinstance(write, PatchStatus):
            current = objects.get(key)
            if current is None:
                return
            objects[key] = _patched(current, write.status)
        else:
            return
        self._snapshot = None

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            base = self.base
            self._snapshot = Snapshot(
                nodes=base.nodes,
                budgets=base.budgets,
                runs=tuple(self.by_kind["Run"].values()),
                reservations=tuple(self.by_kind["Reservation"].values()),
                leases=tuple(self.by_kind["GPULease"].values()),
                taken_at=base.taken_at,
                notes=base.notes,
            )
        return self._snapshot


def apply_writes(snapshot: Snapshot, writes: Iterable[AnyWrite]) -> Snapshot:
    """The snapshot after ``writes``, applied as the API server applies them (tests; the pass's own view)."""
    objects = _Objects(snapshot)
    for write in writes:
        objects.apply(write)
    return objects.snapshot


# --- the pass -----------------------------------------------------------------------------------------------------


def plan_ledger(snapshot: Snapshot, at: datetime, options: LedgerOptions | None = None) -> list[AnyWrite]:
    """The writes that bring the lease ledger and the Reservations of ``snapshot`` up to date at ``at``."""
    return _Pass(snapshot, _second(at), options or LedgerOptions()).run()


def _second(at: datetime) -> datetime:
    """``at`` as the API stores times: UTC, whole seconds."""
    return at.astimezone(UTC).replace(microsecond=0)


@dataclass
class _Pass:
    origin: Snapshot
    at: datetime
    options: LedgerOptions
    writes: list[AnyWrite] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.objects = _Objects(self.origin)
        self._book: tuple | None = None
        self._waiting: tuple | None = None  # (view, keys of runs with a Pending Reservation)
        self.victims: dict[str, set[str]] = {}  # run -> slots it lost to an activation at this instant
        self.serving: str | None = None  # the run an activation is admitting right now

    # --- plumbing -------------------------------------------------------------------------------------------

    @property
    def snap(self) -> Snapshot:
        return self.objects.snapshot

    def evaluation(self) -> Evaluation:
        """What every plan of the current view shares (engine/evaluation.py: the open leases, their ledger, free
        capacity, funding inputs), computed once per view: planning every live run stays one pass over the
        leases, not one per run."""
        snap = self.snap
        if self._book is None or self._book[0] is not snap:
            leases, book = open_ledger(snap, self.at)
            self._book = (snap, Evaluation(snap, self.at, leases=leases, book=book))
        return self._book[1]

    def emit(self, write: AnyWrite) -> None:
        self.writes.append(write)
        self.objects.apply(write)

    def run(self) -> list[AnyWrite]:
        self.close_finished()
        self.finish_recorded()
        self.refuse_unauthorized()
        self.activate_due()
        self.admit()
        self.reserve()
        return self.writes

    def _due(self) -> list[Reservation]:
        return sorted(
            (r for r in self.snap.reservations if _pending(r) and r.spec.earliest_start <= self.at),
            key=lambda r: (r.spec.earliest_start, r.key),
        )

    # --- 1. close the leases of finished and deleted runs ---------------------------------------------------

    def close_finished(self) -> None:
        runs = self.snap.runs_by_key
        for lease in sorted(self.snap.leases, key=lambda x: x.key):
            if lease.status.closed:
                continue
            run = runs.get(lease.run_key)
            if run is None or run.metadata.deletion_timestamp is not None:
                reason, why = RUN_DELETED, f"run {lease.run_key} was deleted"
            elif run.finished:
                reason, why = COMPLETED, f"run {lease.run_key} {run.status.phase}"
            else:
                continue
            self.emit(PatchStatus(
                kind="GPULease", namespace=lease.namespace, name=lease.name,
                status={"closed": True, "ended": self._ended(lease), "closureReason": reason},
                cause=f"{reason}: close {lease.key} ({lease.gpus} GPUs): {why}",
            ))

    def _ended(self, lease: GPULease) -> str:
        return rfc3339(max(self.at, lease.spec.start))

    # --- 2. closures and run records from recorded activations ----------------------------------------------

    def finish_recorded(self, only: Reservation | None = None) -> None:
        reservations = [only] if only is not None else sorted(self.snap.reservations, key=lambda r: r.key)
        for reservation in reservations:
            activation = reservation.status.activation
            if activation is None or not is_activated(reservation):
                continue
            seed = activation.seed
            for action in activation.actions:
                lease = self.snap.leases_by_key.get(action.lease)
                reason = CLOSURE_REASON.get(action.kind)
                if lease is None or reason is None or lease.status.closed:
                    continue
                status: dict[str, Any] = {"closed": True, "ended": self._ended(lease), "closureReason": reason}
                preempts = action.kind in PREEMPTING_KINDS
                if preempts:
                    status["preemption"] = {"reservation": reservation.key, "seed": seed}
                tag = f"{reason}({seed})" if preempts else reason
                ticket = ""
                if action.kind == LOTTERY:
                    entry = next((e for e in activation.conflict_set
                                  if (e.run, e.group) == (action.run, action.group)), None)
                    ticket = f", ticket {entry.ticket[:16]}" if entry is not None else ""
                self.emit(PatchStatus(
                    kind="GPULease", namespace=lease.namespace, name=lease.name, status=status,
                    cause=f"{tag} by {reservation.key}: close {lease.key} ({lease.gpus} GPUs of {action.run} "
                          f"group {action.group}{ticket})",
                ))
            self._record_on_runs(reservation)
            self._admit_reserving(reservation)

    def _admit_reserving(self, reservation: Reservation) -> None:
        """The GPUs an activation freed go to the Run it was for, at once, before any other decision of the pass
        (also when a pass cut short resumes from the record: the decision was recent and the Run still lacks
        its start width). Its victims are those that lost a lease to an activation at this instant."""
        activation = reservation.status.activation
        decided = activation.decided_at if activation is not None else None
        if decided is None or self.at - decided > self.options.unknown_forecast_delay:
            return
        for lease in self.snap.leases:
            status = lease.status
            if status.closed and status.ended == self.at and status.closure_reason in _TAKEN:
                self.victims.setdefault(lease.run_key, set()).update(lease.spec.slice.slots)
        run = self.snap.runs_by_key.get(reservation.spec.run_ref.key)
        if run is not None and _live(run):
            # even when an earlier activation of this instant took from it: the resolver counted the slots it lost
            # then (and no one used) as free for it, so its own Reservation may give them back to it. Its start
            # width only: growing comes with everyone else's admission (the GPUs were taken to start it)
            held = _held(self.snap, run, self.at)
            if held.active and not _below_start(run, held):
                return  # started already (a decision that took nothing, or a pass resumed after its leases)
            self.serving = run.key
            try:
                self._release_started(run.key)
                self._admit_one(self.snap.runs_by_key[run.key])
            finally:
                self.serving = None

    def _record_on_runs(self, reservation: Reservation) -> None:
        activation = reservation.status.activation
        taken: dict[str, int] = {}
        for action in activation.actions:
            if action.kind in PREEMPTING_KINDS:
                taken[action.run] = taken.get(action.run, 0) + action.gpus
        for run_key, gpus in sorted(taken.items()):
            run = self.snap.runs_by_key.get(run_key)
            if run is None:
                continue
            had = run.status.preemptions
            if any((p.reservation, p.seed) == (reservation.key, activation.seed) for p in had):
                continue
            entries = [msgspec.to_builtins(p) for p in had]
            entries.append({"reservation": reservation.key, "seed": activation.seed,
                            "at": rfc3339(activation.at), "gpus": gpus})
            self.emit(PatchStatus(
                kind="Run", namespace=run.namespace, name=run.name, status={"preemptions": entries},
                cause=f"preempted by {reservation.key} (seed {activation.seed}): {gpus} GPUs of {run_key}",
            ))

    # --- 3. activate the reservations that are due ----------------------------------------------------------

    def refuse_unauthorized(self) -> None:
        """A Reservation is the right to preempt: only those the reconciler made (label
        ``app.kubernetes.io/managed-by: kubectl-runs-reconciler``) or an admin approved (annotation
        ``jobtree.dev/preemption: approved``) are ever activated. Any other pending one is Failed at once, takes
        nothing, and its Run is queued like any other (it gets the reconciler's own Reservation)."""
        for reservation in sorted(self.snap.reservations, key=lambda r: r.key):
            if _pending(reservation) and not authorized(reservation):
                self._settle(
                    reservation, FAILED, "NotAuthorized",
                    f"neither made by the reconciler (label {MANAGED_BY_LABEL}: {MANAGED_BY}) nor approved by an "
                    f"admin (annotation {APPROVAL_ANNOTATION}: {APPROVED}): it takes nothing",
                )

    def activate_due(self) -> None:
        for due in self._due():
            reservation = self.snap.reservations_by_key.get(due.key)
            if reservation is None or not _pending(reservation):  # settled earlier in this pass
                continue
            run = self.snap.runs_by_key.get(reservation.spec.run_ref.key)
            if run is None or run.metadata.deletion_timestamp is not None:
                self._settle(reservation, RELEASED, "RunDeleted", f"run {reservation.spec.run_ref.key} is gone")
                continue
            if run.finished:
                self._settle(reservation, RELEASED, "RunFinished",
                             f"run {run.key} {run.status.phase} before the reservation activated")
                continue
            when = reservation.spec.earliest_start
            view = _as_of(self.snap, self.at, when)
            shield = protections(self.snap, self.at, self.options.windows)  # this pass's earlier decisions count
            if self.at > when + self.options.eta_grace:
                # a Reservation waits out one grace, not a reported ETA that keeps moving later
                shield = {k: p for k, p in shield.items() if p.reason != FINISHING_SOON}
            admits = self._admits(run.key)
            resolution = resolve(view, reservation, when, protected=shield, admits=admits)
            if not resolution.placed:
                soon = [p for p in shield.values() if p.reason == FINISHING_SOON]
                rest = {k: p for k, p in shield.items() if p.reason != FINISHING_SOON}
                if soon and resolve(view, reservation, when, protected=rest, admits=admits).placed:
                    self._await(reservation, soon)
                    continue
                self._settle(reservation, FAILED, resolution.failure,
                             f"at {rfc3339(when)} nothing was taken: {resolution.detail}")
                continue
            kinds: dict[str, int] = {}
            for action in resolution.actions:
                kinds[action.kind] = kinds.get(action.kind, 0) + action.gpus
            summary = ", ".join(f"{kind} {gpus}" for kind, gpus in kinds.items()) or "nothing to take"
            decision = PatchStatus(
                kind="Reservation", namespace=reservation.namespace, name=reservation.name,
                status={"state": ACTIVATED, "reason": "Activated",
                        "activation": activation_json(resolution.activation(decided_at=self.at))},
                cause=f"activate {reservation.key} at {rfc3339(when)} with seed {resolution.seed}: deficit "
                      f"{resolution.deficit_gpus} GPUs, conflict set {len(resolution.conflict_set)} groups"
                      f"{f', {len(resolution.protected)} runs protected' if resolution.protected else ''}, "
                      f"{summary}",
            )
            self.emit(decision)
            # then the closures: a crash in between is finished from the record by the next pass, never decided
            # again (and the loop sends nothing after a write that failed: each write assumes the ones before)
            self.finish_recorded(self.snap.reservations_by_key[reservation.key])

    def _admits(self, run_key: str):
        """Admission itself, asked about a snapshot without some candidates' leases: would this pass mint the
        Run's start width there (its concrete placement and payers, not only the counts)?"""

        def admits(view: Snapshot) -> bool:
            trial = _Pass(view, self.at, self.options)
            trial.serving = run_key
            run = view.runs_by_key.get(run_key)
            return run is not None and trial._admit_one(run) and not _below_start(
                run, _held(trial.snap, run, self.at))

        return admits

    def _await(self, reservation: Reservation, soon: list) -> None:
        """Due, but the GPUs it needs are held by Runs that report they finish within the grace: it stays
        Pending and takes nothing until they finish or their grace ends."""
        names = ", ".join(f"{p.run} ({p.detail})" for p in soon)
        if reservation.status.reason == "AwaitingRelease" and reservation.status.state == PENDING:
            return
        self.emit(PatchStatus(
            kind="Reservation", namespace=reservation.namespace, name=reservation.name,
            status={"state": PENDING, "reason": "AwaitingRelease"},
            cause=f"pending {reservation.key}: due, but waits for {names} to finish by itself",
        ))

    def _settle(self, reservation: Reservation, state: str, reason: str, message: str) -> None:
        self.emit(PatchStatus(
            kind="Reservation", namespace=reservation.namespace, name=reservation.name,
            status={"state": state, "reason": reason},
            cause=f"{state.lower()} {reservation.key}: {message}",
        ))

    # --- 4. admit ---------------------------------------------------------------------------------------------

    def admit(self) -> None:
        activated = {r.spec.run_ref.key for r in self.snap.reservations if r.status.state == ACTIVATED}
        far = datetime.max.replace(tzinfo=UTC)
        order = sorted(
            (r for r in self.snap.runs if _live(r)),
            key=lambda r: (r.key not in activated, r.metadata.creation_timestamp or far, r.key),
        )
        # a victim of this pass queues behind every other Run, and never onto the slots it just lost
        for run in sorted(order, key=lambda r: r.key in self.victims):
            self._admit_run(run.key)

    def _admit_run(self, run_key: str) -> None:
        for _ in range(2):  # start, then grow toward the desired width
            self._release_started(run_key)
            if not self._admit_one(self.snap.runs_by_key[run_key]):
                break

    def _release_started(self, run_key: str) -> None:
        """A run that holds its start width has no use for a Pending Reservation (nor for its scope, which would
        keep its growth in one domain)."""
        snap = self.snap
        if self._waiting is None or self._waiting[0] is not snap:
            self._waiting = (snap, {r.spec.run_ref.key for r in snap.reservations if _pending(r)})
        if run_key not in self._waiting[1]:
            return
        run = snap.runs_by_key[run_key]
        held = _held(snap, run, self.at)
        if _below_start(run, held) or not held.active:
            return
        for reservation in sorted(snap.reservations, key=lambda r: r.key):
            if reservation.spec.run_ref.key == run_key and _pending(reservation):
                self._settle(reservation, RELEASED, "Started", f"run {run_key} started without it")

    def _admit_one(self, run: Run) -> bool:
        snap = self.snap
        held = _held(snap, run, self.at)
        if _full(run, held):
            return False
        ev = self.evaluation()
        book = ev.book
        plan = plan_run(snap, run, self.at, evaluation=ev)
        if plan.blocked is not None:
            return False
        widths = [plan.planned_width] if plan.need > 0 and plan.deficit == 0 else []
        unfinished = _unfinished_width(run, held)
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
            held_gpus = held.total_active
            widths += [w for w in range(malleable.min_total_gpus, plan.planned_width, malleable.step_gpus)
                       if w > held_gpus][::-1]
        for width in widths:
            minted = _Minting(self, run, plan, book, width).compute()
            if minted is None:
                continue
            for body, cause in minted:
                meta = body["metadata"]
                self.emit(Create(kind="GPULease", namespace=meta["namespace"], name=meta["name"], body=body,
                                 cause=cause))
            return True
        return False

    # --- 5. reserve -------------------------------------------------------------------------------------------

    def reserve(self) -> None:
        snap = self.snap
        ev = self.evaluation()
        pending: dict[str, list[Reservation]] = {}
        for reservation in sorted(snap.reservations, key=lambda r: r.key):
            if _pending(reservation):
                pending.setdefault(reservation.spec.run_ref.key, []).append(reservation)
        for run_key, mine in pending.items():
            run = snap.runs_by_key.get(run_key)
            if run is None or run.metadata.deletion_timestamp is not None:
                for r in mine:
                    self._settle(r, RELEASED, "RunDeleted", f"run {run_key} is gone")
                continue
            if run.finished:
                for r in mine:
                    self._settle(r, RELEASED, "RunFinished", f"run {run_key} {run.status.phase}")
                continue
            plan = plan_run(snap, run, self.at, evaluation=ev)
            if plan.growing or plan.need == 0:
                for r in mine:
                    self._settle(r, RELEASED, "Started", f"run {run_key} started without it")
            else:
                for r in mine:
                    if r.status.state is None:  # created, its status not written yet (a crash, or this pass)
                        self._pending_state(r)
        snap = self.snap
        ev = self.evaluation()
        waiting = {r.spec.run_ref.key for r in snap.reservations if _pending(r)}
        # a Run that lost GPUs to a lottery within the protection window takes none by a Reservation either: it
        # starts when GPUs are free, so one arrival sets off at most one lottery, never a chain of them
        waiting |= recent_victims(snap, self.at, self.options.victim_protection)
        far = datetime.max.replace(tzinfo=UTC)
        for run in sorted((r for r in snap.runs if _live(r)), key=lambda r: (r.metadata.creation_timestamp or far,
                                                                                 r.key)):
            if run.key in waiting:
                continue
            if _full(run, _held(snap, run, self.at)):
                continue
            plan = plan_run(snap, run, self.at, evaluation=ev)
            if plan.blocked is not None or plan.need <= 0 or plan.deficit <= 0 or plan.growing:
                continue
            body = self._reservation_body(run, plan)
            if body is None:
                continue
            meta = body["metadata"]
            self.emit(Create(
                kind="Reservation", namespace=meta["namespace"], name=meta["name"], body=body,
                cause=f"reserve for {run.key}: short by {plan.deficit} GPUs ({', '.join(plan.codes) or 'no reason'}); "
                      f"earliestStart {body['spec']['earliestStart']} ({plan.forecast.confidence})",
            ))
            self._pending_state(self.snap.reservations_by_key[f"{meta['namespace']}/{meta['name']}"])

    def _pending_state(self, reservation: Reservation) -> None:
        self.emit(PatchStatus(
            kind="Reservation", namespace=reservation.namespace, name=reservation.name,
            status={"state": PENDING, "reason": "Waiting"},
            cause=f"pending {reservation.key}: activates at {rfc3339(reservation.spec.earliest_start)}",
        ))

    def _reservation_body(self, run: Run, plan: Plan) -> dict | None:
        outlook = plan.forecast
        if outlook.earliest_start is not None and outlook.confidence in (REPORTED, WINDOW_ALIGNED):
            start = max(self.at + self.options.settle_delay, _second(outlook.earliest_start))
        elif plan.funding_deficit == 0:
            start = self.at + self.options.unknown_forecast_delay
        else:
            return None  # short of funding with no forecast: a lottery frees GPUs, not budget
        if any(r.spec.run_ref.key == run.key and r.status.state == FAILED and r.status.reason in _NOTHING_STARTS
               and r.spec.earliest_start > self.at - self.options.unknown_forecast_delay
               for r in self.snap.reservations):
            # its last activation found nothing that would start it: not again in 10 s (plan's forecast counts
            # candidates the resolver may not take), but after the grace of an unknown forecast
            start = max(start, self.at + self.options.unknown_forecast_delay)
        spec: dict[str, Any] = {
            "runRef": {"namespace": run.namespace, "name": run.name},
            "scope": {"flavor": plan.flavor},
            "earliestStart": rfc3339(start),
        }
        domain = self._reservation_domain(run, plan)
        if domain:
            spec["scope"]["domain"] = domain
        payer = next((s for s in plan.funding.sources if s.usable > 0), None)
        if payer is not None:
            spec["payingEnvelope"] = {"budget": payer.key[1], "envelope": payer.key[2]}
        elif outlook.opened:
            spec["payingEnvelope"] = {"budget": outlook.opened[0].key[1], "envelope": outlook.opened[0].key[2]}
        taken = {r.name for r in self.snap.reservations if r.namespace == run.namespace}
        mine = sum(1 for r in self.snap.reservations if r.spec.run_ref.key == run.key)
        number = mine + 1
        while _name(run.name, f"-r{number}") in taken:
            number += 1
        name = _name(run.name, f"-r{number}")
        return {
            "apiVersion": API_VERSION,
            "kind": "Reservation",
            "metadata": {"name": name, "namespace": run.namespace,
                         "labels": {RUN_LABEL: _label(run.name), MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": spec,
        }

    def _reservation_domain(self, run: Run, plan: Plan) -> str | None:
        locality = run.spec.locality
        if locality is None or not locality.group_gpus or locality.allow_cross_group_spread:
            return None
        nodes = self.snap.nodes_by_name
        for lease in _open_of(self.snap, run, self.at):
            for slot in lease.spec.slice.slots:
                node = nodes.get(node_of(slot))
                if node is not None and node.domain:
                    return node.domain
        best = plan.capacity.best_domain
        return best.domain if best is not None and best.domain != NO_DOMAIN else None


# --- helpers -------------------------------------------------------------------------------------------------------


_TAKEN = frozenset(CLOSURE_REASON.values())  # closures an activation makes
_NOTHING_STARTS = frozenset({"NotEnoughToFree", "NotPlaceable", "NotFunded"})  # Failed: what would start it


def authorized(reservation: Reservation) -> bool:
    """Made by the reconciler, or approved by an admin: the only Reservations that may preempt."""
    meta = reservation.metadata
    return meta.labels.get(MANAGED_BY_LABEL) == MANAGED_BY or meta.annotations.get(APPROVAL_ANNOTATION) == APPROVED


def _pending(reservation: Reservation) -> bool:
    return reservation.status.state in (None, PENDING) and not is_activated(reservation)


def _live(run: Run) -> bool:
    return not run.finished and run.metadata.deletion_timestamp is None


def _open_of(snapshot: Snapshot, run: Run, at: datetime) -> list[GPULease]:
    return [x for x in snapshot.leases_by_run.get(run.key, ()) if x.open_at(at)]


@dataclass(frozen=True)
class _Held:
    active: dict[int, int]  # group -> Active GPUs held
    spare: dict[int, int]  # group -> Spare GPUs held

    @property
    def total_active(self) -> int:
        return sum(self.active.values())


def _held(snapshot: Snapshot, run: Run, at: datetime) -> _Held:
    active: dict[int, int] = {}
    spare: dict[int, int] = {}
    for lease in _open_of(snapshot, run, at):
        into = active if lease.spec.slice.role == ACTIVE else spare
        into[lease.spec.group] = into.get(lease.spec.group, 0) + lease.gpus
    return _Held(active, spare)


def _shape(run: Run, width: int) -> list[int]:
    """Active GPUs of each group at ``width``: whole groups of ``groupGPUs`` (the last may be smaller), or one
    group of everything when the run has no groups."""
    locality = run.spec.locality
    g = locality.group_gpus if locality else None
    if not g:
        return [width]
    groups = -(-width // g)
    return [min(g, width - i * g) for i in range(groups)]


def _full(run: Run, held: _Held) -> bool:
    """A fixed-width run that holds every group of its width and their spares: nothing to plan (a shortcut
    that spares ``plan_run`` on a steady fleet)."""
    if run.spec.malleable is not None:
        return False
    shape = _shape(run, run.spec.resources.total_gpus)
    spares = run.spec.spares_per_group
    return all(held.active.get(i, 0) >= size and held.spare.get(i, 0) >= spares for i, size in enumerate(shape))


def _start_width(run: Run) -> int:
    malleable = run.spec.malleable
    return malleable.min_total_gpus if malleable is not None else run.spec.resources.total_gpus


def _below_start(run: Run, held: _Held) -> bool:
    """The run holds something, but not all of its start width and the spares of its start groups."""
    if not held.active and not held.spare:
        return False
    spares = run.spec.spares_per_group
    return any(held.active.get(i, 0) < size or held.spare.get(i, 0) < spares
               for i, size in enumerate(_shape(run, _start_width(run))))


def _unfinished_width(run: Run, held: _Held) -> int | None:
    """The width whose groups the run has begun but not finished, if any: its start width when it holds part
    of it, else (grown in groups) the width up to its highest group, when one of those lacks GPUs or spares."""
    if _below_start(run, held):
        return _start_width(run)
    locality = run.spec.locality
    g = locality.group_gpus if locality else None
    malleable = run.spec.malleable
    if not g or malleable is None or not held.active:
        return None
    top = min((max(held.active) + 1) * g, malleable.max_total_gpus)
    spares = run.spec.spares_per_group
    if any(held.active.get(i, 0) < size or held.spare.get(i, 0) < spares for i, size in enumerate(_shape(run, top))):
        return top
    return None


def _name(base: str, suffix: str) -> str:
    """``base + suffix`` within the 253 characters of a name (a long base is cut and given a hash)."""
    if len(base) + len(suffix) <= MAX_NAME:
        return base + suffix
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return base[: MAX_NAME - len(suffix) - 9].rstrip("-.") + "-" + digest + suffix


def _label(value: str) -> str:
    """A label value (63 characters at most)."""
    if len(value) <= 63:
        return value
    return value[:54].rstrip("-._") + "-" + hashlib.sha256(value.encode()).hexdigest()[:8]


def _as_of(snapshot: Snapshot, at: datetime, when: datetime) -> Snapshot:
    """The leases open now, as seen at ``when`` (an activation a little late): closed leases are gone, leases
    minted after ``when`` count from ``when``. What a resolver evaluated at ``when`` should take from."""
    current = []
    for lease in open_leases(snapshot, at):
        if lease.spec.start > when:
            lease = msgspec.structs.replace(lease, spec=msgspec.structs.replace(lease.spec, start=when))
        current.append(lease)
    return Snapshot(nodes=snapshot.nodes, budgets=snapshot.budgets, runs=snapshot.runs,
                    reservations=snapshot.reservations, leases=tuple(current), taken_at=snapshot.taken_at)


class _Minting:
    """The leases that give ``run`` what ``plan`` says it needs: placed group by group, paid source by source.
    ``compute`` returns (body, cause) pairs, or None when some group cannot be placed or funded (nothing is
    minted then)."""

    def __init__(self, owner: _Pass, run: Run, plan: Plan, book, width: int) -> None:
        self.pass_ = owner
        self.run = run
        self.plan = plan
        self.width = width
        self.book = book
        snap = owner.snap
        self.at = owner.at
        self.snap = snap
        flavor = run.spec.resources.gpu_type
        self.flavor = flavor
        self.domain_scope = plan.capacity.domain_scope
        self.nodes: list[Node] = candidate_nodes(snap, flavor, self.domain_scope)
        self.node_by_name = {n.name: n for n in self.nodes}
        self.all_nodes = snap.nodes_by_name
        used: set[str] = set()
        for lease in snap.leases:
            if not lease.status.closed or (lease.status.ended is not None and lease.status.ended > self.at):
                used.update(lease.spec.slice.slots)
        if owner.serving != run.key:  # what it lost in this pass went to the Run that took it
            used.update(owner.victims.get(run.key, ()))
        self.free: dict[str, list[int]] = {}
        for node in self.nodes:
            ordinals = [i for i in range(node.gpus) if f"{node.name}#{i}" not in used]
            self.free[node.name] = ordinals
        locality = run.spec.locality
        self.group_gpus = locality.group_gpus if locality else None
        self.spread = locality.allow_cross_group_spread if locality else True
        self.spares = run.spec.spares_per_group
        self.unit = group_unit(self.group_gpus, self.spares)
        # what the run holds: slots by group (open leases)
        self.group_slots: dict[int, list[str]] = {}
        self.held_active: dict[int, int] = {}
        self.held_spare: dict[int, int] = {}
        for lease in _open_of(snap, run, self.at):
            group = lease.spec.group
            self.group_slots.setdefault(group, []).extend(lease.spec.slice.slots)
            into = self.held_active if lease.spec.slice.role == ACTIVE else self.held_spare
            into[group] = into.get(group, 0) + lease.gpus
        # names: leases of (group, role) that exist (any state), and names taken in the namespace
        self.counts: dict[tuple[int, str], int] = {}
        for lease in snap.leases_by_run.get(run.key, ()):
            k = (lease.spec.group, lease.spec.slice.role)
            self.counts[k] = self.counts.get(k, 0) + 1
        self.taken_names = {x.name for x in snap.leases if x.namespace == run.namespace}
        # preferred domain: an Activated reservation's
        self.reserved_domain = None
        for r in sorted(snap.reservations, key=lambda r: r.key):
            if r.spec.run_ref.key == run.key and r.status.state == ACTIVATED and r.spec.scope.domain:
                self.reserved_domain = r.spec.scope.domain

    # --- domains and nodes -------------------------------------------------------------------------------------

    def _domain_of(self, name: str) -> str:
        node = self.all_nodes.get(name)
        return (node.domain or NO_DOMAIN) if node is not None else NO_DOMAIN

    def _domain_free(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes:
            d = node.domain or NO_DOMAIN
            out[d] = out.get(d, 0) + len(self.free[node.name])
        return out

    def _run_domains(self) -> list[str]:
        """Domains where the run holds slots, most slots first."""
        count: dict[str, int] = {}
        for slots in self.group_slots.values():
            for slot in slots:
                d = self._domain_of(node_of(slot))
                count[d] = count.get(d, 0) + 1
        return [d for d, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))]

    def _choose_domain(self, group: int, size: int, groups_left: int) -> str | None:
        held = self.group_slots.get(group)
        if held:
            return self._domain_of(node_of(held[0]))
        free = self._domain_free()
        by_free = sorted(free, key=lambda d: (-free[d], d))
        if not self.spread and self.group_gpus:
            mine = self._run_domains()
            if mine:
                return mine[0] if free.get(mine[0], 0) >= size else None
            unit = self.unit or size
            fits = [d for d in by_free if free[d] // unit >= groups_left]
            preferred = [d for d in ([self.reserved_domain] if self.reserved_domain else []) if d in fits]
            return (preferred + fits + [None])[0]
        order = []
        for d in [*self._run_domains(), *([self.reserved_domain] if self.reserved_domain else []), *by_free]:
            if d not in order:
                order.append(d)
        return next((d for d in order if free.get(d, 0) >= size), None)

    def _pick(self, group: int, count: int, domain: str | None) -> list[str] | None:
        """``count`` free slots for ``group`` (in ``domain`` when given): the group's own nodes first, else the
        tightest single node, else the nodes with the most free GPUs; ordinals ascending."""
        nodes = [n for n in self.nodes if domain is None or (n.domain or NO_DOMAIN) == domain]
        own = {node_of(s) for s in self.group_slots.get(group, ())}
        mine = sorted((n for n in nodes if n.name in own), key=lambda n: n.name)
        others = [n for n in nodes if n.name not in own]
        free = self.free
        if not mine:
            fitting = [n for n in others if len(free[n.name]) >= count]
            if fitting:
                best = min(fitting, key=lambda n: (len(free[n.name]), n.name))
                mine, others = [best], [n for n in others if n is not best]
        others = sorted(others, key=lambda n: (-len(free[n.name]), n.name))
        picked: list[str] = []
        for node in [*mine, *others]:
            if len(picked) >= count:
                break
            take = free[node.name][: count - len(picked)]
            picked.extend(f"{node.name}#{i}" for i in take)
        if len(picked) < count:
            return None
        for slot in picked:
            name, _, ordinal = slot.rpartition("#")
            free[name].remove(int(ordinal))
        self.group_slots.setdefault(group, []).extend(picked)
        return picked

    # --- payers --------------------------------------------------------------------------------------------------

    def _selects_all(self, source: FundingSource, slots: Sequence[str]) -> bool:
        _budget, envelope = self.snap.envelopes_by_key[source.key]
        for name in {node_of(s) for s in slots}:
            node = self.all_nodes.get(name)
            if node is None or not envelope.selects(node.metadata.labels):
                return False
        return True

    def _pay(self, sources: list[list], gpus: int, group_slots: Sequence[str]) -> list[tuple[tuple, int]] | None:
        """Split ``gpus`` over the sources (each ``[FundingSource, left]``): those whose selector matches every
        node of the group first, in walk order, then the others."""
        eligible = [s for s in sources if self._selects_all(s[0], group_slots)]
        rest = [s for s in sources if s not in eligible]
        out: list[tuple[tuple, int]] = []
        left = gpus
        for entry in [*eligible, *rest]:
            if left <= 0:
                break
            take = min(entry[1], left)
            if take <= 0:
                continue
            entry[1] -= take
            left -= take
            out.append((entry[0].key, take))
        if left > 0:
            return None
        return out

    # --- the leases ------------------------------------------------------------------------------------------------

    def compute(self) -> list[tuple[dict, str]] | None:
        run, plan = self.run, self.plan
        shape = _shape(run, self.width)
        start_shape = _shape(run, _start_width(run))
        owner = plan.funding.owner
        if owner is None:
            return None
        money = funding(self.book, run, candidate_nodes(self.snap, self.flavor, self.domain_scope))
        sources = [[s, s.usable] for s in money.sources if s.usable > 0]
        out: list[tuple[dict, str]] = []
        missing_groups = [
            i for i, size in enumerate(shape)
            if self.held_active.get(i, 0) < size or self.held_spare.get(i, 0) < self.spares
        ]
        for position, group in enumerate(missing_groups):
            size = shape[group]
            active_missing = max(0, size - self.held_active.get(group, 0))
            spare_missing = max(0, self.spares - self.held_spare.get(group, 0))
            count = active_missing + spare_missing
            domain = None
            if self.group_gpus:
                domain = self._choose_domain(group, count, len(missing_groups) - position)
                if domain is None:
                    return None
            picked = self._pick(group, count, domain)
            if picked is None:
                return None
            # The order a whole pass takes them in: the start width (and a start group's spares), then growth;
            # so finishing a half-minted run picks the same slots and payers for each part.
            start_group = group < len(start_shape)
            start_size = start_shape[group] if start_group else 0
            start_missing = max(0, min(size, start_size) - self.held_active.get(group, 0))
            grow_missing = active_missing - start_missing
            if start_group:
                spare_slots = picked[start_missing: start_missing + spare_missing]
                grow_slots = picked[start_missing + spare_missing:]
            else:
                grow_slots = picked[start_missing: start_missing + grow_missing]
                spare_slots = picked[start_missing + grow_missing:]
            parts = [
                (ACTIVE, START, picked[:start_missing]),
                (SPARE, START, spare_slots if start_group else []),
                (ACTIVE, GROW, grow_slots),
                (SPARE, GROW, [] if start_group else spare_slots),
            ]
            for role, reason, slots in parts:
                if not slots:
                    continue
                paid = self._pay(sources, len(slots), self.group_slots[group])
                if paid is None:
                    return None
                offset = 0
                for key, gpus in paid:
                    chunk = slots[offset: offset + gpus]
                    offset += gpus
                    out.append(self._lease(group, role, reason, chunk, key, owner))
        return out

    def _lease(self, group: int, role: str, reason: str, slots: list[str], payer: tuple, owner: str) -> tuple[dict, str]:
        run = self.run
        k = (group, role)
        n = self.counts.get(k, 0)
        while _name(run.name, f"-g{group}-{role.lower()}-{n}") in self.taken_names:
            n += 1
        name = _name(run.name, f"-g{group}-{role.lower()}-{n}")
        self.counts[k] = n + 1
        self.taken_names.add(name)
        body = {
            "apiVersion": API_VERSION,
            "kind": "GPULease",
            "metadata": {
                "name": name,
                "namespace": run.namespace,
                "labels": {RUN_LABEL: _label(run.name), GROUP_LABEL: str(group), ROLE_LABEL: role},
            },
            "spec": {
                "owner": owner,
                "runRef": {"namespace": run.namespace, "name": run.name},
                "group": group,
                "flavor": self.flavor,
                "slice": {"slots": list(slots), "role": role},
                "paidBy": {"namespace": payer[0], "budget": payer[1], "envelope": payer[2]},
                "start": rfc3339(self.at),
                "reason": reason,
            },
        }
        nodes = sorted({node_of(s) for s in slots})
        cause = (f"{reason}: mint {run.namespace}/{name} for {run.key} group {group} ({len(slots)} {role} GPUs on "
                 f"{', '.join(nodes)}), paid by {'/'.join(payer)}")
        return body, cause
