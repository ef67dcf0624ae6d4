"""The ledger keeper's options and the names it writes (labels, annotation, lease roles and reasons, states)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ...engine.protection import Windows

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
FAR = datetime.max.replace(tzinfo=UTC)  # the creation time of a Run that has none: it queues last


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


def second(at: datetime) -> datetime:
    """``at`` as the API stores times: UTC, whole seconds."""
    return at.astimezone(UTC).replace(microsecond=0)


def object_name(base: str, suffix: str) -> str:
    """``base + suffix`` within the 253 characters of a name (a long base is cut and given a hash)."""
    if len(base) + len(suffix) <= MAX_NAME:
        return base + suffix
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return base[: MAX_NAME - len(suffix) - 9].rstrip("-.") + "-" + digest + suffix


def label_value(value: str) -> str:
    """A label value (63 characters at most)."""
    if len(value) <= 63:
        return value
    return value[:54].rstrip("-._") + "-" + hashlib.sha256(value.encode()).hexdigest()[:8]
