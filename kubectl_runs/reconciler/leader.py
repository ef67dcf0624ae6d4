"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

Several replicas of the reconciler may run; one leads and writes, the others stand by with warm caches. The
applier asks :meth:`LeaderElector.is_leader` before every write.

Why our own loop and not ``kubernetes.leaderelection`` (kubernetes 37.0.2, read in the venv):

- no way to stop it: ``LeaderElection.run()`` blocks in ``while True: ... time.sleep(retry_period)`` (acquire)
  or in the renew loop, with no stop event, so a graceful shutdown can only kill the thread
  (kubernetes-client/python #1669, #2075), and it never *releases* the Lease on shutdown (client-go's
  ``ReleaseOnCancel``): a rolling update would leave the new pod waiting a whole lease duration;
- no ``is_leader()``: it only calls ``onstarted_leading``/``onstopped_leading``. The stop callback runs only
  after the renew loop gives up, and its requests carry no timeout, so a renew hanging on a partitioned TCP
  connection keeps the old leader "leading" past the renew deadline — and past the lease duration, when a
  standby may already have taken over. Here ``is_leader()`` turns False by itself once the last successful
  renewal is older than the renew deadline, whatever the network does;
- ``LeaseLock`` builds its own ``CoordinationV1Api()`` on the *default* client configuration (it cannot use
  the ApiClient made from ``--kubeconfig``/``--context``), never maintains ``leaseTransitions``, and
  ``Config`` calls ``sys.exit`` on a bad duration;
- after losing the lease ``run()`` returns for good instead of standing by again.

