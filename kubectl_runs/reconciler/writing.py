"""The write side of a batch (reconciler/loop.py): the ledger keeper's writes one after the other, then the
status writes on the writer threads; the Events of the ledger's writes that were made; the keeper's Reservation
decisions counted; an Event about an object whose status we do not write said once per version of it.

``KILL_AFTER_ENV`` (tests only): ``"<text>[#n]"`` kills the process (SIGKILL) right after the n-th write (default
1st) whose cause contains ``<text>`` — a crash between two writes, on purpose (tests/integration/test_ledger_live.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from ..model import Reservation
from .actions import AnyWrite, Create, PatchStatus, RecordEvent
from .apply import OK, Applier, Outcome
from .cache import Cache
from .events import ledger_events
from .status import STATUS_KINDS, BadObject, ObjKey

KILL_AFTER_ENV = "KUBECTL_RUNS_TEST_KILL_AFTER"


class Writer:
    def __init__(self, applier: Applier, cache: Cache, log: Any, metrics: Any, pool: ThreadPoolExecutor):
        self.applier = applier
        self.cache = cache
        self.log = log
        self.metrics = metrics
        self._pool = pool
        self._said: set[tuple[ObjKey, str]] = set()  # Events recorded for objects without a status we write
        text, _, nth = os.environ.get(KILL_AFTER_ENV, "").partition("#")
        self._kill_after = (text, int(nth or 1)) if text else None

    def unsaid(self, writes: list[AnyWrite], bad: dict[ObjKey, BadObject]) -> list[AnyWrite]:
        """Events about objects whose status we do not write are said once per version of the object."""
        out = []
        for write in writes:
            if isinstance(write, RecordEvent) and write.kind not in STATUS_KINDS:
                key = (write.kind, write.namespace, write.name)
                version = bad[key].resource_version if key in bad else ""
                if (key, version) in self._said:
                    continue
            out.append(write)
        return out

    def apply(self, ordered: list[AnyWrite], independent: list[AnyWrite], at: datetime) -> list[Outcome]:
        """``ordered`` one after the other (the ledger's writes may depend on each other), then
        ``independent`` (one status write per object) on the writer threads (loop.WRITERS)."""
        return self.apply_chunks(ordered, [independent], at)

    def apply_chunks(self, ordered: list[AnyWrite], chunks: Iterable[list[AnyWrite]], at: datetime) -> list[Outcome]:
        """``apply``, the independent writes given in chunks: each chunk goes to the writer threads as soon as it
        is taken, so a generator computes its next chunk while the last one is being written. The outcomes are in
        the writes' order."""
        outcomes = self._in_order(ordered, at)
        self._count_decisions(outcomes)
        self._report(outcomes, at)
        sent = []
        for chunk in chunks:
            sent += [self._pool.submit(self.applier.apply, write, at) for write in chunk]
        outcomes += [future.result() for future in sent]
        for outcome in outcomes:
            write = outcome.write
            if isinstance(write, RecordEvent) and not outcome.retry and outcome.outcome != "skipped":
                key = (write.kind, write.namespace, write.name)
                _snapshot, _stored, bad = self.cache.view()
                self._said.add((key, bad[key].resource_version if key in bad else ""))
        return outcomes

    def _in_order(self, writes: list[AnyWrite], at: datetime) -> list[Outcome]:
        """One after the other; after a status write that is not written, the rest is skipped: the ledger's
        later writes assume it (a victim's closure its Reservation's recorded decision, a new lease the closures
        that freed its slots). The next pass computes them again from what was written. A Create that fails only
        leaves GPUs free, so the writes after it still go out (a namespace that refuses them holds up no other)."""
        outcomes = []
        failed: AnyWrite | None = None
        for write in writes:
            if failed is not None:
                outcome = Outcome(write, "skipped", f"{failed.kind} {failed.key} was not written")
                self.log("write", level="warning", action=type(write).__name__, kind=write.kind,
                         namespace=write.namespace, name=write.name, outcome=outcome.outcome, cause=write.cause,
                         detail=outcome.detail)
                outcomes.append(outcome)
                continue
            outcome = self.applier.apply(write, at, echo=True)
            outcomes.append(outcome)
            if outcome.outcome not in ("ok", "exists", "gone") and not isinstance(write, Create):
                failed = write
            elif self._kill_after is not None and self._kill_after[0] in write.cause:
                text, left = self._kill_after
                self._kill_after = (text, left - 1)
                if left <= 1:
                    self.log("test hook: killed after this write", level="warning", env=KILL_AFTER_ENV)
                    os.kill(os.getpid(), signal.SIGKILL)
        return outcomes

    def _report(self, outcomes: list[Outcome], at: datetime) -> None:
        """The Events of the ledger's writes that were made (``ok``: not ``exists``/``gone``/failed/skipped),
        best effort: their outcomes are logged and counted but not returned, so an Event that fails is never
        retried and never makes the batch fail (a resync would not say it again either: its write is done)."""
        done = [(o.write, o.answer) for o in outcomes if o.outcome == OK]
        if not done:
            return
        try:
            events = ledger_events(done, self.cache.view()[0])
        except Exception as exc:  # a bug here must not touch the ledger
            self.log("events failed", level="error", error=f"{type(exc).__name__}: {exc}")
            return
        for event in events:
            self.applier.apply(event, at)

    def _count_decisions(self, outcomes: list[Outcome]) -> None:
        """The ledger keeper's Reservation decisions (Activated with its actions, Failed with its reason) whose
        write succeeded: counted here, once (a pass that finishes a recorded activation writes no decision)."""
        for outcome in outcomes:
            write = outcome.write
            if (outcome.outcome != OK or write.kind != "Reservation" or not isinstance(write, PatchStatus)
                    or write.status.get("state") not in ("Activated", "Failed")):
                continue
            reservation = outcome.answer if isinstance(outcome.answer, Reservation) else \
                self.cache.view()[0].reservations_by_key.get(write.key)
            scope = reservation.spec.scope if reservation is not None else None
            try:
                self.metrics.count_decision(scope.flavor if scope else "", scope.domain if scope else None,
                                            write.status)
            except Exception as exc:  # a metric must never hold up the ledger
                self.log("metrics failed", level="error", error=f"{type(exc).__name__}: {exc}")
