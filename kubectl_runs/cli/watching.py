"""``-w/--watch``: print a report, then print it again each time its content changes.

List once (the command's own load: the same errors as without ``-w``), print, then watch the kinds the report
reads with the informers of ``sources.informer`` (the reconciler's: list, watch from the list's resourceVersion,
resume a closed watch, re-list on 410 Gone) into a ``WatchCache``. After a change, wait for a quiet window
(``QUIET`` seconds without another change, at most ``MAX_DELAY`` after the first) so that a burst is evaluated
once, build the snapshot from the cache, evaluate the report and print it only when its content differs from
the block printed last.

"Content" is judged at the instant of the last block: a change of objects that the report does not show, or
the clock alone moving (consumed GPU-hours, countdowns), prints nothing. When the objects do change what the
report says, the new block is evaluated at the wall clock (or at ``--at``).

Exit codes: 0 when ``--timeout`` ends the watch, when ``plan -w`` sees its run Running (or finished), and when
stdout is closed (SIGPIPE: ``| head``); 1 when ``plan -w --timeout`` ends before the run is Running, or the
report fails (its run deleted, …); 2 for usage (``--snapshot``); 130 on Ctrl-C."""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from ..errors import ExitCode, UsageError, UserError
from ..timeutil import MAX_DURATION_SECONDS, TIMEOUT_UNITS, duration_seconds, now_utc
from .watch_text import QUIET, block, content, settle

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..sources.watchcache import WatchCache
    from .options import Command

POLL = 0.1  # seconds: how often the waits look at the clock (and let Ctrl-C in)
FINISHED_PHASES = {"Running", "Succeeded", "Failed"}
INTERRUPTED = 130  # 128 + SIGINT


def watch_timeout(text: str | None) -> float | None:
    """``--timeout``: seconds (0 or absent = no limit); a usage error when it is not a duration."""
    if text is None:
        return None
    seconds = duration_seconds(text.strip(), TIMEOUT_UNITS, bare=True)
    if seconds is None or seconds > MAX_DURATION_SECONDS:
        raise UsageError(f"--timeout: {text!r} is not a duration (examples: 0, 30s, 5m, 1h)")
    return seconds or None


