"""How the reconciler runs: ``sync`` (list every kind once, then listen), ``run_once`` (``--once`` and
``--dry-run``: one evaluation of everything, written or printed) and ``run_forever`` (watching: batches from the
work queue, the periodic resync, leadership gained and lost). :class:`~.loop.Reconciler` holds the state they
work on; ``Reconciler.run`` picks the mode."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from ..errors import UserError
from .actions import AnyWrite
from .cache import wait_synced
from .keys import ALL_KEY
from .queue import batch_limit

if TYPE_CHECKING:
    from .loop import Reconciler

ONCE_LIST_ATTEMPTS = 4  # --once/--dry-run: tries of each list before giving up (0.5 + 1 + 2 s of backoff)
BATCH_LIMIT = 64  # objects evaluated per batch when the queue is short: a resync never holds back a change long


def sync(rec: Reconciler) -> bool:
    """Start the informers and wait until every kind has been listed (False: stopped first)."""
    once = rec.settings.once or rec.settings.dry_run
    rec.start_informers(watch=not once)
    rec.log("starting", mode="dry-run" if rec.settings.dry_run else "once" if once else "watch",
             resyncPeriod=f"{rec.settings.resync_period:g}s")
    if not wait_synced(rec.cache, rec.stop, informers=rec.informers):
        failed = next((i.failed for i in rec.informers if i.failed), "")
        if failed:
            raise UserError(f"{failed} (gave up after {ONCE_LIST_ATTEMPTS} tries)")
        return False
    rec._listening = True  # the keys of what changes from now on (everything is looked at once first)
    rec.log("synced", **{k: v for k, v in rec.cache.counts().items()})
    return True

def run_once(rec: Reconciler) -> int:
    """--once / --dry-run: one evaluation of everything; --dry-run prints the writes (one JSON document)
    instead of making them. Exit code 1 when a write still failed after retries."""
    if not sync(rec):
        return 1
    at = rec.clock()
    ledger_writes, status = rec.compute(None, at)
    writes = ledger_writes + status
    if rec.settings.dry_run:
        rec.out.write(msgspec.json.encode(writes).decode() + "\n")
        rec.out.flush()
        rec.log("dry-run", writes=len(writes))
        return 0
    ordered, independent = ledger_writes, status
    pending: list[AnyWrite] = []
    for attempt in range(rec.settings.once_attempts):
        outcomes = rec.apply(ordered, independent, at)
        pending = [o.write for o in outcomes if o.retry]
        again = {id(w) for w in pending}
        ordered, independent = [w for w in ordered if id(w) in again], [w for w in independent if id(w) in again]
        if not pending or rec.stop.is_set():
            break
        rec.stop.wait(min(5.0, 0.2 * 2**attempt))
    rec.log("done", writes=len(writes), failed=len(pending))
    return 1 if pending else 0

def run_forever(rec: Reconciler) -> int:
    if not sync(rec):
        return 0
    rec.metrics.set_ready(True)
    leading = rec.elector is None
    if leading:
        rec.metrics.set_leader(True)  # jobtree_leader: this replica writes (no leader election: always)
        rec.queue.add(ALL_KEY)
    next_resync = time.monotonic() + rec.settings.resync_period
    while not rec.stop.is_set():
        if rec.elector is not None:
            now_leading = rec.elector.is_leader()
            if now_leading != leading:
                leading = now_leading
                rec.metrics.set_leader(leading)
                rec.log("leadership", leader=leading)
                if leading:
                    rec.queue.add(ALL_KEY)  # a new leader looks at everything once
            if not leading:
                # a standby keeps its cache warm (the informers run) and writes nothing
                rec.stop.wait(0.2)
                if time.monotonic() >= next_resync:
                    next_resync = time.monotonic() + rec.settings.resync_period
                continue
        wait = max(0.0, min(1.0, next_resync - time.monotonic()))
        batch = rec.queue.get_batch(timeout=wait, limit=batch_limit(rec.queue.depth(), BATCH_LIMIT))
        if time.monotonic() >= next_resync:
            next_resync = time.monotonic() + rec.settings.resync_period
            rec.resyncs += 1
            rec.log("resync", number=rec.resyncs)
            rec.queue.add(ALL_KEY)
        if not batch:
            continue
        try:
            rec.process(batch)
        except Exception as exc:  # a bug must not end the loop
            rec.log("batch failed", level="error", error=f"{type(exc).__name__}: {exc}")
            for key in batch:
                rec.queue.add_rate_limited(key)
        finally:
            rec.queue.done(batch)
    return 0
