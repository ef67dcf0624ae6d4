"""``leases archive --snapshot FILE``, with DuckDB reading the leases from the file itself while the loader
checks them on the other core: the loader still decides what the file holds (and names what is wrong in it, in
the same words), but the leases reach DuckDB without being written out again as JSON lines and read back.

1. The file is read, and the loader starts on it as every command loads a file (``sources.files``): in a child
   process where the system forks (Linux), else in a thread (started in step 3). The child checks every object
   as the loader does, but leaves the leases as the file gives them (``load_file_apart``: not put in order, not
   looked for copies; step 4 counts their keys instead), which saves it half a second a million leases;
2. the items' text is found (``_items``: from the top level's keys around it, not a pass over it), and is cut
   into a few JSON arrays at item boundaries, in memory (``memfd``; temporary files where the system has none)
   that DuckDB reads in parallel (a cut in the wrong place cannot parse: the loader's leases are then
   archived, as in step 4);
3. DuckDB reads every GPULease item into the table ``lease_rows`` (the view ``lease_view`` adds the columns
   it leaves out: ``snapshot_sql.DERIVED``; an instant not of the plain form fails the read), sorted as the
   month files are (archive/snapshot_sql.py), in one statement on every core, beside the child. A thread
   loader runs meanwhile: DuckDB holds no GIL, so both run at once, but DuckDB's own thread waits for the GIL
   while the loader decodes, and steps 1-2 cannot overlap the loader; the child process overlaps them and
   holds no GIL of ours (5.4-5.7 s a run against 6.8-9.0 s with the thread, measured before the child left the
   leases apart). Where the time goes: bench/RESULTS.md, "the writer from one JSON snapshot";
4. the loader's error, if it has one, is the command's (a child that refuses the file, or dies, leaves the file
   to the loader in this process, which raises the error in its own words). Otherwise the rows are used only
   when they are the loader's leases: as many, one per key, every instant of a form both read alike. If not (a
   nested List, copies of a lease, an unusual spelling of a time), the loader's leases are archived as before
   (loaded again in this process when the child loaded them: it sends back only the snapshot without its
   leases, and their count). Two copies of a lease, the same or not, are always judged so: by the loader.

The archive's own guarantees are the writer's (archive/store.py): this only fills its table ``staged``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from ..model import Snapshot
from ..sources.files import load_file, load_file_apart, read_file
from . import db
from .schema import micros
from .snapshot_sql import columns, stored_rows, view_columns

PIECE_BYTES = 32 << 20  # the items' text is cut into pieces of about this size (DuckDB reads them in parallel)
MAX_PIECES = 16
FORK = sys.platform == "linux" and hasattr(os, "fork")  # the loader in a child process (else in a thread)
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


class _Items(msgspec.Struct, frozen=True, gc=False):
    items: msgspec.Raw  # required: a file with no top-level items (one object, say) is the loader's alone


_ITEMS = msgspec.json.Decoder(_Items)


@dataclass
class Read:
    """A snapshot file as the loader reads it (``snapshot``, leases included) and, when they are the same
    leases, as rows in DuckDB (``con``'s view ``lease_view`` of the archive's columns and ``month``; None:
    archive ``snapshot.leases``)."""

    snapshot: Snapshot
    con: object | None

    def stage(self, namespace: str | None, before: datetime | None) -> tuple[int, int]:
        """Make the view ``staged`` (archive/store.py) of the closed leases (of ``namespace``; ended, or closed
        without an end started, before ``before``). Returns (open leases, closed ones left out by ``before``)."""
        assert self.con is not None
        where, scope = ["closed"], ""
        if namespace is not None:
            scope = f" WHERE namespace = {db.quote(namespace)}"
            where.append(f"namespace = {db.quote(namespace)}")
        if before is not None:
            where.append(f"epoch_us(coalesce(ended, start)) < {micros(before)}")
        self.con.execute(f"CREATE VIEW staged AS SELECT * FROM lease_view WHERE {' AND '.join(where)}")
        open_, closed = self.con.execute(
            f"SELECT count(*) FILTER (WHERE NOT closed), count(*) FILTER (WHERE closed) FROM lease_rows{scope}"
        ).fetchone()
        staged = self.con.execute("SELECT count(*) FROM staged").fetchone()[0]
        return open_, closed - staged

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


def read(path: str) -> Read | None:
    """The snapshot file ``path`` read so; None when it is not one JSON file (load it as usual). Raises the
    loader's error for a file the loader refuses."""
    found = read_file(path)
    if found is None:
        return None
    name, data = found
    if data.lstrip()[:1] != b"{":
        return None
    with _Loader(name, data) as loader:  # a child process starts loading the file now (a thread: later)
        try:
            items = _items(data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return Read(load_file(name, data), None)  # the loader names what is wrong (or reads what it can)
        con = db.connect()
        try:
            with _pieces(items) as files:
                keys = _keys(con) if _read_rows(con, files, loader) else None  # while the child may still load
            loaded = loader.result()  # the loader's error is raised here
        except BaseException:
            con.close()
            raise
    if keys is None or not _same_leases(keys, loaded.leases):
        con.close()
        return Read(loaded.snapshot if loaded.whole else load_file(name, data), None)
    return Read(loaded.snapshot, con)


def _items(data: bytes) -> memoryview:
    """The text of the top-level ``items`` array, found without reading the items (a decode that skips them is
    0.3 s for 1M leases, before DuckDB can start): its ``[`` is the one of the first ``"items":`` key, its ``]``
    one of the last few of the file, and the pair is taken only when the file with ``[]`` in their place decodes
    with ``[]`` as its items: the ``[`` opens the top level's ``items``, and the ``]`` closes it or comes after
    it in a later key's value (``{"items": [...], "x": [...]}``). The text between is then not one JSON array,
    which DuckDB refuses (it reads nothing else; the loader's leases are then archived, step 4), and everything
    else is the loader's to check. Otherwise the file is decoded with the items skipped (which raises for a file
    that is not a JSON object, or has no top-level ``items``: the loader then reads it alone)."""
    found = _ITEMS_KEY.search(data)
    if found is not None:
        lo = found.end() - 1
        end = len(data)
        for _ in range(_TAIL_TRIES):
            end = data.rfind(b"]", lo + 1, end)
            if end == -1:
                break
            try:
                if bytes(_ITEMS.decode(data[:lo] + b"[]" + data[end + 1:]).items) == b"[]":
                    return memoryview(data)[lo:end + 1]
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                pass
    return memoryview(_ITEMS.decode(data).items)


_ITEMS_KEY = re.compile(rb'"items"\s*:\s*\[')
_TAIL_TRIES = 8  # a "]" in a string after the items (an annotation of the List, say) is passed over


def _read_rows(con, files: list[str], loader: _Loader) -> bool:
    """DuckDB reads the leases (without the GIL) while the loader loads the file: whether DuckDB read them."""
    source = f"read_json([{', '.join(db.quote(f) for f in files)}], format = 'array', columns = {columns()})"
    try:
        con.execute("SET preserve_insertion_order = true")
        loader.go()  # a thread loader takes the GIL once DuckDB lets it go: both run at once
        con.execute(f"CREATE TABLE lease_rows AS {stored_rows(source)} ORDER BY start, namespace, name, uid")
        con.execute(f"CREATE VIEW lease_view AS SELECT {view_columns()} FROM lease_rows")
    except db.Error:
        return False  # text DuckDB does not read as the loader does (or a cut in the wrong place)
    return True


@dataclass
class Loaded:
    """What the loader made of the file: the snapshot (``whole``: with its leases; else without them, which
    the rows stand for) and how many leases it holds (``whole``: one of each; else as the file gives them,
    copies included)."""

    snapshot: Snapshot
    leases: int
    whole: bool


class _Loader:
    """The loader (``sources.files``) over the file's bytes, beside DuckDB. Where the system forks (Linux) it
    runs in a child process, started at once: it holds no GIL of ours, so the text is cut and DuckDB started
    while it loads, and DuckDB's threads never wait for it; the child (``load_file_apart``) sends back the
    snapshot without its leases and their count. When the child refuses the file (or dies), the file is loaded
    here (``load_file``), which raises the loader's own error (or, rarely, reads it: the child ran out of
    memory, say). The child dies with the command's process (``PR_SET_PDEATHSIG``). Elsewhere a thread loads
    it, started when DuckDB lets the GIL go."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data
        self.pid = 0  # the child's, until its result is received
        self.forked = False
        self.pipe = -1
        self.thread: threading.Thread | None = None
        self.loaded: list[Snapshot] = []
        self.failed: list[BaseException] = []

    def __enter__(self) -> _Loader:
        if FORK:
            self._fork()
        return self

    def __exit__(self, *exc) -> None:
        self._reap()
        if self.thread is not None:
            self.thread.join()

    def go(self) -> None:
        if self.forked or self.thread is not None:
            return
        self.thread = threading.Thread(target=self._load, name="snapshot-loader", daemon=True)
        self.thread.start()

    def result(self) -> Loaded:
        if self.forked:
            payload = self._receive()
            if payload is not None:
                snapshot, leases = payload
                return Loaded(snapshot, leases, whole=False)
            snapshot = load_file(self.name, self.data)  # raises the loader's error
            return Loaded(snapshot, len(snapshot.leases), whole=True)
        if self.thread is None:
            self.go()
        assert self.thread is not None
        self.thread.join()
        if self.failed:
            raise self.failed[0]
        return Loaded(self.loaded[0], len(self.loaded[0].leases), whole=True)

    def _load(self) -> None:
        try:
            self.loaded.append(load_file(self.name, self.data))
        except BaseException as exc:  # raised again by result(), in the command's thread
            self.failed.append(exc)

    def _fork(self) -> None:
        read_end, write_end = os.pipe()
        parent = os.getpid()
        with warnings.catch_warnings():  # (Python 3.12+ warns of fork() beside threads: the child runs no C library's threads' code)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: load, send, exit without running anything of the parent's
            status = 1
            try:
                os.close(read_end)
                _die_with(parent)
                try:
                    snapshot, leases = load_file_apart(self.name, self.data, "GPULease")
                    payload = (snapshot, len(leases))  # (the leases stay alive: the child exits without freeing them)
                except BaseException:
                    payload = None  # the parent loads the file itself: the error in its own words
                with os.fdopen(write_end, "wb") as out:
                    out.write(pickle.dumps(payload, pickle.HIGHEST_PROTOCOL))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        self.pid, self.pipe, self.forked = pid, read_end, True

    def _receive(self) -> tuple[Snapshot, int] | None:
        """The child's payload, once it has sent all of it (a pickle cut short does not load). The child is
        reaped in the background: freeing its memory as it exits takes a while, and nothing here waits for it."""
        with os.fdopen(self.pipe, "rb") as source:
            self.pipe = -1
            blob = source.read()
        pid, self.pid = self.pid, 0
        threading.Thread(target=os.waitpid, args=(pid, 0), name="snapshot-loader-reaper", daemon=True).start()
        try:
            return pickle.loads(blob) if blob else None
        except Exception:  # anything the child sent that does not read: load here
            return None

    def _reap(self) -> None:
        """Stop a child that has not sent its result (the run failed or was interrupted first)."""
        if self.pipe != -1:
            os.close(self.pipe)
            self.pipe = -1
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0


def _die_with(parent: int) -> None:
    """In the child: be killed when the command's process dies (SIGKILL, say) rather than load on for nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl here: the child ends when it has loaded the file
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def _same_leases(keys: tuple[int, int], leases: int) -> bool:
    """The rows (``keys``: how many, and how many keys) are the loader's leases: one per (namespace, name), as
    many (every instant plain: the read fails otherwise). (The loader read every item DuckDB read: the top
    level's items, ``_items``; equal counts of distinct keys make them the same leases. A file with two copies
    of a lease never passes: the child counts copies, and the loader in this process keeps one of two
    identical copies. The keys are counted by their hashes: two keys of one hash can only make the count
    short, which sends the run to the loader's leases.)"""
    total, distinct = keys
    return total == distinct == leases


def _keys(con) -> tuple[int, int]:
    """The rows, and their distinct (namespace, name) keys (by hash), for ``_same_leases``."""
    return con.execute("SELECT count(*), count(DISTINCT hash(namespace, name)) FROM lease_rows").fetchone()


@contextmanager
def _pieces(text) -> Iterator[list[str]]:
    """The items' JSON array as a few JSON arrays of whole items, as files DuckDB can open (closed after)."""
    view = memoryview(text).cast("B")
    size = len(view)
    count = max(1, min(MAX_PIECES, size // PIECE_BYTES))
    spans = []
    start = 0
    for i in range(1, count):
        found = _BOUNDARY.search(view, max(start, size * i // count))
        if found is None:
            break
        spans.append((start, found.start() + 1))  # up to the "}" of an item; the next piece starts at its "{"
        start = found.end() - 1
    spans.append((start, size))
    with ExitStack() as stack:
        files = []
        for i, (lo, hi) in enumerate(spans):
            head = b"" if i == 0 else b"["  # the first piece has the array's "[", the last its "]"
            tail = b"" if i == len(spans) - 1 else b"]"
            files.append(stack.enter_context(_memory_file(head, view[lo:hi], tail)))
        yield files


@contextmanager
def _memory_file(head: bytes, body: memoryview, tail: bytes) -> Iterator[str]:
    """``head + body + tail`` as a file: an anonymous in-memory file where Linux has them, else a temporary one."""
    fd, path = -1, ""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        try:
            fd = memfd("kubectl-runs-leases")
            path = f"/proc/self/fd/{fd}"
        except OSError:
            fd = -1
    if fd == -1:
        fd, path = tempfile.mkstemp(prefix="kubectl-runs-leases-", suffix=".json")
    try:
        for part in (head, body, tail):
            written = 0
            while written < len(part):
                written += os.write(fd, part[written:written + (64 << 20)])
        yield path
    finally:
        os.close(fd)
        if not path.startswith("/proc/"):
            Path(path).unlink(missing_ok=True)
