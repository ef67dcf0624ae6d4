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
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..engine import evaluation as engine_evaluation
from ..engine.accounting import BORROWED, OWNED, SHARED, UNFUNDED, EnvelopeUsage, Ledger, ledger
from ..engine.plan import (
    ACL_DENIED,
    BORROW_LIMIT,
    INSUFFICIENT_BUDGET,
    INSUFFICIENT_CAPACITY,
    INVALID_REQUEST,
    NO_ENVELOPE,
    NO_SINGLE_DOMAIN,
    UNBOUND_NAMESPACE,
    WINDOW_NOT_OPEN,
    Plan,
    plan_run,
)
from ..engine.protection import Windows, protections
from ..engine.reports import envelope_row, plain
from ..model import Reservation, Run, Snapshot
from ..timeutil import rfc3339
from ..views.plan import headline as plan_headline
from .actions import AnyWrite, PatchStatus, RecordEvent

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
FINISHED_PHASES = ("Succeeded", "Failed")
CLOCK_FIELDS = ("consumedGPUHours", "gpuHoursHeadroom")  # the Budget numbers that move with the clock alone
HOURS_TOLERANCE = 1e-3  # GPU-hours: the stored value is rounded to 4 decimals, the times to seconds
INVALID_OBJECT = "InvalidObject"

FUNDING_CODES = (UNBOUND_NAMESPACE, NO_ENVELOPE, WINDOW_NOT_OPEN, INSUFFICIENT_BUDGET, BORROW_LIMIT, ACL_DENIED)
CAPACITY_CODES = (INVALID_REQUEST, NO_SINGLE_DOMAIN, INSUFFICIENT_CAPACITY)


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


# --- text without the clock ------------------------------------------------------------------------------

_RELATIVE = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC) \((?:in [^()]*|[^()]* ago)\)")


def stable_text(text: str) -> str:
    """``2025-12-01 00:00 UTC (in 10 days)`` -> ``2025-12-01 00:00 UTC``: the absolute time stays, the distance
    from now (which changes every minute) goes."""
    return _RELATIVE.sub(r"\1", text)


def _stable(value: Any) -> Any:
    if isinstance(value, str):
        return stable_text(value)
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items()}
    return value


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


# --- Budget ------------------------------------------------------------------------------------------------


def _envelope_entry(usage: EnvelopeUsage) -> dict[str, Any]:
    """A ``budgets usage`` row (the same value, engine/reports.envelope_row) under the status's names."""
    row = plain(envelope_row(usage))
    return {
        "name": row["envelope"],
        "flavor": row["flavor"],
        "windowActive": row["windowActive"],
        "concurrency": row["concurrency"],
        "usedGPUs": row["usedGPUs"],
        "headroomGPUs": row["headroomGPUs"],
        "ownedGPUs": row["ownedGPUs"],
        "sharedGPUs": row["sharedGPUs"],
        "borrowedGPUs": row["borrowedGPUs"],
        "unfundedGPUs": row["unfundedGPUs"],
        "spareGPUs": row["spareGPUs"],
        "consumedGPUHours": row["consumedGPUHours"],
        "gpuHoursHeadroom": row["gpuHoursHeadroom"],
    }


def charge_rate(usage: EnvelopeUsage) -> int:
    """GPUs being charged to the envelope now (its consumedGPUHours grow by this many per hour)."""
    if not usage.window_active:
        return 0
    return sum(len(c.lease.spec.slice.slots) for c in usage.charges)


