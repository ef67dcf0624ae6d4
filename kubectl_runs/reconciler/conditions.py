"""The parts of a status that must not move with the clock alone (docs/reconciler.md, "Time-stable status"):
text with absolute times only, conditions that keep their ``lastTransitionTime`` unless their status flips."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ..timeutil import rfc3339

# --- text without the clock ------------------------------------------------------------------------------

_RELATIVE = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC) \((?:in [^()]*|[^()]* ago)\)")


def stable_text(text: str) -> str:
    """``2025-12-01 00:00 UTC (in 10 days)`` -> ``2025-12-01 00:00 UTC``: the absolute time stays, the distance
    from now (which changes every minute) goes."""
    return _RELATIVE.sub(r"\1", text)


def stable(value: Any) -> Any:
    if isinstance(value, str):
        return stable_text(value)
    if isinstance(value, list):
        return [stable(v) for v in value]
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items()}
    return value


# --- conditions --------------------------------------------------------------------------------------------


def condition(kind: str, status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason or "Unknown",
            "message": message, "observedGeneration": generation}


def with_transitions(conditions: list[dict], stored: Any, at: datetime) -> list[dict]:
    """Each condition keeps the stored lastTransitionTime of its type unless its status flipped."""
    before = {c.get("type"): c for c in stored if isinstance(c, dict)} if isinstance(stored, list) else {}
    out = []
    for condition in conditions:
        old = before.get(condition["type"])
        since = old.get("lastTransitionTime") if old and old.get("status") == condition["status"] else None
        out.append({**condition, "lastTransitionTime": since or rfc3339(at)})
    return out


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None
