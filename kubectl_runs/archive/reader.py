"""Reading the archive: ``open_archive`` checks a directory before anything is counted (its manifest, and each
listed file's size, footer, schema version and row count), ``leases_between`` selects the leases that can touch
a window — Parquet min/max statistics on ``start``/``ended`` prune row groups, the manifest prunes whole files —
and rebuilds them as the same ``GPULease`` records the JSON path decodes, for the same engine.
``verify`` checks everything the manifest says, checksums included (``leases archive --verify``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..model import GPULease
from . import db
from .manifest import ArchiveError, Manifest, Partition, read_manifest
from .schema import LEASE_SELECT, lease_of, micros, month_of
from .store import sha256, strays


@dataclass
class Archive:
    directory: Path
    manifest: Manifest
    old_files: frozenset[str] = frozenset()  # files of schema version 1: their rows record no cluster
    cluster: str | None = None  # a report over several clusters: only the rows archived from this context

    def where_cluster(self) -> str:
        """The SQL condition on a row of this archive for the report's cluster (``true``: every row)."""
        return "true" if self.cluster is None else f"cluster = {db.quote(self.cluster)}"

    def scan(self, parts: list[Partition], options: str = "") -> str:
        """The rows of these files, every column of the current schema: a version-1 file's ``cluster`` is NULL."""
        def files(group: list[Partition]) -> str:
            return f"read_parquet([{', '.join(db.quote(self.directory / p.file) for p in group)}]{options})"

        new = [p for p in parts if p.file not in self.old_files]
        old = [p for p in parts if p.file in self.old_files]
        if not old:  # the usual case: the table function itself, as before version 2
            return files(new)
        selects = [f"SELECT *, NULL::VARCHAR AS cluster FROM {files(old)}"]
        if new:
            selects.insert(0, f"SELECT * FROM {files(new)}")
        return "(" + " UNION ALL BY NAME ".join(selects) + ")"

    def files(self, lo: datetime | None = None, hi: datetime | None = None) -> list[Partition]:
        """The partitions whose leases can overlap ``[lo, hi)``: started before ``hi`` and ended after ``lo``."""
        out = []
        for part in self.manifest.partitions:
            if hi is not None and part.first_start >= hi:
                continue
            if lo is not None and (part.last_ended is None or part.last_ended <= lo):
                continue
            out.append(part)
        return out


def open_archive(directory: str | Path) -> Archive:
    """The archive at ``directory``, every listed file checked cheaply (size from the file system; footer,
    schema version and row count from the Parquet footer) so that a damaged archive fails before a row is
    counted."""
    path = Path(directory)
    manifest = read_manifest(path)
    con = db.connect()
    old = set()
    try:
        for part in manifest.partitions:
            _check_size(path, part)
            if db.checked_file(con, path / part.file, part.leases)[1] < 2:
                old.add(part.file)
    finally:
        con.close()
    return Archive(path, manifest, frozenset(old))


def unattributed(archive: Archive) -> int:
    """How many rows of the archive record no cluster (version-1 files; runs that did not know their context)."""
    if not archive.manifest.partitions:
        return 0
    con = db.connect()
    try:
        return con.execute(f"SELECT count(*) FROM {archive.scan(list(archive.manifest.partitions))} "
                           "WHERE cluster IS NULL OR cluster = ''").fetchone()[0]
    except db.Error as exc:
        raise ArchiveError(f"{archive.directory}: cannot read: {db.first_line(exc)}") from None
    finally:
        con.close()


def _check_size(directory: Path, part: Partition) -> None:
    file = directory / part.file
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        raise ArchiveError(f"{file}: missing: the manifest lists it (partition {part.month} is incomplete)") from None
    if size != part.bytes:
        raise ArchiveError(f"{file}: {size} bytes; the manifest says {part.bytes} (truncated or rewritten)")


def leases_between(archives: Iterable[Archive], lo: datetime, hi: datetime,
                   skip: set[tuple[str, str, str]] | None = None) -> list[GPULease]:
    """Every archived lease that held GPUs during ``[lo, hi)`` (``start < hi`` and ``ended > lo``), each lease
    once however many archives hold it, leaving out the keys in ``skip`` (leases read live or from a snapshot).
    Leases that never held a GPU (no end, or ended at their start) are left out, as the audit leaves them out."""
    seen = set(skip or ())
    out: list[GPULease] = []
    con = db.connect()
    try:
        for arch in archives:
            files = arch.files(lo, hi)
            if not files:
                continue
            query = (f"SELECT {LEASE_SELECT} FROM {arch.scan(files)} "
                     f"WHERE {arch.where_cluster()} AND start < make_timestamp({micros(hi)})::TIMESTAMPTZ "
                     f"AND ended > make_timestamp({micros(lo)})::TIMESTAMPTZ AND ended > start")
            try:
                rows = con.execute(query).fetchall()
            except db.Error as exc:
                raise ArchiveError(f"{arch.directory}: cannot read: {db.first_line(exc)}") from None
            for values in rows:
                key = (values[0], values[1], values[2])
                if key in seen:
                    continue
                seen.add(key)
                out.append(lease_of(values))
    finally:
        con.close()
    return out


@dataclass
class Verified:
    archive: Archive
    problems: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)


def verify(directory: str | Path) -> Verified:
    """Everything the manifest says, checked against the files: presence, size, SHA-256, footer, schema
    version, row count, the month and time range of every row, no key twice; files it does not list are named
    (an interrupted run leaves them; the next run deletes them)."""
    path = Path(directory)
    manifest = read_manifest(path)
    result = Verified(Archive(path, manifest))
    con = db.connect()
    try:
        for part in manifest.partitions:
            file = path / part.file
            try:
                _check_size(path, part)
                if sha256(file) != part.sha256:
                    raise ArchiveError(f"{file}: its SHA-256 differs from the manifest's (changed after it was written)")
                db.check_file(con, file, part.leases)
                count, keys, first, last, ended, months = con.execute(
                    f"SELECT count(*), count(DISTINCT (namespace, name, uid)), min(epoch_us(start)), "
                    f"max(epoch_us(start)), max(epoch_us(ended)), count(DISTINCT strftime(start, '%Y-%m')) "
                    f"FROM read_parquet({db.quote(file)})"
                ).fetchone()
            except ArchiveError as exc:
                result.problems.append(exc.message)
                continue
            if keys != count:
                result.problems.append(f"{file}: {count - keys} leases appear twice")
            if count and (months != 1 or month_of(first) != part.month):
                result.problems.append(f"{file}: holds leases that did not start in {part.month}")
            if count and (micros(part.first_start) != first or micros(part.last_start) != last
                          or (ended if part.last_ended is None else micros(part.last_ended)) != ended):
                result.problems.append(f"{file}: its time range differs from the manifest's")
    finally:
        con.close()
    result.stray = [str(p.relative_to(path)) for p in strays(path, manifest)]
    return result
