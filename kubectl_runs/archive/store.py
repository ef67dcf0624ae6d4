"""Writing the archive (``leases archive --to DIR``): closed leases into one Parquet file per month of start,
sorted by start, merged with what the archive already holds, keyed by (namespace, name, uid) so that archiving a
lease again never adds a row.

A run, step by step (``KUBECTL_RUNS_ARCHIVE_CRASH=<step>`` kills the process with SIGKILL after that step, for
the crash tests):

1. ``cleaned``: files of an earlier run that no manifest lists (it was killed) are deleted;
2. ``staged``: the new leases go to ``.staging/leases.jsonl`` (their JSON lines), which DuckDB reads into rows
   (archive/staging.py) — or, from a JSON snapshot file, DuckDB has read them from the file already
   (archive/snapshot_rows.py, ``archive_staged``);
3. ``partition``: for each month with leases the archive does not hold yet, the month's file is rewritten
   (old rows + new rows, sorted) under a new name: a temporary file, fsync, rename, fsync of the directory;
4. ``manifest``: the new manifest replaces the old one atomically — the commit point;
5. ``done``: the files the new manifest no longer lists, and the staging directory, are deleted.

A crash before step 4 leaves the old manifest, which lists only old files: the archive is as it was. A crash
after it leaves the new archive with some unlisted old files, which the next run (or ``--verify``) names and
the next run deletes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import signal
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from ..model import GPULease
from . import db
from .manifest import (
    LEGACY_MANIFEST,
    MANIFEST,
    ArchiveError,
    ArchiveRun,
    Manifest,
    Partition,
    has_manifest,
    migrate,
    read_manifest,
    sync_directory,
    write_manifest,
)
from .schema import (
    COLUMN_NAMES,
    LEASE_COLUMN_NAMES,
    PARTITION,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    instant,
    month_of,
)
from .staging import json_columns, select_rows

CRASH_ENV = "KUBECTL_RUNS_ARCHIVE_CRASH"
STAGING = ".staging"
# ours: the partitions, the staging directory, the manifest and its temporary file (by today's and the old name)
_OURS = re.compile(r"^(month=\d{4}-\d{2}|\.staging|\._?manifest\.json\.tmp|_?manifest\.json)$")
_MANIFEST_TMP = (f".{MANIFEST}.tmp", f".{LEGACY_MANIFEST}.tmp")
_PART_FILE = re.compile(r"^\.?leases-\d{6}\.parquet(\.tmp)?$")
ROW_GROUP = 122_880
# zstd's level 2. Measured against level 3 (DuckDB's default), paired, 2026-11-24: the 1M archive's month files
# 0.13 CPU-s cheaper to write (of ~1.5), the 10M history 2.4% larger (44.8 bytes a lease, not 43.7) and read no
# slower (by month 8.36 and 8.45 s against 8.84 and 8.59; 30 days 0.57-0.58 s against 0.55-0.65). Level 1 was
# cheaper still but 7% larger, and its by-month read measured 0.4 s slower (9.46 s against 9.03).
ZSTD_LEVEL = 2
WRITERS = 2  # month files written at once (each COPY of one month runs on one thread; the machine has 2+ cores)


@dataclass(frozen=True)
class ArchiveResult:
    directory: Path
    manifest: Manifest
    added: int  # leases this run added
    already: int  # closed leases it found in the archive already
    open: int  # leases left out because they are open
    later: int  # closed leases left out because they ended at or after --before
    months: tuple[str, ...]  # the months whose file this run rewrote
    removed: tuple[str, ...]  # files of earlier or interrupted runs it deleted
    migrated: bool = False  # it renamed an old archive's manifest.json (before issue 28) to _manifest.json


def crash_point(step: str) -> None:
    """The crash tests' hook: SIGKILL this process right after ``step`` when the environment asks for it
    (``step`` or ``step:N`` for the N-th time the step is passed, from 1)."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != step:
        return
    _PASSED[step] = _PASSED.get(step, 0) + 1
    if _PASSED[step] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


_PASSED: dict[str, int] = {}


