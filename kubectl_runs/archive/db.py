"""The one place that imports DuckDB: an in-process connection set up for the archive (UTC, no extension
downloads), and its errors turned into one line naming the file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .frozen import ensure_duckdb

ensure_duckdb()  # the single-file executable unpacks DuckDB on first use (archive/frozen.py)

from .manifest import ArchiveError  # noqa: E402

try:
    import duckdb
except ImportError as exc:  # an install without it (an older `pip install .`, a trimmed environment)
    raise ArchiveError(
        f"the lease archive needs the duckdb package, which is not importable here ({exc}): "
        "pip install 'duckdb>=1.4,<3' (or reinstall kubectl-runs), or use the single-file executable"
    ) from None
from .schema import COLUMNS, LEASE_COLUMNS, READABLE_VERSIONS, SCHEMA_KEY  # noqa: E402

Error = duckdb.Error


_TYPES = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}  # how DESCRIBE spells the types of COLUMNS


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory database; timestamps are read and written in UTC, and nothing is fetched from the network
    (DuckDB would otherwise download an extension it lacks)."""
    spill = os.path.join(tempfile.gettempdir(), "kubectl-runs-duckdb")  # $TMPDIR: writable in the CronJob too
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False, "temp_directory": spill})
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")  # stderr is for our errors (DuckDB draws one for long queries)
    return con


def quote(path: Path | str) -> str:
    """A path as an SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"


def check_file(con: duckdb.DuckDBPyConnection, path: Path, rows: int | None = None) -> int:
    """Open a Parquet file of the archive: its footer, schema version and columns. Returns its row count
    (checked against ``rows`` when given)."""
    return checked_file(con, path, rows)[0]


def file_version(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """The schema version of a file of the archive (1: no ``cluster`` column)."""
    return checked_file(con, path)[1]


def checked_file(con: duckdb.DuckDBPyConnection, path: Path, rows: int | None = None) -> tuple[int, int]:
    """``check_file``'s checks; (row count, schema version)."""
    try:
        kv = dict(con.execute(f"SELECT key, value FROM parquet_kv_metadata({quote(path)})").fetchall())
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({quote(path)})").fetchall()
        count = con.execute(f"SELECT num_rows FROM parquet_file_metadata({quote(path)})").fetchone()[0]
    except duckdb.Error as exc:
        raise ArchiveError(f"{path}: not a readable Parquet file (truncated or damaged): {first_line(exc)}") from None
    version = kv.get(SCHEMA_KEY.encode())
    if version is None:
        raise ArchiveError(f"{path}: not a lease archive file (no {SCHEMA_KEY} in its metadata)")
    readable = {str(v).encode(): v for v in READABLE_VERSIONS}
    if version not in readable:
        raise ArchiveError(f"{path}: schema version {version.decode(errors='replace')}; this kubectl-runs reads "
                           f"versions {' and '.join(map(str, READABLE_VERSIONS))}")
    number = readable[version]
    found = {row[0]: row[1] for row in described}
    for name, sql_type, _doc in (LEASE_COLUMNS if number == 1 else COLUMNS):
        have = found.get(name)
        if have != _TYPES.get(sql_type, sql_type):
            raise ArchiveError(f"{path}: column {name} is {have or 'missing'}; schema version {number} "
                               f"has {sql_type}")
    if rows is not None and count != rows:
        raise ArchiveError(f"{path}: holds {count} leases; the manifest says {rows}")
    return count, number


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
