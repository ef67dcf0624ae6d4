"""Writing the archive (``leases archive --to DIR``): closed leases into one Parquet file per month of start,
sorted by start, merged with what the archive already holds, keyed by (namespace, name, uid) so that archiving a
lease again never adds a row.

A run, step by step (``KUBECTL_RUNS_ARCHIVE_CRASH=<step>`` kills the process with SIGKILL after that step, for
the crash tests):

1. ``cleaned``: files of an earlier run that no manifest lists (it was killed) are deleted;
2. ``staged``: the new leases go to ``.staging/leases.jsonl`` (their JSON lines), which DuckDB reads into rows
   (archive/staging.py);
3. ``partition``: for each month with leases the archive does not hold yet, the month's file is rewritten
   (old rows + new rows, sorted) under a new name: a temporary file, fsync, rename, fsync of the directory;
4. ``manifest``: the new manifest replaces the old one atomically — the commit point;
5. ``done``: the files the new manifest no longer lists, and the staging directory, are deleted.

A crash before step 4 leaves the old manifest, which lists only old files: the archive is as it was. A crash
after it leaves the new archive with some unlisted old files, which the next run (or ``--verify``) names and
the next run deletes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from ..model import GPULease
from . import db
from .manifest import (
    MANIFEST,
    ArchiveError,
    ArchiveRun,
    Manifest,
    Partition,
    read_manifest,
    sync_directory,
    write_manifest,
)
from .schema import (
    COLUMN_NAMES,
    PARTITION,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    instant,
    month_of,
)
from .staging import json_columns, select_rows

CRASH_ENV = "KUBECTL_RUNS_ARCHIVE_CRASH"
STAGING = ".staging"
_OURS = re.compile(r"^(month=\d{4}-\d{2}|\.staging|\.manifest\.json\.tmp|manifest\.json)$")
_PART_FILE = re.compile(r"^\.?leases-\d{6}\.parquet(\.tmp)?$")
ROW_GROUP = 122_880


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


def open_for_writing(directory: Path) -> Manifest:
    """The manifest of the archive at ``directory``; a new, empty archive when the directory is missing or
    empty. A directory with other files and no manifest is not ours: refused."""
    if directory.exists() and not directory.is_dir():
        raise ArchiveError(f"{directory}: not a directory")
    if not directory.exists():
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise ArchiveError(f"{directory}: cannot create: {exc.strerror or exc}") from None
        return Manifest()
    if (directory / MANIFEST).exists():
        return read_manifest(directory)
    foreign = sorted(p.name for p in directory.iterdir() if not _OURS.match(p.name))
    if foreign:
        raise ArchiveError(f"{directory}: not a lease archive (no {MANIFEST}) and not empty: holds "
                           f"{', '.join(foreign[:3])}{' …' if len(foreign) > 3 else ''}")
    return Manifest()


def strays(directory: Path, manifest: Manifest) -> list[Path]:
    """Files of ours that the manifest does not list: left by an interrupted run or replaced by a later one."""
    listed = {p.file for p in manifest.partitions}
    out = []
    for entry in sorted(directory.iterdir()):
        if entry.name == STAGING or entry.name == f".{MANIFEST}.tmp":
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
) -> ArchiveResult:
    """Add every closed lease (ended before ``before`` when given) that the archive does not hold yet."""
    manifest = open_for_writing(directory)
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
        return ArchiveResult(directory, manifest, 0, 0, open_, later, (), tuple(removed))
    con = db.connect()
    staging = directory / STAGING
    staged, rows = _stage(con, staging, closed)
    crash_point("staged")

    generation = manifest.generation + 1
    partitions = {p.month: p for p in manifest.partitions}
    rewritten: list[str] = []
    replaced: list[Path] = []
    added = 0
    for month, count in staged:
        old = partitions.get(month)
        fresh = count if old is None else _fresh_rows(con, directory, month, old)
        if fresh == 0:
            continue
        part = _write_month(con, directory, month, old, generation)
        crash_point("partition")
        partitions[month] = part
        rewritten.append(month)
        added += fresh
        if old is not None:
            replaced.append(directory / old.file)
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
    if not (directory / MANIFEST).exists():
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
            meta = lease.metadata
            first.setdefault((meta.namespace, meta.name, meta.uid), lease)
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
    con.execute(f"CREATE TEMP TABLE staged AS {select_rows(source)}")


def _fresh_rows(con, directory: Path, month: str, old: Partition | None) -> int:
    """Mark the staged rows of ``month`` that the month's file does not hold yet (table ``fresh``); their count."""
    where = f"s.month = {db.quote(month)}"
    if old is None:
        con.execute(f"CREATE OR REPLACE TEMP TABLE fresh AS SELECT s.* EXCLUDE (month) FROM staged s WHERE {where}")
    else:
        path = directory / old.file
        db.check_file(con, path, old.leases)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE fresh AS SELECT s.* EXCLUDE (month) FROM staged s WHERE {where} "
            f"AND NOT EXISTS (SELECT 1 FROM read_parquet({db.quote(path)}) o "
            "WHERE o.namespace = s.namespace AND o.name = s.name AND o.uid = s.uid)"
        )
    return con.execute("SELECT count(*) FROM fresh").fetchone()[0]


def _write_month(con, directory: Path, month: str, old: Partition | None, generation: int) -> Partition:
    """The month's new file: its old rows and the fresh ones, sorted by start (then the key, so the bytes do not
    depend on the order leases were read in), written under a temporary name and renamed."""
    folder = directory / f"{PARTITION}={month}"
    folder.mkdir(exist_ok=True)
    name = f"leases-{generation:06d}.parquet"
    tmp, final = folder / f".{name}.tmp", folder / name
    columns = ", ".join(COLUMN_NAMES)
    if old is None:  # a month the archive does not hold yet: every staged lease of it is fresh
        source = f"SELECT {columns} FROM staged WHERE month = {db.quote(month)}"
    else:
        source = (f"SELECT * FROM fresh UNION ALL SELECT {columns} "
                  f"FROM read_parquet({db.quote(directory / old.file)})")
    con.execute(
        f"COPY (SELECT {columns} FROM ({source}) ORDER BY start, namespace, name, uid) TO {db.quote(tmp)} "
        f"(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {ROW_GROUP}, "
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
