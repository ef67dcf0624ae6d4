"""``--status-interval``: a Run's or Reservation's figures are written when its facts change, and otherwise at most
once per interval.

A status patch is *prompt* — written at once — when it changes what a user or a controller acts on: the
observed generation (a spec change), the phase, the reason, the pending Reservation, the Run's width, or any
condition's type, status or reason; and always for an object never written by this process, and for Budgets
(their usage is their own fact: one write per lease change). Otherwise it only moves figures that follow the rest
of the fleet — a pending Run's deficits, remedies and forecast, its funding split, condition messages, a
Reservation's forecast — and is *deferred*: the key is queued again ``interval`` seconds after such a change is
first seen, later changes in that time join it, and then the values of that moment are written (intermediate
values never are). So one lease change costs its facts' writes at once and each affected pending Run at most one
write an interval later, however many leases move meanwhile.

Pure decisions (:func:`prompt`) and a small clock-driven book (:class:`StatusThrottle`) used by the loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .actions import AnyWrite, PatchStatus
from .status import RESERVATION, RUN, Stored

__all__ = ["PROMPT_KEYS", "StatusThrottle", "prompt"]

ObjKey = tuple[str, str, str]
#: status keys whose change is written at once (with conditions' type/status/reason)
PROMPT_KEYS = ("observedGeneration", "phase", "reason", "pendingReservation", "width")
THROTTLED_KINDS = (RUN, RESERVATION)


def _condition_states(conditions: Any) -> set[tuple[Any, Any, Any]]:
    if not isinstance(conditions, list):
        return set()
    return {(c.get("type"), c.get("status"), c.get("reason")) for c in conditions if isinstance(c, dict)}


def prompt(write: PatchStatus, stored: Mapping[str, Any]) -> bool:
    """True when ``write`` changes a fact of its object (write it now), False when it only moves figures that
    follow the rest of the fleet (it may wait for the interval)."""
    if write.kind not in THROTTLED_KINDS or not stored:
        return True
    body = write.status
    if any(key in body and body[key] != stored.get(key) for key in PROMPT_KEYS):
        return True
    return "conditions" in body and _condition_states(body["conditions"]) != _condition_states(stored.get("conditions"))


class StatusThrottle:
    """When each Run and Reservation status was last written by this process, and which deferred writes are
    queued. ``requeue(key, delay)`` puts a key back in the work queue; ``interval`` 0 turns it off."""

    def __init__(self, interval: float, requeue: Callable[[ObjKey, float], None],
                 clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._requeue = requeue
        self._clock = clock
        self._written: dict[ObjKey, float] = {}
        self._due: dict[ObjKey, float] = {}
        self._lock = threading.Lock()
        self.deferred = 0  # writes held back (counted for the log and tests)

    def filter(self, writes: Iterable[AnyWrite], stored: Mapping[ObjKey, Stored],
               evaluated: Iterable[ObjKey] = ()) -> list[AnyWrite]:
        """The writes to make now; the others are deferred and their keys queued for when they are due.
        ``evaluated``: the keys this batch evaluated — a deferral that came due among them is settled, written or
        (its figures went back to what is stored) not."""
        if self.interval <= 0:
            return list(writes)
        now = self._clock()
        out: list[AnyWrite] = []
        for write in writes:
            if not isinstance(write, PatchStatus) or write.kind not in THROTTLED_KINDS:
                out.append(write)
                continue
            key = (write.kind, write.namespace, write.name)
            with self._lock:
                queued = self._due.get(key)
                if (key not in self._written or (queued is not None and queued <= now)
                        or prompt(write, stored.get(key, Stored()).status)):
                    out.append(write)
                    continue
                self.deferred += 1
                if queued is not None:
                    continue  # already queued: this change joins it
                self._due[key] = now + self.interval
            self._requeue(key, self.interval)
        with self._lock:
            for key in evaluated:
                queued = self._due.get(key)
                if queued is not None and queued <= now:
                    del self._due[key]
        return out

    def wrote(self, key: ObjKey) -> None:
        """A status write of ``key`` was made (or found the object gone): its interval starts now."""
        with self._lock:
            self._written[key] = self._clock()
            self._due.pop(key, None)

    def forget(self, key: ObjKey) -> None:
        with self._lock:
            self._written.pop(key, None)
            self._due.pop(key, None)