def budget_status(ev: Evaluation, namespace: str, name: str, generation: int) -> tuple[dict, dict[str, tuple]]:
    """The Budget's status (without updatedAt) and, per envelope, (rate, window start, window end) for the
    clock-drift comparison."""
    book = ev.book
    budget = ev.budgets[(namespace, name)]
    envelopes = []
    drift: dict[str, tuple] = {}
    used = concurrency = headroom = 0
    for envelope in budget.spec.envelopes:
        usage = book.envelopes[(namespace, name, envelope.name)]
        envelopes.append(_envelope_entry(usage))
        drift[envelope.name] = (charge_rate(usage), envelope.start, envelope.end)
        if usage.window_active:
            used += usage.used
            concurrency += envelope.concurrency
            headroom += usage.headroom
    aggregates = [
        {"name": a.name, "usedGPUs": a.used, "headroomGPUs": a.headroom}
        for a in book.aggregates
        if a.budget.metadata.namespace == namespace and a.budget.metadata.name == name
    ]
    message = f"{used} of {concurrency} GPUs used in open windows, {headroom} headroom"
    status = {
        "observedGeneration": generation,
        "envelopes": envelopes,
        "aggregates": aggregates,
        "conditions": [_condition("Ready", True, "Accounted", message, generation)],
    }
    return status, drift


def _clip(when: datetime, start: datetime, end: datetime) -> datetime:
    return min(max(when, start), end)


def _hours(value: Any) -> float | None:
    return None if value is None else float(value)


def envelopes_equal(desired: list[dict], stored: Any, drift: Mapping[str, tuple], since: datetime | None,
                    at: datetime) -> bool:
    """Equal but for clock drift: every field equal, and consumed GPU-hours equal to the stored value projected
    from ``since`` (the stored updatedAt) to ``at`` at each envelope's charge rate."""
    if not isinstance(stored, list) or len(stored) != len(desired) or since is None:
        return False
    for want, have in zip(desired, stored, strict=True):
        if not isinstance(have, dict):
            return False
        if {k: v for k, v in want.items() if k not in CLOCK_FIELDS} != {
            k: v for k, v in have.items() if k not in CLOCK_FIELDS
        }:
            return False
        rate, start, end = drift[want["name"]]
        # Signed: a replica whose clock is behind the one that wrote updatedAt projects backwards, exactly.
        gained = rate * (_clip(at, start, end) - _clip(since, start, end)).total_seconds() / 3600.0
        try:
            stored_hours = _hours(have.get("consumedGPUHours"))
            stored_headroom = _hours(have.get("gpuHoursHeadroom"))
        except (TypeError, ValueError):
            return False
        if stored_hours is None or abs(want["consumedGPUHours"] - (stored_hours + gained)) > HOURS_TOLERANCE:
            return False
        if (want["gpuHoursHeadroom"] is None) != (stored_headroom is None):
            return False
        if stored_headroom is not None and abs(want["gpuHoursHeadroom"] - (stored_headroom - gained)) > HOURS_TOLERANCE:
            return False
    return True


# --- Run ---------------------------------------------------------------------------------------------------


def _first(plan: Plan, codes: tuple[str, ...]) -> tuple[str, str] | None:
    found = [r for r in plan.reasons if r.code in codes]
    if not found:
        return None
    return found[0].code, "; ".join(r.message for r in found)


def _enough(need: int, done: str) -> str:
    """A True condition's message: the Run's own need only. The fleet's free or fundable GPUs change with every
    other Run's lease; quoting them here rewrote every Run of the flavor on each lease change (``plan`` and the
    metrics give them)."""
    return "it needs no more GPUs" if need == 0 else f"the {need} GPUs it needs can be {done}"


