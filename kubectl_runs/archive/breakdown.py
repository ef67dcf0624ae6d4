"""The audit's breakdown in DuckDB, over the view ``audit_leases`` (archive/relation.py): per key of the ``--by``
dimensions the GPU-time, the leases and the peak of GPUs held at one instant, the totals, and the same per
calendar period for ``--every`` — the values engine/audit.py (``_rows``, ``_counted``) and
engine/audit_periods.py compute from records, computed without a Python object per lease.

Equal to the engine's, exactly:

* **entries** are leases, or (lease, node) pairs with ``--by node`` (a lease's slots grouped by the node before
  the last ``#`` of each slot, as ``audit_window.split_slot``; weight = its slots on that node; a lease without
  slots has no entry); ``-n`` keeps the leases of that namespace only;
* **GPU-time** is Σ weight × (held_until − held_from) in integer microseconds — exact in any order, as the
  engine sums it (``audit_window.held_micros``); both report ``seconds_of(µs)``, so the floats and their rounding
  are the same;
* **peaks**: intervals are half-open (an entry ending at an instant does not count with one starting then). The
  events of each key are netted per instant (+weight at ``held_from``, −weight at ``held_until``) and summed in
  instant order: the peak is the largest running level — the engine's sweep puts ends before starts at one
  instant, and its in-between levels never exceed the levels before and after;
* **periods**: one sweep over the whole window, not one per period. Each entry is clipped to every period it
  touches (rows, GPU-time, leases); a key's peak in a period is the larger of the GPUs its entries that began
  before the period hold at its start and its levels at the events in the period (its starts, and anything
  after the start instant).

Keys come back to Python as rows (one per key, or per period and key), sorted there as the engine sorts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from datetime import UTC, datetime

from ..engine.audit import ENVELOPE, FLAVOR, NO_ENVELOPE, NODE, OWNER, RUN, AuditRow
from ..engine.audit_periods import DAY, MONTH
from ..engine.audit_window import seconds_of
from . import db
from .manifest import ArchiveError
from .relation import VIEW
from .schema import micros

ENTRIES = "audit_entries"  # temp table: one row per entry: its key's id, weight w, held_from f, held_until u
KEYS = "audit_keys"  # temp table: id -> the key (k0, k1, … in --by order)
PERIODS = "audit_periods"  # temp table: the periods (i, ps, pe) clipped to the window

_DAY = 86_400_000_000
_WEEK = 7 * _DAY
_DAY_OFFSET = 1_000_000 * _DAY  # instants before 1970 still divide down (DuckDB's // truncates toward zero)
_WEEK_OFFSET = 100_000 * _WEEK + 3 * _DAY  # ISO weeks start on Monday; 1970-01-01 was a Thursday

# The key of each dimension, as engine/audit.py ``_dimension`` and ``node_entries`` make it.
_KEYS = {
    OWNER: "owner",
    FLAVOR: "flavor",
    RUN: "run_namespace || '/' || run_name",
    ENVELOPE: (f"CASE WHEN paid_by_budget IS NULL THEN '{NO_ENVELOPE}' "
               f"ELSE payer_namespace || '/' || paid_by_budget || '/' || paid_by_envelope END"),
}
# split_slot: the node before the last '#' when an ordinal (ASCII digits) follows it, else the whole slot
_NODE_OF = "CASE WHEN regexp_matches(s, '#[0-9]+$') THEN regexp_extract(s, '^(.*)#[0-9]+$', 1) ELSE s END"

# Each key's level (GPUs held) after each of its events: +w at held_from, −w at held_until, summed in instant order,
# ends before starts at one instant (the intervals are half-open). The levels between the events of one instant
# never exceed the levels before and after it. Summed as DOUBLE: exact for integers (below 2^53).
#
# STREAMED: one sort of every event by (key, instant, delta) and one running sum over all of them in that order
# (DuckDB's streaming window: OVER without PARTITION BY or ORDER BY, in input order, which the connection keeps
# while it runs: preserve_insertion_order). Each key's deltas add up to 0, so the running sum starts each key at 0.
# Three times faster than the same sum PARTITION BY key ORDER BY instant (20M events: 2.3 s against 6.8 s), which
# is the fallback (PARTITIONED) should a streamed level ever come out negative (rows out of order).
_EVENTS = f"SELECT id, f AS t, w AS d FROM {ENTRIES} UNION ALL SELECT id, u AS t, -w AS d FROM {ENTRIES}"
STREAMED = (f"lv AS (SELECT id, t, d, sum(d::DOUBLE) OVER (ROWS UNBOUNDED PRECEDING) AS level "
            f"FROM ({_EVENTS} ORDER BY id, t, d))")
PARTITIONED = (f"lv AS (SELECT id, t, d, sum(d::DOUBLE) OVER (PARTITION BY id ORDER BY t, d ROWS UNBOUNDED PRECEDING) "
               f"AS level FROM ({_EVENTS}))")


def _swept(con, query: str) -> list[tuple]:
    """``query`` (a format string of ``{levels}``, the ``lv`` CTE; its last column is the lowest level it saw),
    streamed, or partitioned if a streamed level came out negative; the rows without that column."""
    run(con, "SET preserve_insertion_order = true")
    try:
        found = run(con, query.format(levels=STREAMED))
    finally:
        with suppress(db.Error):  # the connection failed with the query: its error is the one to report
            con.execute("SET preserve_insertion_order = false")
    if any(row[-1] is not None and row[-1] < 0 for row in found):
        found = run(con, query.format(levels=PARTITIONED))
    return [row[:-1] for row in found]


def _where(namespace: str | None) -> str:
    return "" if namespace is None else f" WHERE namespace = {db.quote(namespace)}"


def _entries(by: Sequence[str], namespace: str | None) -> str:
    """The ``SELECT`` of the window's entries (module docstring): their key (``k0``, ``k1``, … in ``by`` order),
    weight ``w``, ``f`` (held from) and ``u`` (held until)."""
    keys = [f"{'node' if dim == NODE else _KEYS[dim]} AS k{i}" for i, dim in enumerate(by)]
    if NODE in by:
        source = (f"SELECT *, e.key AS node, e.value::INTEGER AS w FROM (SELECT *, unnest(map_entries(list_aggregate("
                  f"list_transform(slots, lambda s: {_NODE_OF}), 'histogram'))) AS e FROM {VIEW}{_where(namespace)})")
    else:
        source = f"SELECT *, gpus AS w FROM {VIEW}{_where(namespace)}"
    return f"SELECT {', '.join(keys)}, w, held_from_us AS f, held_until_us AS u FROM ({source})"


def define_entries(con, by: Sequence[str], namespace: str | None) -> None:
    """The temp tables ``audit_keys`` and ``audit_entries``: one row per entry of the window (module docstring),
    its key as a small integer (sorting and partitioning by it is cheaper than by strings)."""
    names = ", ".join(f"k{i}" for i in range(len(by)))
    run(con, f"CREATE OR REPLACE TEMP TABLE audit_raw AS {_entries(by, namespace)}")
    run(con, f"CREATE OR REPLACE TEMP TABLE {KEYS} AS SELECT (row_number() OVER ())::INTEGER AS id, {names} "
             f"FROM (SELECT DISTINCT {names} FROM audit_raw)")
    run(con, f"CREATE OR REPLACE TEMP TABLE {ENTRIES} AS SELECT id, w, f, u FROM audit_raw JOIN {KEYS} USING ({names})")
    run(con, "DROP TABLE audit_raw")


def _key_of(con, width: int) -> dict[int, tuple]:
    return {r[0]: tuple(r[1:]) for r in run(con, f"SELECT * FROM {KEYS}")} if width else {}


def rows(con, by: Sequence[str], namespace: str | None) -> tuple[list[AuditRow], int, int]:
    """The window's rows (sorted as the engine sorts them), its GPU-microseconds and its leases (of ``namespace``
    only, when given). ``define_entries`` first."""
    found = _swept(con, f"""
