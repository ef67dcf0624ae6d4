"""The reconcile loop: informers fill the cache, changes become keys in the work queue, a worker evaluates each
batch of keys from the current cache (level-based: the event only says *what* to look at) and hands the writes
to the applier.

Keys are objects — ``(kind, namespace, name)`` of a Budget, Run or Reservation (or of a GPULease/Node the model
refuses, for its Event) — or groups expanded when the batch is taken, from the snapshot of that moment:
``("Flavor", "", f)`` every Run and Reservation of GPU flavor f (free capacity and headroom changed),
``("Namespace", "", ns)`` every Run and Reservation of a namespace (its owner changed), ``("All", "", "")``
everything (start-up, periodic resync, leadership gained). A burst of a thousand lease events of one flavor is
one key, one evaluation.

Nothing is written before every kind has been listed once. With ``--manage-leases`` the ledger keeper's writes
(``ledger(snapshot, at)``, reconciler/ledger/) are computed with the status writes of each batch; the seam is
``Reconciler.ledger``. The ledger's writes that were made are told as events.k8s.io/v1 Events
(reconciler/events.py) right after them, best effort: an Event that cannot be written is logged and counted,
never retried and never holds up a write.

Metrics (reconciler/metrics.py): the fleet gauges are recomputed after each batch's own writes, from the
batch's evaluation (the snapshot the status was computed from, which has the ledger's writes applied), so
``/metrics`` agrees with ``budgets usage`` as soon as the batch is written, not at the next resync; the ledger
keeper's Reservation decisions are counted when their write succeeds."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from ..model import Run, Snapshot
from ..timeutil import now_utc
from . import modes
from .actions import AnyWrite, PatchStatus
from .apply import EXISTS, GONE, OK, Applier, Outcome
from .books import Books
from .cache import Cache, Entry, Informer
from .clients import make_api_factory  # noqa: F401  (the CLI imports it from here)
from .keys import (  # noqa: F401  (changed_keys, expand and the keys: imported from here too)
    ALL,
    ALL_KEY,
    FLAVOR,
    GROUP_KINDS,
    NAMESPACE,
    RUN_OTHERS,
    RUN_RESERVATIONS,
    changed_keys,
    expand,
)
from .ledger import apply_writes
from .logs import Logger, NullMetrics
from .modes import ONCE_LIST_ATTEMPTS
from .queue import WorkQueue
from .status import (
    BUDGET,
    BadObject,
    Evaluation,
    ObjKey,
    Stored,
    all_keys,
    next_change,
    status_writes,
)
from .throttle import StatusThrottle
from .writing import KILL_AFTER_ENV, Writer  # noqa: F401  (KILL_AFTER_ENV: imported from here too)

WRITERS = 4  # status writes in flight at once (independent objects)
STATUS_CHUNK = 64  # objects whose status is computed before their writes go out (the next chunk meanwhile)

LedgerPlanner = Callable[[Snapshot, datetime], list[AnyWrite]]
View = tuple[Snapshot, dict[ObjKey, Stored], dict[ObjKey, BadObject]]  # Cache.view()



# --- the reconciler ---------------------------------------------------------------------------------------


@dataclass
class Settings:
    once: bool = False
    dry_run: bool = False
    resync_period: float = 300.0
    manage_leases: bool = False
    request_timeout: float = 30.0
    once_attempts: int = 5  # --once: tries per write before giving up on it
    status_interval: float = 30.0  # --status-interval: figures that follow the fleet, at most this often


class Reconciler:
    def __init__(self, make_api: Callable[[], Any], settings: Settings, *, log: Logger | None = None,
                 metrics: Any = None, elector: Any = None, ledger: LedgerPlanner | None = None,
                 clock: Callable[[], datetime] = now_utc, out: TextIO | None = None):
        self.settings = settings
        self.log = log or Logger()
        self.metrics = metrics or NullMetrics()
        self.elector = elector
        self.ledger = ledger  # the ledger keeper (reconciler/ledger/), with --manage-leases
        self.clock = clock
        self.out = out or sys.stdout
        self.stop = threading.Event()
        self.queue = WorkQueue()
        self.cache = Cache(on_change=self._on_change)
        self._make_api = make_api
        self.api = make_api()
        instance = getattr(elector, "identity", None) or f"{socket.gethostname()}_{os.getpid()}"
        applier = Applier(self.api, self.cache, log=self.log, metrics=self.metrics, elector=elector,
                          timeout=settings.request_timeout, instance=str(instance))
        self.informers: list[Informer] = []
        self.batches = 0
        self.resyncs = 0
        self._wake_at: datetime | None = None
        self._pool = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="writer")
        self.writer = Writer(applier, self.cache, self.log, self.metrics, self._pool)
        self.throttle = StatusThrottle(0 if settings.once or settings.dry_run else settings.status_interval,
                                       self.queue.add_after)
        # the last compute(): (snapshot before the ledger's writes, those writes, the Evaluation of the snapshot
        # after them), from which the fleet gauges are recomputed once the batch is written
        self._evaluated: tuple[Snapshot, list[AnyWrite], Evaluation] | None = None
        self.books = Books()  # each batch's ledger, funding again only the envelopes that changed
        self._listening = False  # until every kind is listed, changes queue nothing: ALL follows the sync

    @property
    def applier(self) -> Applier:
        """What makes each write (reconciler/apply.py), the writer's."""
        return self.writer.applier

    @applier.setter
    def applier(self, applier: Applier) -> None:
        self.writer.applier = applier

    # --- wiring ---------------------------------------------------------------------------------------------

    def _on_change(self, kind: str, old: Entry | None, new: Entry | None) -> None:
        if not self._listening:
            return
        keys = changed_keys(kind, old, new)
        # The objects the event names first; the groups (a flavor, a namespace) are expanded into the tail.
        self.queue.add_all((k for k in keys if k[0] not in GROUP_KINDS), priority=True)
        self.queue.add_all(k for k in keys if k[0] in GROUP_KINDS)

    def start_informers(self, watch: bool) -> None:
        from ..sources.cluster import RESOURCES

        for resource in RESOURCES:
            informer = Informer(resource, self.cache, self._make_api(), self.stop, log=self.log,
                                count_error=self.metrics.count_api_error, watch=watch,
                                max_failures=None if watch else ONCE_LIST_ATTEMPTS)
            self.informers.append(informer)
            informer.start()

    # --- one evaluation -------------------------------------------------------------------------------------

    def compute(self, keys: Iterable[ObjKey] | None, at: datetime, *, view: View | None = None,
                evaluation: Evaluation | None = None) -> tuple[list[AnyWrite], list[AnyWrite]]:
        """The writes for ``keys`` (None: everything) from the cache as it is now (or ``view``, a cache view
        taken at ``at``, with ``evaluation`` of its snapshot): the ledger keeper's (in the order it gives them)
        and the status writes (one per object, independent of each other). An object whose evaluation fails is
        logged and left out (and retried), never the whole batch."""
        ledger_writes, chunks = self.compute_chunks(keys, at, view=view, evaluation=evaluation, chunk=0)
        return ledger_writes, [w for _keys, writes in chunks for w in writes]

    def compute_chunks(self, keys: Iterable[ObjKey] | None, at: datetime, *, view: View | None = None,
                       evaluation: Evaluation | None = None, chunk: int = STATUS_CHUNK
                       ) -> tuple[list[AnyWrite], Iterator[tuple[list[ObjKey], list[AnyWrite]]]]:
        """``compute``, with the status writes as a generator of (objects, their writes), ``chunk`` objects at
        a time (0: all at once) in key order: the writer threads send one chunk's writes while the next chunk is
        computed (a batch of 512 objects is ~10 s of writes at the default QPS and ~1 s of plans at 10,000 runs)."""
        snapshot, stored, bad = view if view is not None else self.cache.view()
        objects = set(all_keys(snapshot)) | set(bad) if keys is None else expand(keys, snapshot, bad)[0]
        ledger_writes: list[AnyWrite] = []
        if evaluation is None or evaluation.snapshot is not snapshot or evaluation.at != at:
            evaluation = Evaluation(snapshot, at, self.books)
        before = snapshot
        if self.ledger is not None and self.settings.manage_leases:
            try:
                ledger_writes = list(self.ledger(snapshot, at))
            except Exception as exc:
                self.log("ledger failed", level="error", error=f"{type(exc).__name__}: {exc}")
        if ledger_writes:
            # status describes the fleet after this pass's own lease writes, not before them (the writes that
            # fail are computed again by the next pass, and the status with them)
            snapshot = apply_writes(snapshot, ledger_writes)
            evaluation = Evaluation(snapshot, at, self.books)
        self._schedule_wake_up(snapshot, at)
        self._evaluated = (before, ledger_writes, evaluation)
        ordered = sorted(objects)
        size = chunk or max(1, len(ordered))

        def chunks() -> Iterator[tuple[list[ObjKey], list[AnyWrite]]]:
            for start in range(0, len(ordered), size):
                part = ordered[start:start + size]
                yield part, self._unsaid(self._status(snapshot, at, stored, set(part), bad, evaluation), bad)

        return ledger_writes, chunks()

    def _update_fleet(self, snapshot: Snapshot, at: datetime, book: Any = None,
                      phases: dict[str, str | None] | None = None) -> None:
        if type(self.metrics).update_fleet is NullMetrics.update_fleet:
            return  # metrics off: no ledger computed for them
        try:
            self.metrics.update_fleet(snapshot, at, book() if callable(book) else book, phases)
        except Exception as exc:
            self.log("metrics failed", level="error", error=f"{type(exc).__name__}: {exc}")

    def _refresh_fleet(self, at: datetime, outcomes: list[Outcome]) -> None:
        """The fleet gauges after this batch's writes, from its evaluation: when every ledger write went in,
        the snapshot the status was computed from is the fleet now, and its ledger is at hand (computed for the
        status, else once here); else the writes that went in are applied to the snapshot before them. The
        Runs' phases are those of the status writes' answers."""
        if self._evaluated is None:
            return
        before, ledger_writes, evaluation = self._evaluated
        self._evaluated = None
        made = {id(o.write) for o in outcomes if o.outcome in (OK, EXISTS, GONE)}
        done = [w for w in ledger_writes if id(w) in made]
        phases = {o.answer.key: o.answer.status.phase for o in outcomes
                  if o.outcome == OK and isinstance(o.answer, Run)}
        if len(done) == len(ledger_writes):
            self._update_fleet(evaluation.snapshot, at, lambda: evaluation.book, phases)
        else:
            self._update_fleet(apply_writes(before, done), at, None, phases)

    def _schedule_wake_up(self, snapshot: Snapshot, at: datetime) -> None:
        """Look at everything again just after the next instant a fact changes by itself (a window opens, an
        ETA passes, a reservation's earliestStart arrives): such changes come with no event."""
        if self.settings.once or self.settings.dry_run:
            return
        when = next_change(snapshot, at)
        if when is None or when == self._wake_at:
            return
        delay = (when - at).total_seconds() + 1.0  # at has whole seconds; be just past the instant
        if delay < self.settings.resync_period:  # else a resync comes first and schedules it then
            self._wake_at = when
            self.queue.add_after(ALL_KEY, delay)
            self.log("wake-up scheduled", at=when.strftime("%Y-%m-%dT%H:%M:%SZ"), inSeconds=f"{delay:g}")

    def _status(self, snapshot: Snapshot, at: datetime, stored: dict[ObjKey, Stored], objects: set[ObjKey],
                bad: dict[ObjKey, BadObject], evaluation: Evaluation) -> list[AnyWrite]:
        """The status writes of ``objects``, all with one Evaluation; if that fails, object by object (the
        failing one is logged and retried)."""
        try:
            return status_writes(snapshot, at, stored, objects, bad, evaluation)
        except Exception:
            return self._one_by_one(snapshot, at, stored, objects, bad)

    def _one_by_one(self, snapshot: Snapshot, at: datetime, stored: dict[ObjKey, Stored], objects: set[ObjKey],
                    bad: dict[ObjKey, BadObject]) -> list[AnyWrite]:
        writes: list[AnyWrite] = []
        for key in sorted(objects):
            try:
                writes += status_writes(snapshot, at, stored, [key], bad)
            except Exception as exc:
                self.log("evaluate failed", level="error", kind=key[0], namespace=key[1], name=key[2],
                         error=f"{type(exc).__name__}: {exc}")
                self.queue.add_rate_limited(key)
        return writes

    def process(self, keys: list[ObjKey]) -> None:
        """Evaluate and write the objects of a batch; groups in it (a flavor, a namespace, everything) are
        expanded from the current snapshot into the queue's tail, minus the objects of this batch. The batch's
        Budgets are evaluated and written first (their usage is the ledger's, cheap): a Budget's status never
        waits behind the plans of the Runs in the same batch; then the ledger keeper's writes and the Runs' and
        Reservations' status, all from the same snapshot and Evaluation."""
        started = time.monotonic()
        at = self.clock()
        groups = [k for k in keys if k[0] in GROUP_KINDS]
        objects = [k for k in keys if k[0] not in GROUP_KINDS]
        if groups:
            snapshot, _stored, bad = self.cache.view()
            expanded, everything = expand(groups, snapshot, bad)
            self.queue.add_all(sorted(expanded - set(objects)))
            if not objects:
                self._schedule_wake_up(snapshot, at)
                if self.ledger is not None and self.settings.manage_leases:
                    objects = []  # the ledger looks at the whole fleet on every batch: run it below
                else:  # a batch too (the fleet gauges of a resync are computed here): its time is observed
                    if everything:
                        self._update_fleet(snapshot, at)
                    self.batches += 1
                    self.metrics.observe_reconcile(time.monotonic() - started)
                    self.metrics.set_queue_depth(self.queue.depth())
                    return
        view = self.cache.view()
        snapshot, stored, bad = view
        evaluation = Evaluation(snapshot, at, self.books)
        outcomes: list[Outcome] = []
        budgets = {k for k in objects if k[0] == BUDGET and k not in bad}
        if budgets and len(budgets) < len(objects):
            outcomes += self.apply([], self._unsaid(self._status(snapshot, at, stored, budgets, bad, evaluation), bad),
                                   at)
            objects = [k for k in objects if k not in budgets]
        ledger_writes, chunks = self.compute_chunks(objects, at, view=view, evaluation=evaluation)
        outcomes += self.writer.apply_chunks(
            ledger_writes, (self.throttle.filter(writes, stored, part) for part, writes in chunks), at)
        self._refresh_fleet(at, outcomes)
        for outcome in outcomes:
            write = outcome.write
            if isinstance(write, PatchStatus) and outcome.outcome in (OK, GONE):
                self.throttle.wrote((write.kind, write.namespace, write.name))
        failed: set[ObjKey] = set()
        for outcome in outcomes:
            if outcome.retry:
                write = outcome.write
                key = (write.kind, write.namespace, write.name)
                failed.add(key)
                delay = self.queue.add_rate_limited(key)
                self.log("retry", level="warning", kind=key[0], namespace=key[1], name=key[2], retryIn=f"{delay:g}s")
        for key in keys:
            if key not in failed:
                self.queue.forget(key)
        self.batches += 1
        elapsed = time.monotonic() - started
        self.metrics.observe_reconcile(elapsed)
        self.metrics.set_queue_depth(self.queue.depth())

    def apply(self, ordered: list[AnyWrite], independent: list[AnyWrite], at: datetime) -> list[Outcome]:
        """``Writer.apply``: the ledger's writes in order, then the status writes on the writer threads."""
        return self.writer.apply(ordered, independent, at)

    def _unsaid(self, writes: list[AnyWrite], bad: dict[ObjKey, BadObject]) -> list[AnyWrite]:
        return self.writer.unsaid(writes, bad)

    def run(self) -> int:
        try:
            if self.settings.once or self.settings.dry_run:
                return modes.run_once(self)
            return modes.run_forever(self)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        self.stop.set()
        self.metrics.set_leader(False)  # it writes no more
        self.queue.shutdown()
        self._pool.shutdown(wait=True)
        for informer in self.informers:
            informer.close()
        self.log("stopped", batches=self.batches, **{f"writes_{k}": v for k, v in sorted(self.applier.counts.items())})