def run_status(ev: Evaluation, run: Run, generation: int, stored: Mapping[str, Any]) -> dict:
    """Width, funding, plan, phase, reason, message, pendingReservation, earliestStart and the conditions of a
    Run: what ``kubectl runs plan`` computes, without the clock in its text."""
    at = ev.at
    plan = ev.plan(run)
    charges = ev.charges_of(run.key)
    split = {cls: 0 for cls in (OWNED, SHARED, BORROWED, UNFUNDED)}
    lenders: dict[str, int] = {}
    for charge in charges:
        for cls in split:
            split[cls] += getattr(charge, cls)
        if charge.borrowed and charge.lender:
            lenders[charge.lender] = lenders.get(charge.lender, 0) + charge.borrowed
    plan_json = plain(plan.report)
    headline = plan_headline(plan)
    finished = run.status.phase in FINISHED_PHASES
    running = plan.width.allocated > 0
    reservation = plan.reservation
    pending = reservation if reservation is not None and reservation.status.state in (None, "Pending") else None
    if finished:
        phase = None
        ready = _condition("Ready", False, run.status.phase, headline, generation)
    elif running:
        phase = "Running"
        ready = _condition("Ready", True, "Running", headline, generation)
    else:
        phase = "Reserved" if pending is not None else "Pending"
        reason = plan.reasons[0].code if plan.reasons else "Startable" if plan.need else "Idle"
        ready = _condition("Ready", False, reason, headline, generation)
    conditions = [ready]
    if not finished:
        funding_reason = _first(plan, FUNDING_CODES)
        capacity_reason = _first(plan, CAPACITY_CODES)
        if plan.funding_deficit == 0 and funding_reason is None:
            conditions.append(_condition("Funded", True, "Funded", _enough(plan.need, "funded"), generation))
        else:
            code, text = funding_reason or (INSUFFICIENT_BUDGET, f"only {plan.fundable} of {plan.need} can be funded")
            conditions.append(_condition("Funded", False, code, text, generation))
        if plan.capacity_deficit == 0 and capacity_reason is None:
            conditions.append(_condition("Placeable", True, "Placeable", _enough(plan.need, "placed"), generation))
        else:
            code, text = capacity_reason or (INSUFFICIENT_CAPACITY, f"only {plan.placeable} of {plan.need} fit")
            conditions.append(_condition("Placeable", False, code, text, generation))
    earliest = None
    if not finished and not running and plan.forecast.earliest_start is not None:
        earliest = plan.forecast.earliest_start
        kept = _time(stored.get("earliestStart"))
        if earliest <= at and kept is not None and kept <= at:
            earliest = kept  # both mean "now": keep the instant it was first startable
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "reason": ready["reason"],
        "message": headline,
        "width": plan_json["width"],
        "funding": {
            "ownedGPUs": split[OWNED],
            "sharedGPUs": split[SHARED],
            "borrowedGPUs": split[BORROWED],
            "unfundedGPUs": split[UNFUNDED],
            "lenders": [{"owner": owner, "gpus": gpus} for owner, gpus in sorted(lenders.items())],
        },
        "plan": {
            "deficitGPUs": plan_json["deficitGPUs"],
            "capacityDeficitGPUs": plan_json["capacityDeficitGPUs"],
            "fundingDeficitGPUs": plan_json["fundingDeficitGPUs"],
            "reasons": plan_json["reasons"],
            "remedies": plan_json["remedies"],
        },
        "pendingReservation": pending.metadata.name if pending is not None else None,
        "earliestStart": rfc3339(earliest),
        "conditions": conditions,
    }
    if finished:
        del status["reason"], status["message"]  # written by the workload with the phase
    else:
        status["phase"] = phase
    return _stable(status)


# --- Reservation -------------------------------------------------------------------------------------------


def reservation_status(ev: Evaluation, reservation: Reservation, generation: int) -> dict | None:
    """The forecast of a pending Reservation: its run's plan in the reservation's scope. None for a
    reservation that is no longer pending (nothing to forecast) or whose run's plan uses another one."""
    if reservation.status.state not in (None, "Pending"):
        return None
    run = ev.snapshot.runs_by_key.get(reservation.spec.run_ref.key)
    if run is None:
        return _stable({
            "observedGeneration": generation,
            "conditions": [_condition("Ready", False, "RunNotFound",
                                      f"run {reservation.spec.run_ref.key} does not exist", generation)],
        })
    plan = ev.plan(run)
    if plan.reservation is None or plan.reservation.key != reservation.key:
        return None
    plan_json = plain(plan.report)
    if plan.deficit == 0:
        ready = _condition("Ready", True, "Fits", plan_headline(plan), generation)
    else:
        code = plan.reasons[0].code if plan.reasons else "Deficit"
        ready = _condition("Ready", False, code, plan_headline(plan), generation)
    return _stable({
        "observedGeneration": generation,
        "forecast": {
            "deficitGPUs": plan_json["deficitGPUs"],
            "confidence": plan.forecast.confidence,
            "remedies": plan_json["remedies"],
        },
        "conditions": [ready],
    })


