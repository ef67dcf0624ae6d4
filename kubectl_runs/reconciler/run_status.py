"""A Run's status — width, funding, plan, phase, reason, message, pendingReservation, earliestStart and its
conditions: what ``kubectl runs plan`` computes, without the clock in its text — and a pending Reservation's
forecast (its Run's plan in the Reservation's scope)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine.accounting import BORROWED, OWNED, SHARED, UNFUNDED
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
)
from ..engine.reports import plain
from ..model import Reservation, Run
from ..timeutil import rfc3339
from ..views.plan import headline as plan_headline
from .conditions import condition, parse_time, stable

FINISHED_PHASES = ("Succeeded", "Failed")
FUNDING_CODES = (UNBOUND_NAMESPACE, NO_ENVELOPE, WINDOW_NOT_OPEN, INSUFFICIENT_BUDGET, BORROW_LIMIT, ACL_DENIED)
CAPACITY_CODES = (INVALID_REQUEST, NO_SINGLE_DOMAIN, INSUFFICIENT_CAPACITY)



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


def run_status(ev: Any, run: Run, generation: int, stored: Mapping[str, Any]) -> dict:
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
        ready = condition("Ready", False, run.status.phase, headline, generation)
    elif running:
        phase = "Running"
        ready = condition("Ready", True, "Running", headline, generation)
    else:
        phase = "Reserved" if pending is not None else "Pending"
        reason = plan.reasons[0].code if plan.reasons else "Startable" if plan.need else "Idle"
        ready = condition("Ready", False, reason, headline, generation)
    conditions = [ready]
    if not finished:
        funding_reason = _first(plan, FUNDING_CODES)
        capacity_reason = _first(plan, CAPACITY_CODES)
        if plan.funding_deficit == 0 and funding_reason is None:
            conditions.append(condition("Funded", True, "Funded", _enough(plan.need, "funded"), generation))
        else:
            code, text = funding_reason or (INSUFFICIENT_BUDGET, f"only {plan.fundable} of {plan.need} can be funded")
            conditions.append(condition("Funded", False, code, text, generation))
        if plan.capacity_deficit == 0 and capacity_reason is None:
            conditions.append(condition("Placeable", True, "Placeable", _enough(plan.need, "placed"), generation))
        else:
            code, text = capacity_reason or (INSUFFICIENT_CAPACITY, f"only {plan.placeable} of {plan.need} fit")
            conditions.append(condition("Placeable", False, code, text, generation))
    earliest = None
    if not finished and not running and plan.forecast.earliest_start is not None:
        earliest = plan.forecast.earliest_start
        kept = parse_time(stored.get("earliestStart"))
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
    return stable(status)


# --- Reservation -------------------------------------------------------------------------------------------


def reservation_status(ev: Any, reservation: Reservation, generation: int) -> dict | None:
    """The forecast of a pending Reservation: its run's plan in the reservation's scope. None for a
    reservation that is no longer pending (nothing to forecast) or whose run's plan uses another one."""
    if reservation.status.state not in (None, "Pending"):
        return None
    run = ev.snapshot.runs_by_key.get(reservation.spec.run_ref.key)
    if run is None:
        return stable({
            "observedGeneration": generation,
            "conditions": [condition("Ready", False, "RunNotFound",
                                      f"run {reservation.spec.run_ref.key} does not exist", generation)],
        })
    plan = ev.plan(run)
    if plan.reservation is None or plan.reservation.key != reservation.key:
        return None
    plan_json = plain(plan.report)
    if plan.deficit == 0:
        ready = condition("Ready", True, "Fits", plan_headline(plan), generation)
    else:
        code = plan.reasons[0].code if plan.reasons else "Deficit"
        ready = condition("Ready", False, code, plan_headline(plan), generation)
    return stable({
        "observedGeneration": generation,
        "forecast": {
            "deficitGPUs": plan_json["deficitGPUs"],
            "confidence": plan.forecast.confidence,
            "remedies": plan_json["remedies"],
        },
        "conditions": [ready],
    })
