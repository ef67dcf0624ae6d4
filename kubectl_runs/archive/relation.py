"""The audit window as one DuckDB relation: every lease that held GPUs during the window — read live (the
cluster or ``--snapshot``) or from the archives — exactly once, with its instants clipped to the window, so
that the rows, peaks, periods and findings of ``leases audit --archive`` are SQL over one view.

``define(con, archives, live, lo, hi)`` registers the live leases (one statement for all of them: each column
one list parameter) and defines the temp view ``audit_leases`` (``VIEW``) over ``[lo, hi)`` — ``hi`` already
clipped to the evaluation time, as the engine's window is (``min(--until, --at)``).

Which leases it holds, as engine/audit_window.py ``clip`` selects them:

* a closed lease that held GPUs in the window: ``start < hi``, ``ended > lo`` and ``ended > start`` (a closed
  lease without an end, or that ended at its start, never held anything and is left out);
* an open (live) lease that started before ``hi``: it holds its slots up to ``hi``;
* a lease both live and archived (archived, not yet pruned) is its live copy, whatever the live copy says
  (keyed by namespace, name and uid); a lease in two archives is the copy of the first archive given. With one archive, its rows that a live lease hides are found once, when the view is defined,
  and kept as (file, row number) in the temp table ``audit_hidden_rows``: the view's scans read no key column.

Its columns (stable: the audit's SQL, engine-equivalent, is written against them):

* every column of the archive schema, with the same names and types (archive/schema.py ``COLUMNS``,
  docs/archive.md): ``namespace, name, uid, owner, run_namespace, run_name, group_index, flavor, slots, role,
  gpus, start, reason, paid_by_namespace, paid_by_budget, paid_by_envelope, payer_namespace, closed, ended,
  closure_reason, preemption_reservation, preemption_seed``. For a live lease ``closed`` may be false and
  ``ended`` is its ``status.ended`` as read (NULL when none);
* ``live`` BOOLEAN: read live or from a snapshot (true), or from an archive (false);
* ``start_us`` BIGINT: ``start`` in microseconds since the epoch (not clipped);
* ``ended_us`` BIGINT: ``ended`` in microseconds since the epoch; NULL when there is none;
* ``held_from_us`` BIGINT: when it began holding its slots inside the window: ``greatest(start_us, lo)``;
* ``held_until_us`` BIGINT: when it stopped holding them inside the window: ``least(ended_us, hi)`` for a
  closed lease, ``hi`` for an open one (nothing after the evaluation time is known).

``held_from_us < held_until_us`` for every row. Instants are exact integers (epoch microseconds, UTC), as the
archive stores them; ``window_bounds`` gives ``(lo, hi)`` in the same unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..model import GPULease
from . import db
from .manifest import ArchiveError
from .schema import COLUMN_NAMES, COLUMNS, micros, row_of

VIEW = "audit_leases"
LIVE_TABLE = "audit_live_leases"  # every live lease (not only the window's): its keys hide archived copies
HIDDEN_TABLE = "audit_hidden_rows"  # the archived rows (file, row number) whose key is read live
EXTRA_COLUMNS = ("live", "start_us", "ended_us", "held_from_us", "held_until_us")

_COLUMNS = ", ".join(COLUMN_NAMES)
_TIMES = frozenset(("start", "ended"))


def window_bounds(lo: datetime, hi: datetime) -> tuple[int, int]:
    """The window in epoch microseconds."""
    return micros(lo), micros(hi)


def define(con, archives: Sequence, live: Sequence[GPULease], lo: datetime, hi: datetime) -> None:
    """Register ``live`` and define the view ``audit_leases`` over ``[lo, hi)`` on ``con`` (module docstring).
    ``archives`` are opened archives (``reader.open_archive``); only their files that can touch the window are
    read, and only when the view is queried."""
    _register_live(con, live)
    lo_us, hi_us = window_bounds(lo, hi)
    lo_ts, hi_ts = _timestamp(lo_us), _timestamp(hi_us)
    live_part = (f"SELECT {_COLUMNS}, true AS live FROM {LIVE_TABLE} "
                 f"WHERE start < {hi_ts} AND (NOT closed OR (ended > {lo_ts} AND ended > start))")
    parts = [live_part]
    found = _archived(archives, lo, hi, lo_ts, hi_ts)
    selects = [select for select, _paths in found]
    if len(found) == 1:  # one archive holds each key once (leases archive --verify checks it)
        parts.append(_hiding_live(con, *found[0], live))
    elif selects:
        first = (f"SELECT * FROM ({' UNION ALL '.join(selects)}) "
                 f"QUALIFY row_number() OVER (PARTITION BY namespace, name, uid ORDER BY archive_index) = 1")
        parts.append(f"SELECT {_COLUMNS}, false AS live FROM ({first}) "
                     f"ANTI JOIN {LIVE_TABLE} AS k USING (namespace, name, uid)")
    held = (f"SELECT *, epoch_us(start) AS start_us, epoch_us(ended) AS ended_us, "
            f"greatest(epoch_us(start), {lo_us}) AS held_from_us, "
            f"CASE WHEN closed THEN least(epoch_us(ended), {hi_us}) ELSE {hi_us} END AS held_until_us "
            f"FROM ({' UNION ALL '.join(parts)}) AS u")
    if lo_us >= hi_us:  # an empty window: the same columns, no rows
        held += " WHERE false"
    _execute(con, f"CREATE OR REPLACE TEMP VIEW {VIEW} AS {held}", "the audit window")


def _archived(archives: Sequence, lo: datetime, hi: datetime, lo_ts: str, hi_ts: str) -> list[tuple[str, str]]:
    """Per archive with files that can touch the window, the select of its leases that held GPUs in it (with
    ``archive_index``, and each row's ``filename`` and ``file_row_number``), and the list of those files (SQL)."""
    found = []
    for index, arch in enumerate(archives):
        files = arch.files(lo, hi)
        if not files:
            continue
        paths = "[" + ", ".join(db.quote(arch.directory / p.file) for p in files) + "]"
        scan = arch.scan(files, ", hive_partitioning = false, filename = true, file_row_number = true")
        found.append((f"SELECT *, {index} AS archive_index FROM {scan} "
                      f"WHERE {arch.where_cluster()} AND start < {hi_ts} AND ended > {lo_ts} AND ended > start", paths))
    return found


_NAMES_INLINE = 10_000  # up to this many live leases, their names also filter the Parquet scan (pushed down)


def _hiding_live(con, archived: str, paths: str, live: Sequence[GPULease]) -> str:
    """The archived part of the view for one archive (``archived``, over the files ``paths``): its rows, less
    those whose key is read live. Which rows those are is found once, here (a scan of the keys, filtered by the
    live leases' names), and kept as (file, row number) in the temp table ``audit_hidden_rows``: the view's scans
    then read no key column for it — on 10M archived leases the anti-join on (namespace, name, uid) costs each
    scan about 1.3 s."""
    if live:
        names = sorted({lease.metadata.name for lease in live})
        narrowed = archived
        if len(names) <= _NAMES_INLINE:
            listed = "name IN (" + ", ".join(db.quote(n) for n in names) + ")"
            narrowed += f" AND {listed}"
            # Usually no archived lease is live any more: a count over the files' names alone says so (every row
            # of the files, not only the window's: a superset. 10M: 0.23 s and ~35 MB, against 0.40 s and ~65 MB
            # reading the window's columns and row numbers too, and ~0.8 s for the semi-join below).
            if not _count(con, f"SELECT count(*) FROM read_parquet({paths}, hive_partitioning = false) WHERE {listed}"):
                return f"SELECT {_COLUMNS}, false AS live FROM ({archived})"
        _execute(con, f"CREATE OR REPLACE TEMP TABLE {HIDDEN_TABLE} AS SELECT filename, file_row_number "
                      f"FROM ({narrowed}) SEMI JOIN {LIVE_TABLE} USING (namespace, name, uid)", "the archived leases")
        if _count(con, f"SELECT count(*) FROM {HIDDEN_TABLE}"):
            return (f"SELECT {_COLUMNS}, false AS live FROM ({archived}) "
                    f"ANTI JOIN {HIDDEN_TABLE} USING (filename, file_row_number)")
    return f"SELECT {_COLUMNS}, false AS live FROM ({archived})"


def _register_live(con, live: Sequence[GPULease]) -> None:
    """Every live lease as the temp table ``audit_live_leases`` (the archive's columns), in one statement: each
    column is one list parameter, unnested side by side."""
    rows = [row_of(lease) for lease in live]
    columns = []
    values = []
    for name, sql_type, _doc in COLUMNS:
        values.append([getattr(row, name) for row in rows])
        if name in _TIMES:
            columns.append(f"make_timestamp(unnest(?::BIGINT[]))::TIMESTAMPTZ AS {name}")
        elif name == "slots":
            columns.append(f"unnest(?::VARCHAR[][]) AS {name}")
        else:
            columns.append(f"unnest(?::{sql_type}[]) AS {name}")
    _execute(con, f"CREATE OR REPLACE TEMP TABLE {LIVE_TABLE} AS SELECT {', '.join(columns)}", "the live leases",
             values)


def _count(con, query: str) -> int:
    try:
        return con.execute(query).fetchone()[0]
    except db.Error as exc:
        raise ArchiveError(f"the archived leases: cannot be read: {db.first_line(exc)}") from None


def _timestamp(us: int) -> str:
    return f"make_timestamp({us})::TIMESTAMPTZ"


def _execute(con, query: str, what: str, params: list | None = None) -> None:
    try:
        con.execute(query, params)
    except db.Error as exc:
        raise ArchiveError(f"{what}: cannot be set up in DuckDB: {db.first_line(exc)}") from None