# --- conditions --------------------------------------------------------------------------------------------


def _condition(kind: str, status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason or "Unknown",
            "message": message, "observedGeneration": generation}


def _with_transitions(conditions: list[dict], stored: Any, at: datetime) -> list[dict]:
    """Each condition keeps the stored lastTransitionTime of its type unless its status flipped."""
    before = {c.get("type"): c for c in stored if isinstance(c, dict)} if isinstance(stored, list) else {}
    out = []
    for condition in conditions:
        old = before.get(condition["type"])
        since = old.get("lastTransitionTime") if old and old.get("status") == condition["status"] else None
        out.append({**condition, "lastTransitionTime": since or rfc3339(at)})
    return out


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


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
    desired["conditions"] = _with_transitions(desired["conditions"], have.get("conditions"), ev.at)
    since = _time(have.get("updatedAt"))
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
    desired["conditions"] = _with_transitions(desired["conditions"], have.get("conditions"), ev.at)
    return _patch(RUN, run.metadata.namespace, run.metadata.name, desired, have)


def reservation_write(ev: Evaluation, reservation: Reservation, stored: Stored) -> PatchStatus | None:
    desired = reservation_status(ev, reservation, reservation.metadata.generation)
    if desired is None:
        return None
    have = dict(stored.status)
    desired["conditions"] = _with_transitions(desired["conditions"], have.get("conditions"), ev.at)
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
    condition = _condition("Ready", False, INVALID_OBJECT, f"cannot read this {bad.kind}: {bad.error}",
                           bad.generation)
    have = dict(bad.status)
    desired = {"observedGeneration": bad.generation,
               "conditions": _with_transitions([condition], have.get("conditions"), at)}
    patch = _patch(bad.kind, bad.namespace, bad.name, desired, have)
    if patch is None:
        return []
    return [patch, event]


def event_name(bad_name: str, uid: str, message: str) -> str:
    """A deterministic Event name: the same complaint about the same object is created once (409 = done)."""
    digest = hashlib.sha256(f"{uid}|{message}".encode()).hexdigest()[:16]
    return f"{bad_name[:200]}.{digest}"


# --- when the facts change by themselves --------------------------------------------------------------------


def next_change(snapshot: Snapshot, at: datetime) -> datetime | None:
    """The first instant after ``at`` at which something the engine reads changes with no event: an envelope
    window opening or closing, a lease starting or ending, a reported ETA passing, a pending Reservation's
    earliestStart arriving, a protection window opening or ending (engine/protection.py). The loop looks at
    everything again then (instead of at the next resync)."""
    soonest: datetime | None = None

    def consider(when: datetime | None) -> None:
        nonlocal soonest
        if when is not None and when > at and (soonest is None or when < soonest):
            soonest = when

    for budget in snapshot.budgets:
        for envelope in budget.spec.envelopes:
            consider(envelope.start)
            consider(envelope.end)
    for lease in snapshot.leases:
        consider(lease.spec.start)
        if lease.status.closed:
            consider(lease.status.ended)
    grace = Windows().eta_grace  # what plan and the remedies in status count (the default windows)
    for run in snapshot.runs:
        eta = run.status.eta
        if eta is not None and eta.estimated_completion is not None:
            for when in (eta.estimated_completion - grace, eta.estimated_completion, eta.estimated_completion + grace):
                consider(when)
    if any(r.status.state in (None, "Pending") for r in snapshot.reservations):  # only a pending one's draw cares
        for protection in protections(snapshot, at, Windows()).values():
            consider(protection.until)  # a Run comes back into the lotteries' conflict sets
    for reservation in snapshot.reservations:
        if reservation.status.state in (None, "Pending"):
            consider(reservation.spec.earliest_start)
    return soonest


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
