"""The audit window as a DuckDB view for the findings tests: archived ∪ live leases that held GPUs in the window,
each once (the live copy wins), with the columns archive/relation.py gives its view ``audit_leases``."""

from __future__ import annotations

from datetime import datetime

from kubectl_runs.archive import db
from kubectl_runs.archive.schema import COLUMN_NAMES, COLUMNS, micros, row_of

VIEW = "audit_leases"


def define(con, archives, live, lo: datetime, hi: datetime, archived=()) -> None:
    """``archived``: closed leases registered as archived rows without writing Parquet (quick, for hypothesis)."""
    _table(con, "live_leases", live)
    _table(con, "archived_rows", archived)
    _view(con, archives, lo, hi)


def _table(con, table: str, leases) -> None:
    rows = [row_of(x) for x in leases]
    columns, values = [], []
    for name, sql_type, _doc in COLUMNS:
        values.append([getattr(row, name) for row in rows])
        if name in ("start", "ended"):
            columns.append(f"make_timestamp(unnest(?::BIGINT[]))::TIMESTAMPTZ AS {name}")
        elif name == "slots":
            columns.append(f"unnest(?::VARCHAR[][]) AS {name}")
        else:
            columns.append(f"unnest(?::{sql_type}[]) AS {name}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT {', '.join(columns)}", values)


def _view(con, archives, lo: datetime, hi: datetime) -> None:
    lo_us, hi_us = micros(lo), micros(hi)
    lo_ts, hi_ts = f"make_timestamp({lo_us})::TIMESTAMPTZ", f"make_timestamp({hi_us})::TIMESTAMPTZ"
    cols = ", ".join(COLUMN_NAMES)
    parts = [f"SELECT {cols}, true AS live FROM live_leases WHERE start < {hi_ts} "
             f"AND (NOT closed OR (ended > {lo_ts} AND ended > start))"]
    selects = []
    if con.execute("SELECT count(*) FROM archived_rows").fetchone()[0]:
        selects.append(f"SELECT {cols}, -1 AS archive_index FROM archived_rows WHERE start < {hi_ts} "
                       f"AND ended > {lo_ts} AND ended > start")
    for index, arch in enumerate(archives):
        files = arch.files(lo, hi)
        if files:
            paths = "[" + ", ".join(db.quote(arch.directory / p.file) for p in files) + "]"
            selects.append(f"SELECT {cols}, {index} AS archive_index FROM read_parquet({paths}, hive_partitioning = false) "
                           f"WHERE start < {hi_ts} AND ended > {lo_ts} AND ended > start")
    if selects:
        once = selects[0] if len(selects) == 1 else (
            f"SELECT * EXCLUDE (archive_index) FROM ({' UNION ALL '.join(selects)}) "
            f"QUALIFY row_number() OVER (PARTITION BY namespace, name, uid ORDER BY archive_index) = 1")
        parts.append(f"SELECT {cols}, false AS live FROM ({once}) AS a "
                     f"ANTI JOIN live_leases AS k USING (namespace, name, uid)")
    held = (f"SELECT *, epoch_us(start) AS start_us, epoch_us(ended) AS ended_us, "
            f"greatest(epoch_us(start), {lo_us}) AS held_from_us, "
            f"CASE WHEN closed THEN least(epoch_us(ended), {hi_us}) ELSE {hi_us} END AS held_until_us "
            f"FROM ({' UNION ALL '.join(parts)}) AS u")
    if lo_us >= hi_us:
        held += " WHERE false"
    con.execute(f"CREATE OR REPLACE TEMP VIEW {VIEW} AS {held}")
