"""What the reconciler writes into status, and only where it changed (pure: no I/O, no clock).

``status_writes(snapshot, at, stored, keys)`` computes, for each object named in ``keys``, the status the
reports would show at ``at`` — Budget usage (the ``budgets usage`` rows), Run width/funding/plan/phase and
conditions (``kubectl runs plan``), Reservation forecast — compares it with the status stored on the object
(only the keys the core reconciler owns; RECONCILER.md), and returns a ``PatchStatus`` for each object whose
status changed. This is the one place the reconciler calls the engine for status.

Time-stable status (docs/reconciler.md): a resync of an unchanged fleet must write nothing, yet some numbers
move with the clock alone. The rules, all applied here:

- **Budget status is "as of ``updatedAt``".** ``consumedGPUHours`` (and ``gpuHoursHeadroom``) grow while
  leases are open. They are not rewritten as the clock moves: a stored value counts as current when the value
  computed now equals the stored one *projected* from ``updatedAt`` at the envelope's current charge rate
  (the slots of the leases charged to it, while its window is open). Any other change — a lease opened,
  closed or back-dated, a window that opened or closed — breaks the projection or a discrete field, and the
  whole status is written again with a new ``updatedAt``.
- **Text carries absolute times only.** The plan says ``2025-12-01 00:00 UTC (in 10 days)``; status keeps
  ``2025-12-01 00:00 UTC`` (``stable_text``), so messages change only when the facts do.
- **"Now" stays put.** A run that could start now has ``earliestStart`` = now in the plan; a stored
  ``earliestStart`` that is already in the past still means "now" and is kept.
- **Conditions keep their ``lastTransitionTime``** unless their status flips.
- ``status.countdownSeconds`` of a Reservation is never written (it changes every second): readers compute it
  from ``spec.earliestStart``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..engine import evaluation as engine_evaluation
from ..engine.accounting import Ledger, ledger
from ..engine.plan import Plan, plan_run
from ..model import Reservation, Run, Snapshot
from ..timeutil import rfc3339
from .actions import AnyWrite, PatchStatus, RecordEvent
from .budget_status import budget_status, envelopes_equal
from .conditions import condition, parse_time, stable_text, with_transitions  # noqa: F401  (stable_text: here too)
from .instants import next_change  # noqa: F401  (imported from here too)
from .run_status import reservation_status, run_status

BUDGET, RUN, RESERVATION = "Budget", "Run", "Reservation"
STATUS_KINDS = (BUDGET, RUN, RESERVATION)
ObjKey = tuple[str, str, str]  # (kind, namespace, name)

# The top-level status keys the core reconciler owns, per kind (RECONCILER.md). Nothing else is compared or
# written: the ledger keeper and the workload write the others.
OWNED_KEYS: dict[str, tuple[str, ...]] = {
    BUDGET: ("observedGeneration", "updatedAt", "envelopes", "aggregates", "conditions"),
    RUN: ("observedGeneration", "phase", "reason", "message", "width", "funding", "plan", "pendingReservation",
          "earliestStart", "conditions"),
    RESERVATION: ("observedGeneration", "forecast", "conditions"),
}
INVALID_OBJECT = "InvalidObject"



@dataclass(frozen=True)
class Stored:
    """What the cache holds of an object the reconciler writes status to: its status as stored."""

    status: Mapping[str, Any] = field(default_factory=dict)
    uid: str = ""


@dataclass(frozen=True)
class BadObject:
    """An object the model refuses: ``error`` names the field (``spec.envelopes[0].start: …``)."""

    kind: str
    namespace: str
    name: str
    error: str
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> ObjKey:
        return (self.kind, self.namespace, self.name)


# --- the shared evaluation of one batch -------------------------------------------------------------------


class Evaluation(engine_evaluation.Evaluation):
    """What every object of a batch shares (engine/evaluation.py: open leases, free capacity, funding inputs, a
    scope's groups and releases), with the full ledger at ``at`` (the Budgets' consumed GPU-hours read the
    closed leases too; a plan reads the same headroom and classes from it) and each run's plan, computed once
    for the Run and its Reservation."""

    def __init__(self, snapshot: Snapshot, at: datetime, books: Any = None):
        super().__init__(snapshot, at)
        self.budgets = {(b.metadata.namespace, b.metadata.name): b for b in snapshot.budgets}
        self._plans: dict[str, Plan] = {}
        if books is not None:  # reconciler/books.py: unchanged envelopes not funded again, unchanged values kept
            self._book = books.ledger(snapshot, at)
            books.carry(self)

    def make_book(self) -> Ledger:
        return ledger(self.snapshot, self.at)

    def plan(self, run: Run) -> Plan:
        found = self._plans.get(run.key)
        if found is None or found.run is not run:
            found = self._plans[run.key] = plan_run(self.snapshot, run, self.at, evaluation=self)
        return found


# --- the diff ----------------------------------------------------------------------------------------------


def _changed(desired: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """The owned keys whose value differs (a key to remove is sent as null: a merge patch deletes it)."""
    out = {}
    for key, value in desired.items():
        if key == "observedGeneration":
            continue
        if stored.get(key) != value:
            out[key] = value
    return out


def _patch(kind: str, namespace: str, name: str, desired: dict, stored: Mapping[str, Any],
           extra: Mapping[str, Any] | None = None) -> PatchStatus | None:
    changed = _changed(desired, stored)
    if stored.get("observedGeneration") != desired.get("observedGeneration"):
        changed.setdefault("observedGeneration", desired.get("observedGeneration"))
    if not changed:
        return None
    what = ", ".join(sorted(k for k in changed if k != "observedGeneration")) or "observedGeneration"
    cause = f"new status: {what}" if not stored else f"status changed: {what}"
    if "phase" in changed and stored.get("phase"):
        cause += f" (phase {stored.get('phase')} -> {changed['phase']})"
    body = {"observedGeneration": desired.get("observedGeneration"), **changed, **(extra or {})}
    return PatchStatus(kind=kind, namespace=namespace, name=name, cause=cause, status=body)


def budget_write(ev: Evaluation, namespace: str, name: str, stored: Stored) -> PatchStatus | None:
    generation = ev.budgets[(namespace, name)].metadata.generation
    desired, drift = budget_status(ev, namespace, name, generation)
    have = dict(stored.status)
    desired["conditions"] = with_transitions(desired["conditions"], have.get("conditions"), ev.at)
    since = parse_time(have.get("updatedAt"))
    if envelopes_equal(desired["envelopes"], have.get("envelopes"), drift, since, ev.at):
        desired["envelopes"] = have.get("envelopes")  # only the clock moved: as of updatedAt, still true
    patch = _patch(BUDGET, namespace, name, desired, have)
    if patch is None:
        return None
    # Whatever changed, the envelopes are written whole and fresh with the instant they are true at.
    status = dict(patch.status)
    status["envelopes"] = budget_status(ev, namespace, name, generation)[0]["envelopes"]
    status["updatedAt"] = rfc3339(ev.at)
    return PatchStatus(kind=BUDGET, namespace=namespace, name=name, cause=patch.cause, status=status)


def run_write(ev: Evaluation, run: Run, stored: Stored) -> PatchStatus | None:
    have = dict(stored.status)
    desired = run_status(ev, run, run.metadata.generation, have)
    desired["conditions"] = with_transitions(desired["conditions"], have.get("conditions"), ev.at)
    return _patch(RUN, run.metadata.namespace, run.metadata.name, desired, have)


def reservation_write(ev: Evaluation, reservation: Reservation, stored: Stored) -> PatchStatus | None:
    desired = reservation_status(ev, reservation, reservation.metadata.generation)
    if desired is None:
        return None
    have = dict(stored.status)
    desired["conditions"] = with_transitions(desired["conditions"], have.get("conditions"), ev.at)
    return _patch(RESERVATION, reservation.metadata.namespace, reservation.metadata.name, desired, have)


def bad_object_writes(bad: BadObject, at: datetime) -> list[AnyWrite]:
    """A Warning Event and — for the kinds whose status the reconciler writes — a ``Ready=False`` condition
    naming the field, written once (a stored condition with the same message means it was already said)."""
    event = RecordEvent(
        kind=bad.kind, namespace=bad.namespace, name=bad.name, cause=f"cannot parse: {bad.error}",
        type="Warning", reason=INVALID_OBJECT, message=f"kubectl-runs cannot read this {bad.kind}: {bad.error}",
    )
    if bad.kind not in STATUS_KINDS:
        return [event]
    ready = condition("Ready", False, INVALID_OBJECT, f"cannot read this {bad.kind}: {bad.error}",
                      bad.generation)
    have = dict(bad.status)
    desired = {"observedGeneration": bad.generation,
               "conditions": with_transitions([ready], have.get("conditions"), at)}
    patch = _patch(bad.kind, bad.namespace, bad.name, desired, have)
    if patch is None:
        return []
    return [patch, event]


def event_name(bad_name: str, uid: str, message: str) -> str:
    """A deterministic Event name: the same complaint about the same object is created once (409 = done)."""
    digest = hashlib.sha256(f"{uid}|{message}".encode()).hexdigest()[:16]
    return f"{bad_name[:200]}.{digest}"


# --- the entry point ---------------------------------------------------------------------------------------


def all_keys(snapshot: Snapshot) -> list[ObjKey]:
    keys: list[ObjKey] = [(BUDGET, b.metadata.namespace, b.metadata.name) for b in snapshot.budgets]
    keys += [(RUN, r.metadata.namespace, r.metadata.name) for r in snapshot.runs]
    keys += [(RESERVATION, r.metadata.namespace, r.metadata.name) for r in snapshot.reservations]
    return keys


def status_writes(
    snapshot: Snapshot,
    at: datetime,
    stored: Mapping[ObjKey, Stored],
    keys: Iterable[ObjKey] | None = None,
    bad: Mapping[ObjKey, BadObject] | None = None,
    evaluation: Evaluation | None = None,
) -> list[AnyWrite]:
    """The status writes for ``keys`` (default: every Budget, Run and Reservation of the snapshot), in key
    order: only objects whose owned status keys differ from ``stored`` get a PatchStatus. ``bad`` objects get
    their Warning Event and InvalidObject condition instead. Keys of objects that no longer exist are skipped.
    ``evaluation`` (of the same snapshot and instant) shares one ledger between several calls."""
    bad = bad or {}
    wanted = sorted(set(all_keys(snapshot) if keys is None else keys))
    ev = evaluation if evaluation is not None else Evaluation(snapshot, at)
    budgets = ev.budgets
    runs = snapshot.runs_by_key
    reservations = snapshot.reservations_by_key
    out: list[AnyWrite] = []
    for key in wanted:
        kind, namespace, name = key
        if key in bad:
            out.extend(bad_object_writes(bad[key], at))
            continue
        have = stored.get(key, Stored())
        write: PatchStatus | None = None
        if kind == BUDGET and (namespace, name) in budgets:
            write = budget_write(ev, namespace, name, have)
        elif kind == RUN and f"{namespace}/{name}" in runs:
            write = run_write(ev, runs[f"{namespace}/{name}"], have)
        elif kind == RESERVATION and f"{namespace}/{name}" in reservations:
            write = reservation_write(ev, reservations[f"{namespace}/{name}"], have)
        if write is not None:
            out.append(write)
    return out