def watch(cmd: Command) -> int:
    opts = cmd.opts
    if not opts.watch:
        raise UsageError("--output-watch-events and --timeout go with -w/--watch")
    if opts.snapshots:
        raise UsageError("-w/--watch follows a cluster: it cannot be used with --snapshot (a snapshot never changes)")
    timeout = watch_timeout(opts.watch_timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        return _Watch(cmd, deadline).run()
    except BrokenPipeError:  # `| head -1`: the reader is gone, which is how a pipeline ends a watch
        from .main import _silence_stdout

        _silence_stdout()
        return int(ExitCode.OK)
    except KeyboardInterrupt:  # Ctrl-C: how a watch is normally ended; 130 as a shell reports SIGINT, no words
        return INTERRUPTED


class _Notices:
    """The informers' log, for a user: one stderr line when the watch is interrupted (a closed connection, an
    API server restarting, a 410 Gone), however many kinds notice it; the informers resume by themselves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.said = False

    def log(self, message: str, level: str = "info", **fields: Any) -> None:
        if message not in ("relist", "error"):
            return
        with self.lock:
            if self.said:
                return
            self.said = True
        why = fields.get("reason") or "error"
        detail = fields.get("detail") or ""
        click.echo(f"note: the watch was interrupted ({why}{': ' + detail if detail else ''}); resuming "
                   "(re-listing where needed)", err=True)


class _Watch:
    def __init__(self, cmd: Command, deadline: float | None):
        self.cmd = cmd
        self.opts = cmd.opts
        self.deadline = deadline
        self.last = ""  # the content of the block printed last
        self.last_at: datetime = self.opts.wall_clock

    def run(self) -> int:
        cmd, opts = self.cmd, self.opts
        snapshot = cmd.load()
        self.last_at = opts.evaluation_time(snapshot)
        doc = cmd.evaluate(snapshot)
        self.emit(doc, self.last_at, [])
        if self.done(snapshot):
            return int(ExitCode.OK)
        stop = threading.Event()
        store, informers = _start(cmd, stop)
        try:
            return self.follow(store, stop, informers)
        finally:
            stop.set()
            for informer in informers:
                informer.close()

    def follow(self, store: WatchCache, stop: threading.Event, informers: list) -> int:
        from ..sources.informer import wait_synced

        while not wait_synced(store, stop, timeout=POLL, informers=informers):
            if self.expired():
                return self.timed_out()
        store.changes()  # the first lists name every object: not what changed since our own load
        seen = -1  # but they are evaluated at once: what changed between our load and theirs is printed
        pending: list = []
        while True:
            if not self.wait_change(store, seen):
                return self.timed_out()
            seen = self.quiet(store)
            pending.extend(store.changes())
            snapshot = store.snapshot()
            printed = self.evaluate(snapshot, pending)
            if printed:
                pending = []
            if self.done(snapshot):
                return int(ExitCode.OK)

    # --- waiting --------------------------------------------------------------------------------------------

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def wait_change(self, store: WatchCache, seen: int) -> bool:
        """Until the store moved past ``seen``; False when the deadline came first."""
        with store.changed:
            while store.version == seen:
                if self.expired():
                    return False
                store.changed.wait(POLL)
        return True

    def quiet(self, store: WatchCache) -> int:
        """Until QUIET seconds pass without a change (at most MAX_DELAY): a burst is evaluated once."""
        first = last = time.monotonic()
        version = store.version
        while True:
            now = time.monotonic()
            wait = settle(first, last, now)
            if wait <= 0 or self.expired():
                return version
            with store.changed:
                store.changed.wait(min(wait, POLL))
                if store.version != version:
                    version, last = store.version, time.monotonic()

    # --- evaluating and printing ----------------------------------------------------------------------------

    def evaluate(self, snapshot: Snapshot, changes: list) -> bool:
        """Print the report when its content changed; True when it printed."""
        cmd, opts = self.cmd, self.opts
        fmt, no_headers = cmd.fmt, opts.no_headers
        if opts.at is None:
            opts.wall_clock = self.last_at  # first judged at the last block's instant: the clock alone is no change
            if content(cmd.evaluate(snapshot), fmt, no_headers) == self.last:
                return False
            opts.wall_clock = now_utc()
        doc = cmd.evaluate(snapshot)
        if content(doc, fmt, no_headers) == self.last:
            return False
        self.last_at = opts.evaluation_time(snapshot)
        self.emit(doc, self.last_at, changes)
        return True

    def emit(self, doc: Any, at: datetime, changes: list) -> None:
        cmd, opts = self.cmd, self.opts
        self.last = content(doc, cmd.fmt, opts.no_headers)
        out, err = block(doc, cmd.fmt, at, changes if opts.watch_events else None, no_headers=opts.no_headers)
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
        sys.stdout.write(out)
        sys.stdout.flush()  # streamed as it happens, to a pipe too

    # --- ending -------------------------------------------------------------------------------------------

    def waits_for_running(self) -> bool:
        return bool(getattr(self.cmd, "watch_until_running", False))

    def done(self, snapshot: Snapshot) -> bool:
        if not self.waits_for_running():
            return False
        run = self.cmd.run_of(snapshot)
        phase = run.status.phase if run.status is not None else None
        return str(getattr(phase, "value", phase)) in FINISHED_PHASES

    def timed_out(self) -> int:
        if self.waits_for_running():
            raise UserError(f"timed out after {self.opts.watch_timeout} waiting for run {self.cmd.run_name} to be "
                            "Running")
        return int(ExitCode.OK)


def resources_of(cmd: Command) -> list[tuple[Any, bool]]:
    """The kinds a report reads, as a live load lists them (sources.cluster.load_cluster), each with whether a
    404 (its CRD not installed) means no objects."""
    from ..sources.cluster import POD_RESOURCES, QUEUE_RESOURCES, RESOURCES

    if cmd.pods:  # `pending`, `explain pod`: Pods, Warning Events, ResourceQuotas, LimitRanges and DRA's kinds
        from ..sources.dra import served_claim_resources  # as a load reads them

        claims = served_claim_resources(cmd.opts.source(None))
        return [(r, r.kind != "Node") for r in (*RESOURCES, *QUEUE_RESOURCES, *POD_RESOURCES, *claims)]
    if cmd.queues:
        return [(RESOURCES[0], False), *((r, True) for r in QUEUE_RESOURCES)]
    return [(r, False) for r in RESOURCES]


def _start(cmd: Command, stop: threading.Event) -> tuple[WatchCache, list]:
    from ..sources.watchcache import start_informers

    return start_informers(cmd.opts.source(None), resources_of(cmd), stop, _Notices().log)


__all__ = ["QUIET", "resources_of", "watch", "watch_timeout"]
