"""Client-side rate limits of the reconciler's API client (``--kube-api-qps``, ``--kube-api-burst``), as client-go
and controller-runtime have them (``rest.Config.QPS``/``Burst``, ``flowcontrol.NewTokenBucketRateLimiter``).

:class:`TokenBucket` holds up to ``burst`` tokens and gains ``qps`` per second; every request takes one, and a
request that finds none waits until its token is due. Tokens are *reserved* under a lock (the way
golang.org/x/time/rate's ``Wait`` does): each caller learns at once how long to wait and waits outside the lock,
so callers are served in the order they came and, over any interval of length T, at most ``burst + qps × T``
requests are let through, however many threads ask.

:class:`RateLimitedApi` puts one bucket in front of an ``ApiClient``: every ``call_api`` — one page of a list, a
status patch, a create, an Event, the opening of a watch (its stream of events is one request) — waits for a
token first. One bucket is shared by every client the reconciler makes for its informers and its writes
(cli/reconcile.py wraps the client factory). The leader elector gets a client of its own without a limiter, as
client-go's leader election does: a saturated writer never delays the renewal of its Lease.

Waits are reported to ``observe(seconds)`` (the histogram ``jobtree_client_rate_limit_wait_seconds``); a wait of
a second or more is also logged (client-go logs "Waited for … due to client-side throttling")."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..sources.informer import RateLimiterClosed

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "LONG_WAIT", "UNLIMITED", "RateLimitedApi", "RateLimiterClosed",
           "TokenBucket", "limited_factory"]

#: the defaults of ``--kube-api-qps``/``--kube-api-burst`` (kube-scheduler's; docs/reconciler.md says why)
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
UNLIMITED = -1.0  # --kube-api-qps -1: no client-side limit (client-go: a negative QPS disables the limiter)
LONG_WAIT = 1.0  # seconds: a wait this long is logged


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` per second; thread-safe. ``clock`` (seconds, monotonic) and
    ``sleep`` are injectable for tests; the default sleep ends early when the bucket is closed."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] | None = None, observe: Callable[[float], None] | None = None):
        if not qps > 0:
            raise ValueError(f"qps must be more than 0, not {qps!r}")
        if int(burst) != burst or burst < 1:
            raise ValueError(f"burst must be a whole number of at least 1, not {burst!r}")
        self.qps = float(qps)
        self.burst = int(burst)
        self.observe = observe
        self._clock = clock
        self._closed = threading.Event()
        self._sleep = sleep or self._closed.wait
        self._lock = threading.Lock()
        self._tokens = float(self.burst)  # full at start: the first ``burst`` requests go out at once
        self._last = clock()

    def reserve(self) -> float:
        """Take one token; the seconds the caller must wait before it is due (0: at once). A token may be taken
        ahead of time (the count goes below zero): the next caller then waits behind it."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._last)
            self._last = max(now, self._last)
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps) - 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait(self) -> float:
        """Block until this caller's token is due; the seconds waited. Raises :class:`RateLimiterClosed` once
        :meth:`close` was called (before or during the wait)."""
        if self._closed.is_set():
            raise RateLimiterClosed("not sent: the reconciler is stopping")
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
            if self._closed.is_set():
                raise RateLimiterClosed("not sent: the reconciler is stopping")
        if self.observe is not None:
            self.observe(delay)
        return delay

    def close(self) -> None:
        """Wake every waiter (each raises :class:`RateLimiterClosed`) and refuse every later request."""
        self._closed.set()


class RateLimitedApi:
    """``api`` (a kubernetes ``ApiClient``, or anything with its ``call_api``) whose every request waits for a token
    of ``limiter`` first; everything else is ``api``'s own."""

    def __init__(self, api: Any, limiter: TokenBucket, log: Callable[..., None] | None = None):
        self._api = api
        self._limiter = limiter
        self._log = log

    @property
    def unlimited(self) -> Any:
        """The client under the limiter."""
        return self._api

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        waited = self._limiter.wait()
        if waited >= LONG_WAIT and self._log is not None:
            self._log("client-side throttling", waited=f"{waited:.2f}s", request=f"{method} {urlsplit(url).path}",
                      qps=f"{self._limiter.qps:g}", burst=self._limiter.burst)
        return self._api.call_api(method, url, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def limited_factory(make_api: Callable[[], Any], limiter: TokenBucket | None,
                    log: Callable[..., None] | None = None) -> Callable[[], Any]:
    """A factory of clients made by ``make_api`` that all share ``limiter`` (None: ``make_api`` itself)."""
    if limiter is None:
        return make_api

    def make() -> Any:
        return RateLimitedApi(make_api(), limiter, log)

    return make
