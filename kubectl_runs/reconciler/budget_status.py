"""A Budget's status: the ``budgets usage`` rows of its envelopes and caps, "as of ``updatedAt``" — consumed
GPU-hours that only grew with the clock at each envelope's charge rate are not written again (docs/reconciler.md,
"Time-stable status")."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..engine.accounting import EnvelopeUsage
from ..engine.reports import envelope_row, plain
from .conditions import condition

CLOCK_FIELDS = ("consumedGPUHours", "gpuHoursHeadroom")  # the Budget numbers that move with the clock alone
HOURS_TOLERANCE = 1e-3  # GPU-hours: the stored value is rounded to 4 decimals, the times to seconds



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


def budget_status(ev: Any, namespace: str, name: str, generation: int) -> tuple[dict, dict[str, tuple]]:
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
        "conditions": [condition("Ready", True, "Accounted", message, generation)],
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
