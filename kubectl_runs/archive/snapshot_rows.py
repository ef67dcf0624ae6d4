"""``leases archive --snapshot FILE``, with DuckDB reading the leases from the file itself while the loader
checks them on the other core: the loader still decides what the file holds (and names what is wrong in it, in
the same words), but the leases reach DuckDB without being written out again as JSON lines and read back.

1. The file is read and its top level decoded with the items left as text (one pass that skips them);
2. the items' text is cut into a few JSON arrays at item boundaries, in memory (``memfd``; temporary files where
   the system has none), which DuckDB reads in parallel (a cut in the wrong place cannot parse: the loader's
   leases are then archived, as in step 4);
3. DuckDB reads every GPULease item into the table ``lease_rows``, sorted as the month files are
   (archive/snapshot_sql.py), while a thread loads the file as every command does (``sources.files``): DuckDB
   holds no GIL while it runs, so both run at once. (A forked child process as the loader, which would also
   overlap steps 1 and 2, measured no better on the shared 2-core machine, in the benchmark's process that has
   just decoded the same file: copy-on-write of its large heap is one likely cost.)
4. the loader's error, if it has one, is the command's. Otherwise the rows are used only when they are the
   loader's leases: as many, one per key, every instant of a form both read alike. If not (a nested List, copies
   of a lease, an unusual spelling of a time), the loader's leases are archived as before.

The archive's own guarantees are the writer's (archive/store.py): this only fills its table ``staged``.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from ..model import Snapshot
from ..sources.files import load_file, read_file
from . import db
from .schema import COLUMN_NAMES, micros
from .snapshot_sql import columns, select_rows

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
    try:
        items = _ITEMS.decode(data).items
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return Read(load_file(name, data), None)  # the loader names what is wrong (or reads what it can)
    con = db.connect()
    try:
        with _pieces(items) as files:
            snapshot, rows = _read_rows(con, files, name, data)
    except BaseException:
        con.close()
        raise
    if not rows or not _same_leases(con, snapshot):
        con.close()
        return Read(snapshot, None)
    return Read(snapshot, con)


def _read_rows(con, files: list[str], name: str, data: bytes) -> tuple[Snapshot, bool]:
    """DuckDB reads the leases (without the GIL) while a thread loads the file: (the loader's snapshot,
    whether DuckDB read the leases). The loader's error is raised here."""
    loaded: list[Snapshot] = []
    failed: list[BaseException] = []
    go = threading.Event()

    def load() -> None:
        go.wait()
        try:
            loaded.append(load_file(name, data))
        except BaseException as exc:  # raised again below, in the command's thread
            failed.append(exc)

    thread = threading.Thread(target=load, name="snapshot-loader", daemon=True)
    thread.start()
    source = f"read_json([{', '.join(db.quote(f) for f in files)}], format = 'array', columns = {columns()})"
    rows = True
    try:
        con.execute("SET preserve_insertion_order = true")
        go.set()  # the loader takes the GIL once DuckDB lets it go: both run at once
        con.execute(f"CREATE TABLE lease_rows AS SELECT * FROM ({select_rows(source)}) "
                    "ORDER BY start, namespace, name, uid")
    except db.Error:
        rows = False  # text DuckDB does not read as the loader does (or a cut in the wrong place)
    finally:
        go.set()
        thread.join()
    if failed:
        raise failed[0]
    return loaded[0], rows


def _same_leases(con, snapshot: Snapshot) -> bool:
    """The rows are the loader's leases: one per (namespace, name), as many, every instant plain. (The loader
    read every item DuckDB read; equal counts of distinct keys make them the same leases, and the loader holds
    copies of a lease only when they are identical.)"""
    total, distinct, plain = con.execute(
        "SELECT count(*), count(DISTINCT (namespace, name)), count(*) FILTER (WHERE plain) FROM lease_rows").fetchone()
    return total == distinct == plain == len(snapshot.leases)


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