WITH {{levels}},
pk AS (SELECT id, max(level) AS peak, min(level) AS low FROM lv GROUP BY id),
used AS (SELECT id, sum(w * (u - f)::HUGEINT) AS us, count(*) AS leases FROM {ENTRIES} GROUP BY id)
SELECT id, us, leases, peak, low FROM used JOIN pk USING (id)""")
    key_of = _key_of(con, len(by))
    return _with_totals(con, by, namespace, [(key_of[i], int(us), leases, int(peak)) for i, us, leases, peak in found])


def hours(con, by: Sequence[str], namespace: str | None) -> tuple[list[AuditRow], int, int]:
    """``rows`` without the peaks (``peak_gpus`` None), in one aggregate over the view: no temp table, no sort
    of the events (``--hours-only``). No ``define_entries`` needed."""
    names = ", ".join(f"k{i}" for i in range(len(by)))
    known = " AND ".join(f"k{i} IS NOT NULL" for i in range(len(by)))  # as define_entries' join keeps them
    found = run(con, f"SELECT {names}, sum(w * (u - f)::HUGEINT), count(*) FROM ({_entries(by, namespace)}) "
                     f"WHERE {known} GROUP BY {names}")
    width = len(by)
    return _with_totals(con, by, namespace, [(tuple(r[:width]), int(r[width]), r[width + 1], None) for r in found])


def _with_totals(con, by: Sequence[str], namespace: str | None,
                 counted: list[tuple]) -> tuple[list[AuditRow], int, int]:
    """(key, GPU-µs, leases, peak) per key -> the sorted rows, the window's GPU-microseconds and its leases."""
    if NODE in by:  # a lease on two nodes is two entries: the totals count leases
        total, count = lease_totals(con, namespace)
    else:
        total, count = sum(c[1] for c in counted), sum(c[2] for c in counted)
    return _audit_rows(counted), total, count


