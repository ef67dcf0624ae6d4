"""The SQL that reads a JSON snapshot's GPULeases, as the file holds them, into the archive's rows
(schema.COLUMNS): archive/snapshot_rows.py runs it while the loader checks the same leases.

It is archive/staging.py's SQL (which reads the JSON lines msgspec writes of the leases) with one difference:
DuckDB and msgspec read some instants differently (7 or more digits of fraction: DuckDB truncates, msgspec rounds;
other spellings one of them refuses), so instants are read as text, and ``plain`` holds only where each is
of the form both read to the same microsecond (``2025-11-01T09:30:00Z``, with at most 6 digits of fraction and
an offset). Any other value is left to the loader's records. Every other field the loader has accepted reads the
same in DuckDB (a JSON string, integer or boolean is one value; ``null`` is accepted only where it means absent).

No DuckDB import here: only the SQL text (the tests compare its rows with ``schema.row_of``'s).
"""

from __future__ import annotations

from .schema import LEASE_COLUMN_NAMES as COLUMN_NAMES  # staged rows: no cluster yet
from .staging import LEASE_JSON, ROW_SQL

# A lease as DuckDB reads it from the file: staging's shape, instants as text, and the kind of each item.
LEASE_TEXT: dict[str, str] = {"kind": "VARCHAR",
                              **{key: value.replace("TIMESTAMPTZ", "VARCHAR") for key, value in LEASE_JSON.items()}}
_INSTANTS = {"start": "spec.start", "ended": "status.ended"}
_PLAIN = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})"


def _instant(text: str) -> str:
    return f"TRY_CAST({text} AS TIMESTAMPTZ)"


def _plain(text: str, parsed: str) -> str:
    """The loader has read ``text`` as an instant already: its digits are digits, its fields in range. (Only a
    text of 20 characters can match the GLOB, and one of 20 that the regex matches matches the GLOB too: the
    regex runs only on the others.)"""
    return (f"({text} IS NULL OR (CASE WHEN length({text}) = 20 THEN {text} GLOB '????-??-??T??:??:??Z' "
            f"ELSE regexp_full_match({text}, '{_PLAIN}') END AND {parsed} IS NOT NULL))")


def _month(text: str, parsed: str) -> str:
    """``YYYY-MM``, the UTC month of the instant: the text's own first 7 characters when it is in UTC (``Z``;
    a row that is not ``plain`` is never archived), else formatted from the parsed instant."""
    return f"CASE WHEN suffix({text}, 'Z') THEN left({text}, 7) ELSE strftime({parsed} AT TIME ZONE 'UTC', '%Y-%m') END"


def select_rows(source: str) -> str:
    """``SELECT`` the archive's columns, each row's ``month`` (the UTC month of its start) and ``plain``, of every
    GPULease item of ``source`` (a ``read_json`` with ``columns()``). Each instant is parsed once."""
    texts = ", ".join(f"{text} AS {name}_text, {_instant(text)} AS {name}_at" for name, text in _INSTANTS.items())
    rows = {**ROW_SQL, **{name: f"{name}_at" for name in _INSTANTS}}
    columns = ", ".join(f"{rows[name]} AS {name}" for name in COLUMN_NAMES)
    plain = " AND ".join(_plain(f"{name}_text", f"{name}_at") for name in _INSTANTS)
    return (f"SELECT {columns}, {_month('start_text', 'start_at')} AS month, {plain} AS plain "
            f"FROM (SELECT *, {texts} FROM {source} WHERE kind = 'GPULease')")


# The columns the sorted table of rows leaves out (a narrower table sorts faster: ~0.3 CPU-seconds of 3 for 1M
# leases), as the view over it computes them from the columns it keeps: ROW_SQL's values.
DERIVED: dict[str, str] = {
    "gpus": "len(slots)::INTEGER",
    "payer_namespace": ("CASE WHEN paid_by_namespace IS NULL THEN NULL "
                        "ELSE coalesce(nullif(paid_by_namespace, ''), run_namespace) END"),
}


def stored_rows(source: str) -> str:
    """``select_rows(source)`` without ``DERIVED`` and ``plain``: a row that is not ``plain`` fails the query
    (DuckDB's ``error``, which names the lease; the loader's leases are then archived)."""
    return (f"SELECT * EXCLUDE (plain, {', '.join(DERIVED)}) FROM ({select_rows(source)}) "
            "WHERE CASE WHEN plain THEN true ELSE error('an instant not of the plain form, in lease ' || name) END")


def view_columns() -> str:
    """The archive's columns (and ``month``) over a table of ``stored_rows``."""
    return ", ".join(f"{DERIVED[name]} AS {name}" if name in DERIVED else name for name in (*COLUMN_NAMES, "month"))


def columns() -> str:
    """``read_json``'s ``columns`` argument."""
    return "{" + ", ".join(f"'{key}': '{value}'" for key, value in LEASE_TEXT.items()) + "}"