What is kept from client-go (tools/leaderelection): the record (``holderIdentity``, ``leaseDurationSeconds``,
``acquireTime``, ``renewTime``, ``leaseTransitions``), the defaults 15 s / 10 s / 2 s, the validation
``lease_duration > renew_deadline > 1.2 × retry_period``, and the expiry rule: a candidate never compares the
Lease's ``renewTime`` with its own clock (so clock skew between replicas does not matter); it notes, on its
own monotonic clock, when it *observed* the record change, and the Lease is free once it has not changed for
``leaseDurationSeconds`` (the record's own value) since then. Every write is an update carrying the
``resourceVersion`` it read: a 409 Conflict means another candidate wrote first, and this one lost that round.
Release sets ``holderIdentity`` empty and ``leaseDurationSeconds`` 1 (as client-go does), so a standby takes
over at its next retry instead of after a lease duration.

Safety margin: a leader stops writing ``renew_deadline`` after its last successful renewal began (measured from
*before* the request was sent); a standby may take over no earlier than ``lease_duration`` after it saw that
renewal. The difference (5 s by default) covers request latency and scheduling delay.

Differences from client-go: the acquire loop's jitter is 0.2 × retry_period (client-go: 1.2), so a standby
takes over within about ``lease_duration + 2 × retry_period`` of the leader's death; and after losing the
lease the elector goes back to standing by (the process does not exit).
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .lease_lock import Conflict, KubeLeaseStore, LeaseError, LeaseStore

__all__ = ["Conflict", "KubeLeaseStore", "LeaderElector", "LeaseError", "LeaseStore", "micro_time"]

_logger = logging.getLogger("kubectl_runs.reconciler.leader")

LogFn = Callable[..., None]  # log(msg, level="info", **fields): the reconcile loop's logfmt Logger


def _python_log(msg: str, level: str = "info", **fields: Any) -> None:
    """The default ``log``: Python logging (without a handler configured, warnings and errors reach stderr)."""
    text = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    _logger.log(getattr(logging, level.upper(), logging.INFO), "%s: %s", msg, text)

JITTER = 0.2


def micro_time(at: datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaigns for the Lease ``namespace/name`` as ``identity`` in a daemon thread (:meth:`start`).

    ``clock`` (monotonic seconds) times everything local: observed changes, the renew deadline, sleeps.
    ``wall`` gives the timestamps written into the Lease. ``store`` replaces the API server (unit tests).
    ``on_started_leading``/``on_stopped_leading`` are called from the election thread. ``log`` takes
    ``(msg, level="info", **fields)`` (the reconcile loop's logfmt Logger); by default Python logging. A
    failing request is logged once when it starts failing (level warning) and once when it works again, not
    every retry period.
    """

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        request_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = _utcnow,
        store: LeaseStore | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        jitter: float = JITTER,
        log: LogFn | None = None,
    ):
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if not namespace or not name:
            raise ValueError("leader election needs the Lease's namespace and name")
        if retry_period <= 0:
            raise ValueError(f"retry period must be > 0 (got {retry_period:g}s)")
        if lease_duration <= renew_deadline:
            raise ValueError(
                f"lease duration ({lease_duration:g}s) must be greater than the renew deadline ({renew_deadline:g}s)"
            )
        if renew_deadline <= 1.2 * retry_period:
            raise ValueError(
                f"renew deadline ({renew_deadline:g}s) must be greater than 1.2 × the retry period ({retry_period:g}s)"
            )
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.request_timeout = request_timeout if request_timeout is not None else max(1.0, renew_deadline / 2)
        self.jitter = jitter
        self._clock = clock
        self._wall = wall
        self.store: LeaseStore = store if store is not None else KubeLeaseStore(
            api_client, namespace, name, timeout=self.request_timeout
        )
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._log = log or _python_log
        self._said_error = ""

        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._leading = threading.Event()  # set while held (for wait())
        self._thread: threading.Thread | None = None
        self._held = False
        self._last_renew: float | None = None  # clock() when the last successful acquire/renew began
        self._observed_spec: dict | None = None
        self._observed_time = 0.0
        self._lease: dict | None = None  # the Lease as last read or written (its resourceVersion)
        self.transitions = 0  # times this elector became leader
        self.last_error: str = ""

    # --- what the reconciler asks ----------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True only while this elector holds the Lease and its last successful renewal began less than the
        renew deadline ago (a leader cut off from the API server stops writing by itself)."""
        with self._lock:
            return (
                self._held
                and self._last_renew is not None
                and self._clock() - self._last_renew < self.renew_deadline
            )

    @property
    def holder(self) -> str:
        """The holder identity last observed in the Lease ("" when free or never read)."""
        with self._lock:
            return (self._observed_spec or {}).get("holderIdentity") or ""

    def wait(self, stop: threading.Event, timeout: float | None = None) -> bool:
        """Block until this elector leads, ``stop`` is set or ``timeout`` passes; return :meth:`is_leader`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not stop.is_set() and not self.is_leader():
            step = 0.1
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                step = min(step, left)
            self._leading.wait(step)
        return self.is_leader()

    # --- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("leader elector already started")
        self._thread = threading.Thread(target=self._run, name=f"leader-election-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; with ``release``, give the Lease up if held (a standby takes over at its next try).
        Writes stop first: :meth:`is_leader` is False before this waits for the thread or sends the release."""
        self._stop.set()
        with self._lock:
            was_held = self._held
            self._held = False
            self._leading.clear()
        if self._thread is not None:
            self._thread.join(timeout=self.request_timeout + self.retry_period + 1.0)
        if release:
            self.release()
        if was_held and self.on_stopped_leading is not None:
            self._callback(self.on_stopped_leading)

    def release(self) -> bool:
        """Give up the Lease if this elector is its holder (an update on the last resourceVersion it wrote;
        a 409 means the Lease moved on and there is nothing to release)."""
        with self._lock:
            self._held = False
            self._leading.clear()
            lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return False
        spec = dict(lease.get("spec") or {})
        now = micro_time(self._wall())
        spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
        try:
            stored = self.store.update({**lease, "spec": spec})
        except LeaseError as exc:
            self._log("leader election", level="warning", event="release failed", lease=self._lease_name,
                      identity=self.identity, error=str(exc))
            return False
        with self._lock:
            self._lease = stored
        self._log("leader election", event="released", lease=self._lease_name, identity=self.identity)
        return True

    @property
    def _lease_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    # --- one round (the state machine; unit tests drive it with an injected clock) ----------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt to acquire or renew; True when this elector holds the Lease afterwards."""
        began = self._clock()
        now = micro_time(self._wall())
        try:
            lease = self.store.get()
        except LeaseError as exc:
            self._failed(f"reading lease: {exc}")
            return False
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0),
            }
            try:
                stored = self.store.create(body)
            except LeaseError as exc:
                self._failed(f"creating lease: {exc}")
                return False
            self._won(stored, began)
            return True

        spec = lease.get("spec") or {}
        with self._lock:
            if spec != self._observed_spec:
                self._observed_spec = spec
                self._observed_time = self._clock()
            observed_time = self._observed_time
            self._lease = lease
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and observed_time + duration > self._clock():
            with self._lock:
                self._held = False
                self._leading.clear()
            return False  # held by another candidate and not expired
        if holder == self.identity:
            new_spec = self._spec(spec.get("acquireTime") or now, now, spec.get("leaseTransitions") or 0)
        else:
            new_spec = self._spec(now, now, (spec.get("leaseTransitions") or 0) + 1)
        try:
            stored = self.store.update({**lease, "spec": new_spec})
        except LeaseError as exc:
            self._failed(f"updating lease: {exc}")
            return False
        self._won(stored, began)
        return True

    def _spec(self, acquire: str, renew: str, transitions: int) -> dict:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire,
            "renewTime": renew,
            "leaseTransitions": transitions,
        }

    def _won(self, stored: dict, began: float) -> None:
        with self._lock:
            self._lease = stored
            self._observed_spec = stored.get("spec") or {}
            self._observed_time = self._clock()
            self._last_renew = began
            self.last_error = ""
            recovered, self._said_error = self._said_error, ""
            if not self._stop.is_set():  # an attempt in flight when stop() was called does not lead again
                self._held = True
                self._leading.set()
        if recovered:
            self._log("leader election", event="lease requests work again", lease=self._lease_name,
                      identity=self.identity)

    def _failed(self, reason: str) -> None:
        """A request failed: remembered in ``last_error``; logged when the kind of failure changes."""
        with self._lock:
            self.last_error = reason
            kind = re.sub(r"\d+", "#", reason.split(": ", 2)[-1])[:120]  # the failure, not its numbers
            new = kind != self._said_error
            self._said_error = kind
        if new:
            self._log("leader election", level="warning", event="lease request failed", lease=self._lease_name,
                      identity=self.identity, error=reason)

    # --- the thread ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._acquire():
                    return
                self._log("leader election", event="acquired", lease=self._lease_name, identity=self.identity)
                self.transitions += 1
                if self.on_started_leading is not None:
                    self._callback(self.on_started_leading)
                reason = self._renew()
                if reason is None:  # stopped while leading: stop() releases and calls back
                    return
                with self._lock:
                    self._held = False
                    self._leading.clear()
                self._log("leader election", level="warning", event="lost", lease=self._lease_name,
                          identity=self.identity, reason=reason)
                if self.on_stopped_leading is not None:
                    self._callback(self.on_stopped_leading)
        except Exception:  # never let the thread die silently: standing by forever would look healthy
            with self._lock:
                self._held = False
                self._leading.clear()
            _logger.exception("leader election: %s: the election thread failed", self.identity)
            self.last_error = "the election thread failed"

    def _acquire(self) -> bool:
        while not self._stop.is_set():
            if self.try_acquire_or_renew():
                return not self._stop.is_set()
            self._stop.wait(self.retry_period * (1.0 + random.random() * self.jitter))
        return False

    def _renew(self) -> str | None:
        """Renew every retry period until stopped (None) or lost (the reason)."""
        while not self._stop.wait(self.retry_period):
            if self.try_acquire_or_renew():
                continue
            with self._lock:
                holder = (self._observed_spec or {}).get("holderIdentity") or ""
                last = self._last_renew
            if holder and holder != self.identity:
                return f"the lease is held by {holder}"
            if last is None or self._clock() - last >= self.renew_deadline:
                return f"no successful renewal within the renew deadline ({self.renew_deadline:g}s)"
        return None

    @staticmethod
    def _callback(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            _logger.exception("leader election: a callback failed")