def lease_totals(con, namespace: str | None) -> tuple[int, int]:
    """GPU-microseconds and leases of the window (of ``namespace`` only, when given)."""
    us, count = run(con, f"SELECT coalesce(sum(gpus * (held_until_us - held_from_us)::HUGEINT), 0), count(*) "
                         f"FROM {VIEW}{_where(namespace)}")[0]
    return int(us), count


def _audit_rows(found: list[tuple]) -> list[AuditRow]:
    """(key, GPU-µs, leases, peak) -> AuditRows, sorted as engine/audit.py sorts them: by GPU-seconds (the
    floats, as reported: distinct microsecond sums above 2^53 can be one float) descending, then key. Plain
    tuples sort in C; the rows are made once sorted."""
    ordered = sorted([(-seconds_of(us), key, leases, peak) for key, us, leases, peak in found])
    return [AuditRow(key, -negative, leases, peak) for negative, key, leases, peak in ordered]


# --- periods --------------------------------------------------------------------------------------------------


def period_index(every: str, at: datetime) -> int:
    """The calendar period holding ``at``, numbered as ``_index_sql`` numbers them."""
    if every == MONTH:
        at = at.astimezone(UTC)
        return at.year * 12 + at.month
    us = micros(at)
    return (us + _DAY_OFFSET) // _DAY if every == DAY else (us + _WEEK_OFFSET) // _WEEK


def _index_sql(every: str, t: str) -> str:
    if every == MONTH:
        return f"(year(make_timestamp({t})) * 12 + month(make_timestamp({t})))"
    if every == DAY:
        return f"(({t} + {_DAY_OFFSET}) // {_DAY})"
    return f"(({t} + {_WEEK_OFFSET}) // {_WEEK})"