def open_for_writing(directory: Path) -> tuple[Manifest, bool]:
    """The manifest of the archive at ``directory``; a new, empty archive when the directory is missing or
    empty. A directory with other files and no manifest is not ours: refused. An archive written before issue 28
    has its ``manifest.json`` renamed ``_manifest.json`` (once it has been read and checked); the second value
    says whether that happened."""
    if directory.exists() and not directory.is_dir():
        raise ArchiveError(f"{directory}: not a directory")
    if not directory.exists():
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise ArchiveError(f"{directory}: cannot create: {exc.strerror or exc}") from None
        return Manifest(), False
    if has_manifest(directory):
        manifest = read_manifest(directory)
        return manifest, migrate(directory)
    foreign = sorted(p.name for p in directory.iterdir() if not _OURS.match(p.name))
    if foreign:
        raise ArchiveError(f"{directory}: not a lease archive (no {MANIFEST}) and not empty: holds "
                           f"{', '.join(foreign[:3])}{' …' if len(foreign) > 3 else ''}")
    return Manifest(), False


def strays(directory: Path, manifest: Manifest) -> list[Path]:
    """Files of ours that the manifest does not list: left by an interrupted run or replaced by a later one (and
    a ``manifest.json`` beside ``_manifest.json``, which is the manifest then)."""
    listed = {p.file for p in manifest.partitions}
    renamed = (directory / MANIFEST).exists()
    out = []
    for entry in sorted(directory.iterdir()):
        if entry.name == STAGING or entry.name in _MANIFEST_TMP or (entry.name == LEGACY_MANIFEST and renamed):
            out.append(entry)
        elif entry.is_dir() and entry.name.startswith(f"{PARTITION}="):
            for file in sorted(entry.iterdir()):
                if _PART_FILE.match(file.name) and f"{entry.name}/{file.name}" not in listed:
                    out.append(file)
    return out


def remove(paths: Iterable[Path], directory: Path) -> list[str]:
    removed = []
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(str(path.relative_to(directory)))
    return removed


def archive(
    directory: Path,
    leases: Iterable[GPULease],
    *,
    archived_at: datetime,
    before: datetime | None = None,
    gpus: Mapping[str, int] | None = None,
    cluster: str = "",
) -> ArchiveResult:
    """Add every closed lease (ended before ``before`` when given) that the archive does not hold yet."""
    manifest, migrated = open_for_writing(directory)
    removed = remove(strays(directory, manifest), directory)
    crash_point("cleaned")

    every = leases if isinstance(leases, (list, tuple)) else list(leases)
    closed = [lease for lease in every if lease.status.closed]
    open_ = len(every) - len(closed)
    later = 0
    if before is not None:  # ended (or, closed without an end, started) before it
        kept = [lease for lease in closed if _end_or_start(lease) < before]
        later, closed = len(closed) - len(kept), kept

    if not closed:
        _keep_empty(directory)
        return ArchiveResult(directory, manifest, 0, 0, open_, later, (), tuple(removed), migrated)
    con = db.connect()
    staged, rows = _stage(con, directory / STAGING, closed)
    crash_point("staged")
    result = _write(con, directory, manifest, staged, rows, removed, open_=open_, later=later,
                    archived_at=archived_at, before=before, gpus=gpus, cluster=cluster)
    return dataclasses.replace(result, migrated=migrated)


def archive_staged(
    directory: Path,
    con,
    *,
    open_: int,
    later: int,
    archived_at: datetime,
    before: datetime | None = None,
    gpus: Mapping[str, int] | None = None,
    cluster: str = "",
) -> ArchiveResult:
    """The same, for leases that DuckDB holds already as the table or view ``staged`` of ``con`` (the archive's
    columns and ``month``, closed leases only, one row per key, in file order: archive/snapshot_rows.py);
    ``open_`` and ``later`` count the leases it left out."""
    manifest, migrated = open_for_writing(directory)
    removed = remove(strays(directory, manifest), directory)
    crash_point("cleaned")
    staged = con.execute("SELECT month, count(*) FROM staged GROUP BY month ORDER BY month").fetchall()
    rows = sum(count for _month, count in staged)
    if not rows:
        _keep_empty(directory)
        return ArchiveResult(directory, manifest, 0, 0, open_, later, (), tuple(removed), migrated)
    crash_point("staged")
    result = _write(con, directory, manifest, staged, rows, removed, open_=open_, later=later,
                    archived_at=archived_at, before=before, gpus=gpus, cluster=cluster)
    return dataclasses.replace(result, migrated=migrated)


