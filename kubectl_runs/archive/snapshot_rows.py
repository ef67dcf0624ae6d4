"""``leases archive --snapshot FILE``, with DuckDB reading the leases from the file itself while the loader
checks them on the other core: the loader still decides what the file holds (and names what is wrong in it, in
the same words), but the leases reach DuckDB without being written out again as JSON lines and read back.

1. The file is read and its top level decoded with the items left as text (one pass that skips them);
2. the items' text is cut into a few JSON arrays at item boundaries, in memory (``memfd``; temporary files where
   the system has none), which DuckDB reads in parallel (a cut in the wrong place cannot parse: the loader's
   leases are then archived, as in step 4);
3. DuckDB reads every GPULease item into the table ``lease_rows``, sorted as the month files are
   (archive/snapshot_sql.py), while the loader loads the file as every command does (``sources.files``): in a
   child process forked once the file is read (Linux; it sends back its error, or the nodes, stamp, notes and
   count of leases), so that it runs during steps 1 and 2 as well; elsewhere in a thread, which runs while
   DuckDB holds no GIL;
4. the loader's error, if it has one, is the command's. Otherwise the rows are used only when they are the
   loader's leases: as many, one per key, every instant of a form both read alike. If not (a nested List, copies
   of a lease, an unusual spelling of a time), the loader's leases are archived as before (loaded again here when
   the loader ran in a child).

The archive's own guarantees are the writer's (archive/store.py): this only fills its table ``staged``.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from ..model import Node, Snapshot
from ..sources.files import SnapshotError, load_file, read_file
from . import db
from .schema import COLUMN_NAMES, micros
from .snapshot_sql import columns, select_rows

FORK = sys.platform == "linux" and hasattr(os, "fork")  # the loader runs in a child process (else a thread)
PIECE_BYTES = 32 << 20  # the items' text is cut into pieces of about this size (DuckDB reads them in parallel)
MAX_PIECES = 16
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


class _Items(msgspec.Struct, frozen=True, gc=False):
    items: msgspec.Raw = msgspec.Raw(b"[]")


_ITEMS = msgspec.json.Decoder(_Items)


@dataclass
class Read:
    """A snapshot file as the loader reads it (``snapshot``, leases included) and, when they are the same
    leases, as rows in DuckDB (``con``'s table ``lease_rows``; None: archive ``snapshot.leases``)."""

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
        self.con.execute(f"CREATE VIEW staged AS SELECT {', '.join(COLUMN_NAMES)}, month FROM lease_rows "
                         f"WHERE {' AND '.join(where)}")
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
    loader = _Loader(name, data)  # before DuckDB starts a thread: a child process is forked now
    try:
        items = _ITEMS.decode(data).items
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        loader.discard()
        return Read(load_file(name, data), None)  # the loader names what is wrong (or reads what it can)
    con = db.connect()
    try:
        with _pieces(items) as files:
            rows = _read_rows(con, files, loader)
        snapshot, leases = loader.result()
    except BaseException:
        loader.discard()
        con.close()
        raise
    if rows and _same_leases(con, leases):
        return Read(snapshot, con)
    con.close()
    return Read(snapshot if len(snapshot.leases) == leases else load_file(name, data), None)


def _read_rows(con, files: list[str], loader: _Loader) -> bool:
    """DuckDB reads the leases into ``lease_rows`` while the loader runs (False: DuckDB could not read them)."""
    source = f"read_json([{', '.join(db.quote(f) for f in files)}], format = 'array', columns = {columns()})"
    try:
        con.execute("SET preserve_insertion_order = true")
        loader.go()  # a thread takes the GIL once DuckDB lets it go: both run at once
        con.execute(f"CREATE TABLE lease_rows AS SELECT * FROM ({select_rows(source)}) "
                    "ORDER BY start, namespace, name, uid")
    except db.Error:
        return False  # text DuckDB does not read as the loader does (or a cut in the wrong place)
    finally:
        loader.go()
    return True


class _Summary(msgspec.Struct, frozen=True, gc=False):
    """What a loader in a child process sends back: its error, or what the archive needs of the snapshot."""

    error: str | None = None
    nodes: list[Node] = []
    taken_at: str | None = None  # RFC 3339 text: the instant and its offset as the loader read them
    notes: list[str] = []
    leases: int = 0


class _Loader:
    """``sources.files.load_file`` on the file beside DuckDB: in a child process where the system forks (it then
    also runs while this process reads the file's top level), else in a thread (it runs while DuckDB, holding no
    GIL, reads the leases). ``result()`` is (the snapshot — without its leases from a child —, its lease count);
    it raises the loader's error."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data
        self.pid = -1
        self.pipe = -1
        self.thread: threading.Thread | None = None
        self.started = threading.Event()
        self.outcome: list[object] = []
        if FORK:
            self._fork()
        else:
            self.thread = threading.Thread(target=self._in_thread, name="snapshot-loader", daemon=True)
            self.thread.start()

    def go(self) -> None:
        self.started.set()

    def _in_thread(self) -> None:
        self.started.wait()
        try:
            self.outcome.append(load_file(self.name, self.data))
        except BaseException as exc:  # raised again by result(), in the command's thread
            self.outcome.append(exc)

    def _fork(self) -> None:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: load, send the summary, exit without running the parent's cleanup
            code = 1
            try:
                os.close(read_end)
                try:
                    loaded = load_file(self.name, self.data)
                    taken = None if loaded.taken_at is None else msgspec.json.decode(
                        msgspec.json.encode(loaded.taken_at))
                    summary = _Summary(nodes=list(loaded.nodes), taken_at=taken, notes=list(loaded.notes),
                                       leases=len(loaded.leases))
                except SnapshotError as exc:
                    summary = _Summary(error=str(exc))
                payload = memoryview(msgspec.json.encode(summary))
                while payload:
                    payload = payload[os.write(write_end, payload):]
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        self.pid, self.pipe = pid, read_end

    def result(self) -> tuple[Snapshot, int]:
        if self.thread is not None:
            self.go()
            self.thread.join()
            outcome = self.outcome[0]
            if isinstance(outcome, BaseException):
                raise outcome
            assert isinstance(outcome, Snapshot)
            return outcome, len(outcome.leases)
        chunks = []
        while chunk := os.read(self.pipe, 1 << 20):
            chunks.append(chunk)
        self._reap()
        if self.status != 0 or not chunks:  # the child failed otherwise (out of memory, say): load here
            loaded = load_file(self.name, self.data)
            return loaded, len(loaded.leases)
        summary = msgspec.json.decode(b"".join(chunks), type=_Summary)
        if summary.error is not None:
            raise SnapshotError(summary.error)
        taken = None if summary.taken_at is None else msgspec.json.decode(
            msgspec.json.encode(summary.taken_at), type=datetime)
        return Snapshot(nodes=tuple(summary.nodes), taken_at=taken, notes=tuple(summary.notes)), summary.leases

    def _reap(self) -> None:
        os.close(self.pipe)
        self.pipe = -1
        _pid, status = os.waitpid(self.pid, 0)
        self.status = status
        self.pid = -1

    def discard(self) -> None:
        """Stop waiting for it (the command failed or took another path): a child is killed and reaped."""
        if self.thread is not None:
            self.go()
            self.thread.join()
        elif self.pid > 0:
            import signal

            os.kill(self.pid, signal.SIGKILL)  # it only reads: nothing of it is left half-done
            self._reap()


def _same_leases(con, leases: int) -> bool:
    """The rows are the loader's leases: one per (namespace, name), as many, every instant plain. (The loader
    read every item DuckDB read; equal counts of distinct keys make them the same leases, and the loader holds
    copies of a lease only when they are identical.)"""
    total, distinct, plain = con.execute(
        "SELECT count(*), count(DISTINCT (namespace, name)), count(*) FILTER (WHERE plain) FROM lease_rows").fetchone()
    return total == distinct == plain == leases


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