def period_rows(con, by: Sequence[str], namespace: str | None, every: str,
                spans: Sequence[tuple[datetime, datetime]]) -> tuple[list[AuditRow], list[tuple[list[AuditRow], int, int]]]:
    """The window's rows, and per span (a period clipped to the window: ``[start, end)``, consecutive, in order)
    its rows, its GPU-microseconds and its leases, from one sweep. ``define_entries`` first; ``spans`` cover the
    window (the whole window's peaks are the largest of its periods')."""
    table = [(period_index(every, lo), micros(lo), micros(hi)) for lo, hi in spans]
    if len({i for i, _lo, _hi in table}) != len(table):
        raise ValueError("spans: one per calendar period")
    run(con, f"CREATE OR REPLACE TEMP TABLE {PERIODS} AS SELECT unnest(?::BIGINT[]) AS i, "
             f"unnest(?::BIGINT[]) AS ps, unnest(?::BIGINT[]) AS pe",
        [[i for i, _, _ in table], [lo for _, lo, _ in table], [hi for _, _, hi in table]])
    # Per period and key: GPU-µs, leases, and the peak: the larger of the level at the period's start without
    # its starts (the entries that began before it: "base") and the levels at its events, leaving out the ends at
    # its start instant (entries that ended when it began: between two of them the level is not one of the period's).
    found = _swept(con, f"""
WITH {{levels}},
r AS (SELECT i, id, sum(w * (least(u, pe) - greatest(f, ps))::HUGEINT) AS us, count(*) AS leases,
             coalesce(sum(w) FILTER (WHERE f < ps), 0) AS base
      FROM (SELECT *, unnest(range({_index_sql(every, 'f')}, {_index_sql(every, 'u - 1')} + 1)) AS i
            FROM {ENTRIES}) JOIN {PERIODS} USING (i)
      GROUP BY i, id),
ag AS (SELECT i, id, max(level) FILTER (WHERE t > ps OR d > 0) AS inside, min(level) AS low
       FROM (SELECT id, t, d, level, {_index_sql(every, 't')} AS i FROM lv) JOIN {PERIODS} USING (i) GROUP BY i, id)
SELECT i, id, us, leases, greatest(base, coalesce(inside, 0)) AS peak, low FROM r LEFT JOIN ag USING (i, id)""")
    key_of = _key_of(con, len(by))
    per: dict[int, list[tuple]] = {}
    whole: dict[int, list[int]] = {}  # id -> [GPU-µs, peak]
    for i, key_id, us, leases, peak in found:
        us, peak = int(us), int(peak)
        per.setdefault(i, []).append((key_of[key_id], us, leases, peak))
        seen = whole.get(key_id)
        if seen is None:
            whole[key_id] = [us, peak]
        else:
            seen[0] += us
            seen[1] = max(seen[1], peak)
    counts = dict(run(con, f"SELECT id, count(*) FROM {ENTRIES} GROUP BY id"))
    window = _audit_rows([(key_of[k], us, counts[k], peak) for k, (us, peak) in whole.items()])
    totals = _lease_period_totals(con, namespace, every) if NODE in by else {}
    out = []
    for i, _lo, _hi in table:
        got = per.get(i, [])
        if NODE in by:
            total, count = totals.get(i, (0, 0))
        else:
            total, count = sum(r[1] for r in got), sum(r[2] for r in got)
        out.append((_audit_rows(got), total, count))
    return window, out


def _lease_period_totals(con, namespace: str | None, every: str) -> dict[int, tuple[int, int]]:
    found = run(con, f"""
SELECT i, sum(gpus * (least(held_until_us, pe) - greatest(held_from_us, ps))::HUGEINT), count(*)
FROM (SELECT gpus, held_from_us, held_until_us,
             unnest(range({_index_sql(every, 'held_from_us')}, {_index_sql(every, 'held_until_us - 1')} + 1)) AS i
      FROM {VIEW}{_where(namespace)}) JOIN {PERIODS} USING (i) GROUP BY i""")
    return {i: (int(us), count) for i, us, count in found}


def run(con, query: str, params: list | None = None) -> list[tuple]:
    """Run one query of the audit; DuckDB's errors (an unreadable file, no memory) as one line."""
    try:
        return con.execute(query, params).fetchall()
    except db.Error as exc:
        raise ArchiveError(f"the archived leases: cannot be counted: {db.first_line(exc)}") from None