def _write(con, directory: Path, manifest: Manifest, staged: list[tuple[str, int]], rows: int, removed: list[str],
           *, open_: int, later: int, archived_at: datetime, before: datetime | None,
           gpus: Mapping[str, int] | None, cluster: str = "") -> ArchiveResult:
    """Steps 3 to 5: the months with new leases rewritten, the manifest replaced, what it no longer lists deleted."""
    staging = directory / STAGING
    generation = manifest.generation + 1
    partitions = {p.month: p for p in manifest.partitions}
    work: list[tuple[str, Partition | None, str]] = []  # (month, its old partition, the table of its new rows)
    added = 0
    for index, (month, count) in enumerate(staged):
        old = partitions.get(month)
        if old is None:
            work.append((month, None, "staged"))
            added += count
            continue
        table = f"fresh_{index}"
        fresh = _fresh_rows(con, directory, month, old, table)
        if fresh:
            work.append((month, old, table))
            added += fresh
    for month, part in _write_months(con, directory, work, generation, cluster):
        partitions[month] = part
    rewritten = [month for month, _old, _table in work]
    replaced = [directory / old.file for _month, old, _table in work if old is not None]
    already = rows - added
    con.close()
    if not rewritten:
        remove([staging], directory)  # ours, of this run: not reported
        _keep_empty(directory)
        return ArchiveResult(directory, manifest, 0, already, open_, later, (), tuple(removed))

    parts = tuple(partitions[m] for m in sorted(partitions))
    ended = [p.last_ended for p in parts if p.last_ended is not None]
    new = Manifest(
        generation=generation,
        leases=sum(p.leases for p in parts),
        first_start=min(p.first_start for p in parts),
        last_ended=max(ended) if ended else None,
        partitions=parts,
        runs=(*manifest.runs, ArchiveRun(archived_at=archived_at, before=before, added=added, gpus=dict(gpus or {}))),
    )
    write_manifest(directory, new)
    crash_point("manifest")
    removed += remove(replaced, directory)
    remove([staging], directory)
    crash_point("done")
    return ArchiveResult(directory, new, added, already, open_, later, tuple(rewritten), tuple(removed))


def _keep_empty(directory: Path) -> None:
    """A new archive that received nothing is still an archive: an empty manifest (generation 0)."""
    if not has_manifest(directory):
        write_manifest(directory, Manifest())


# --- DuckDB ------------------------------------------------------------------------------------------------------


def _end_or_start(lease: GPULease) -> datetime:
    ended = lease.status.ended
    return lease.spec.start if ended is None else ended


