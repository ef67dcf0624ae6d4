"""A keyed work queue, as client-go's: a key queued many times is worked on once (bursts coalesce), a key
being worked on is not handed out twice (if it changes meanwhile it is queued again for after), and a key whose
work failed comes back after an exponential backoff (per key, capped).

The reconciler takes work in batches (``get_batch``): every key that is ready at that moment (up to a limit),
after a short coalescing delay, so a burst of events becomes one evaluation. Keys added with ``priority`` (the
objects an event named) are handed out before the others (the long tail of a resync or of a flavor whose
capacity changed), and never mixed with them in one batch: a change is written before the tail is worked off."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Iterable

Key = Hashable


class WorkQueue:
    def __init__(
        self,
        *,
        base_delay: float = 0.1,
        max_delay: float = 60.0,
        coalesce: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.coalesce = coalesce
        self._clock = clock
        self._cond = threading.Condition()
        self._queued: dict[Key, None] = {}  # ready keys, in the order they came (a dict: ordered, no copies)
        self._priority: dict[Key, None] = {}  # ready keys an event named: handed out first
        self._processing: set[Key] = set()
        self._dirty: dict[Key, bool] = {}  # added while processing (with its priority): queued again by done()
        self._delayed: list[tuple[float, int, Key]] = []  # (due, tiebreak, key)
        self._counter = itertools.count()
        self._failures: dict[Key, int] = {}
        self._shutdown = False

    # --- adding ---------------------------------------------------------------------------------------------

    def add(self, key: Key, priority: bool = False) -> None:
        self.add_all((key,), priority)

    def add_all(self, keys: Iterable[Key], priority: bool = False) -> None:
        with self._cond:
            if self._shutdown:
                return
            for key in keys:
                self._ready(key, priority)
            self._cond.notify_all()

    def _ready(self, key: Key, priority: bool) -> None:
        if key in self._processing:
            self._dirty[key] = priority or self._dirty.get(key, False)
        elif priority:
            self._queued.pop(key, None)
            self._priority[key] = None
        elif key not in self._priority:
            self._queued[key] = None

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            heapq.heappush(self._delayed, (self._clock() + delay, next(self._counter), key))
            self._cond.notify_all()

    def add_rate_limited(self, key: Key) -> float:
        """Queue ``key`` again after its backoff: base × 2^(failures so far), at most max_delay. Returns the
        delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self.max_delay, self.base_delay * (2**failures))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        """The key's work succeeded: its backoff starts over."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Key) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # --- taking ---------------------------------------------------------------------------------------------

    def _promote(self) -> float | None:
        """Move due delayed keys to the ready queue; the seconds until the next one is due (None: none)."""
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._ready(key, False)
        return self._delayed[0][0] - now if self._delayed else None

    def get_batch(self, timeout: float | None = None, limit: int | None = None) -> list[Key]:
        """Every ready key (at most ``limit``), marked as being processed; waits up to ``timeout`` seconds for
        the first one (None: forever) and then ``coalesce`` seconds more for the rest of a burst. An empty list
        means the timeout passed or the queue was shut down."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return []
                next_due = self._promote()
                if self._queued or self._priority:
                    break
                now = self._clock()
                if deadline is not None and now >= deadline:
                    return []
                waits = [w for w in (next_due, None if deadline is None else deadline - now) if w is not None]
                self._cond.wait(timeout=max(0.0, min(waits)) if waits else None)
            if self.coalesce > 0:
                self._cond.wait(timeout=self.coalesce)  # let the rest of a burst arrive
                self._promote()
            lane = self._priority if self._priority else self._queued
            keys = list(lane)
            if limit is not None:
                keys = keys[:limit]
            for key in keys:
                del lane[key]
            self._processing.update(keys)
            return keys

    def done(self, keys: Iterable[Key]) -> None:
        """Processing of ``keys`` finished; those added meanwhile are queued again."""
        with self._cond:
            for key in keys:
                self._processing.discard(key)
                if key in self._dirty:
                    self._ready(key, self._dirty.pop(key))
            self._cond.notify_all()

    # --- state ----------------------------------------------------------------------------------------------

    def depth(self) -> int:
        """Keys waiting: ready, delayed and dirty."""
        with self._cond:
            return len(self._queued) + len(self._priority) + len(self._delayed) + len(self._dirty)

    def idle(self) -> bool:
        with self._cond:
            return not self._queued and not self._priority and not self._processing and not self._dirty

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()


BATCH_CAP = 512  # at most this many per batch: ~10 s of status writes at the default --kube-api-qps 50


def batch_limit(depth: int, base: int) -> int:
    """How many keys to take: ``base`` while the queue is short; when it is deep (a start-up or a resync of
    thousands) an eighth of it, up to BATCH_CAP, so the per-batch cost (a view, the ledger, the shared evaluation)
    is paid once per hundreds of objects instead of once per ``base``. Priority keys (what an event named) are
    still taken first, so a change waits at most one batch."""
    return max(base, min(BATCH_CAP, depth // 8))