def _stage(con, staging: Path, leases: list[GPULease]) -> tuple[list[tuple[str, int]], int]:
    """The leases as the table ``staged`` of the archive's rows, each lease once (by namespace/name/uid, the
    first given), with their month. Returns ((month, rows) in order, rows).

    The hand-off is the leases' own JSON lines, written by msgspec with no Python step per lease, which
    DuckDB reads into rows (archive/staging.py). Two leases with one key are rare (a snapshot holds one copy of
    each object): only then are the leases deduplicated here and staged again."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    _stage_lines(con, staging / "leases.jsonl", leases)
    total, distinct = con.execute("SELECT count(*), count(DISTINCT (namespace, name, uid)) FROM staged").fetchone()
    if distinct != total:
        first: dict[tuple[str, str, str], GPULease] = {}
        for lease in leases:
            first.setdefault(lease.archive_key, lease)
        con.execute("DROP TABLE staged")
        _stage_lines(con, staging / "leases.jsonl", list(first.values()))
        total = distinct
    months = con.execute("SELECT month, count(*) FROM staged GROUP BY month ORDER BY month").fetchall()
    return months, total


def _stage_lines(con, path: Path, leases: list[GPULease]) -> None:
    with open(path, "wb") as handle:
        encoder = msgspec.json.Encoder()
        for i in range(0, len(leases), 50_000):
            handle.write(encoder.encode_lines(leases[i:i + 50_000]))
    source = f"read_json({db.quote(path)}, format = 'newline_delimited', columns = {json_columns()})"
    create_staged(con, select_rows(source))


def create_staged(con, rows_sql: str) -> None:
    """The table ``staged`` of the rows ``rows_sql`` selects (the archive's columns and ``month``), stored in the
    order of the month files (start, then the key): a month's rows are then one run of the table, which a
    month's COPY reads in that order with no sort of its own. A table of the database, not of the connection, so
    that the writers' cursors see it."""
    con.execute("SET preserve_insertion_order = true")  # the table keeps the ORDER BY's order, scans keep it
    con.execute(f"CREATE TABLE staged AS SELECT * FROM ({rows_sql}) ORDER BY start, namespace, name, uid")


def _fresh_rows(con, directory: Path, month: str, old: Partition, table: str) -> int:
    """Keep the staged rows of ``month`` that the month's file does not hold yet (in ``table``); their count."""
    path = directory / old.file
    db.check_file(con, path, old.leases)
    con.execute(
        f"CREATE OR REPLACE TABLE {table} AS SELECT s.* EXCLUDE (month) FROM staged s "
        f"WHERE s.month = {db.quote(month)} AND NOT EXISTS (SELECT 1 FROM read_parquet({db.quote(path)}) o "
        "WHERE o.namespace = s.namespace AND o.name = s.name AND o.uid = s.uid)"
    )
    return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _write_months(con, directory: Path, work: list[tuple[str, Partition | None, str]],
                  generation: int, cluster: str = "") -> list[tuple[str, Partition]]:
    """Write each month's new file, ``WRITERS`` at a time (DuckDB runs each COPY without the GIL), each on a
    cursor of its own; (month, partition) in the order of ``work``."""
    local = threading.local()

    def write(item: tuple[str, Partition | None, str]) -> tuple[str, Partition]:
        cursor = getattr(local, "cursor", None)
        if cursor is None:
            cursor = local.cursor = con.cursor()
            cursor.execute("SET TimeZone = 'UTC'")
            cursor.execute("SET preserve_insertion_order = true")  # a month's rows in the order ``staged`` has them
        month, old, table = item
        part = _write_month(cursor, directory, month, old, table, generation, cluster)
        crash_point("partition")
        return month, part

    if len(work) <= 1:
        return [write(item) for item in work]
    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        return list(pool.map(write, work))


def _write_month(con, directory: Path, month: str, old: Partition | None, table: str,
                 generation: int, cluster: str = "") -> Partition:
    """The month's new file: its old rows and the fresh ones (``table``), sorted by start (then the key, so the
    bytes do not depend on the order leases were read in), written under a temporary name and renamed. The
    fresh rows carry ``cluster``; the old rows keep theirs (rows of a version-1 file, which had none: '')."""
    folder = directory / f"{PARTITION}={month}"
    folder.mkdir(exist_ok=True)
    name = f"leases-{generation:06d}.parquet"
    tmp, final = folder / f".{name}.tmp", folder / name
    fresh = ", ".join((*LEASE_COLUMN_NAMES, f"{db.quote(cluster)} AS cluster"))
    if old is None:  # a month the archive does not hold yet: every staged lease of it is fresh, in file order
        query = f"SELECT {fresh} FROM staged WHERE month = {db.quote(month)}"
    else:
        path = directory / old.file
        kept = ", ".join(COLUMN_NAMES) if db.file_version(con, path) >= 2 else \
            ", ".join((*LEASE_COLUMN_NAMES, "'' AS cluster"))
        query = (f"SELECT {', '.join(COLUMN_NAMES)} FROM (SELECT {fresh} FROM {table} UNION ALL SELECT {kept} "
                 f"FROM read_parquet({db.quote(path)})) ORDER BY start, namespace, name, uid")
    con.execute(
        f"COPY ({query}) TO {db.quote(tmp)} "
        f"(FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL {ZSTD_LEVEL}, ROW_GROUP_SIZE {ROW_GROUP}, "
        f"KV_METADATA {{{db.quote(SCHEMA_KEY)}: {db.quote(str(SCHEMA_VERSION))}}})"
    )
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    sync_directory(folder)
    sync_directory(directory)
    stats = con.execute(
        f"SELECT count(*), min(epoch_us(start)), max(epoch_us(start)), max(epoch_us(ended)) "
        f"FROM read_parquet({db.quote(final)})"
    ).fetchone()
    count, first, last, ended = stats
    if first is None or month_of(first) != month or month_of(last) != month:
        raise ArchiveError(f"{final}: written with leases outside {month}")
    return Partition(
        month=month,
        file=f"{PARTITION}={month}/{name}",
        leases=count,
        bytes=final.stat().st_size,
        sha256=sha256(final),
        first_start=instant(first),
        last_start=instant(last),
        last_ended=None if ended is None else instant(ended),
    )


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
