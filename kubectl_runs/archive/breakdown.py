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
  touches (rows, GPU-time, leases); a key's peak in a period is the larger of its level at the period's start
  (after the events at that instant, else carried from its last earlier event) and its levels at the events
  inside the period.

Keys come back to Python as rows (one per key, or per period and key), sorted there as the engine sorts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ..engine.audit import ENVELOPE, FLAVOR, NO_ENVELOPE, NODE, OWNER, RUN, AuditRow
from ..engine.audit_periods import DAY, MONTH
from ..engine.audit_window import seconds_of
from . import db
from .manifest import ArchiveError
from .relation import VIEW
from .schema import micros

ENTRIES = "audit_entries"  # temp table: one row per entry (keys k0…, weight w, held_from f, held_until u)

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


def _keys(by: Sequence[str]) -> list[str]:
    return [f"k{i}" for i in range(len(by))]


def define_entries(con, by: Sequence[str], namespace: str | None) -> None:
    """The temp table ``audit_entries``: one row per entry of the window (module docstring)."""
    where = "" if namespace is None else f" WHERE namespace = {db.quote(namespace)}"
    keys = [f"{'node' if dim == NODE else _KEYS[dim]} AS k{i}" for i, dim in enumerate(by)]
    if NODE in by:
        source = (f"SELECT *, e.key AS node, e.value::INTEGER AS w FROM (SELECT *, unnest(map_entries(list_aggregate("
                  f"list_transform(slots, lambda s: {_NODE_OF}), 'histogram'))) AS e FROM {VIEW}{where})")
    else:
        source = f"SELECT *, gpus AS w FROM {VIEW}{where}"
    run(con, f"CREATE OR REPLACE TEMP TABLE {ENTRIES} AS SELECT {', '.join(keys)}, w, held_from_us AS f, "
             f"held_until_us AS u FROM ({source})")


def rows(con, by: Sequence[str], namespace: str | None) -> tuple[list[AuditRow], int, int]:
    """The window's rows (sorted as the engine sorts them), its GPU-microseconds and its leases (of ``namespace``
    only, when given). ``define_entries`` first."""
    keys = ", ".join(_keys(by))
    found = run(con, f"""
WITH ev AS (SELECT {keys}, t, sum(d) AS d FROM (SELECT {keys}, f AS t, w AS d FROM {ENTRIES}
                                                UNION ALL SELECT {keys}, u AS t, -w AS d FROM {ENTRIES})
            GROUP BY ALL),
lv AS (SELECT {keys}, sum(d) OVER (PARTITION BY {keys} ORDER BY t ROWS UNBOUNDED PRECEDING) AS level FROM ev),
pk AS (SELECT {keys}, max(level) AS peak FROM lv GROUP BY ALL),
used AS (SELECT {keys}, sum(w * (u - f)::HUGEINT) AS us, count(*) AS leases FROM {ENTRIES} GROUP BY ALL)
SELECT {keys}, us, leases, peak FROM used JOIN pk USING ({keys})""")
    out = _audit_rows(found, len(by))
    if NODE in by:  # a lease on two nodes is two entries: the totals count leases
        total, count = lease_totals(con, namespace)
    else:
        total, count = sum(r[len(by)] for r in found), sum(r[len(by) + 1] for r in found)
    return out, total, count


def lease_totals(con, namespace: str | None) -> tuple[int, int]:
    """GPU-microseconds and leases of the window (of ``namespace`` only, when given)."""
    where = "" if namespace is None else f" WHERE namespace = {db.quote(namespace)}"
    us, count = run(con, f"SELECT coalesce(sum(gpus * (held_until_us - held_from_us)::HUGEINT), 0), count(*) "
                         f"FROM {VIEW}{where}")[0]
    return int(us), count


def _audit_rows(found: list[tuple], width: int) -> list[AuditRow]:
    out = [AuditRow(key=tuple(r[:width]), gpu_seconds=seconds_of(int(r[width])), leases=r[width + 1],
                    peak_gpus=int(r[width + 2])) for r in found]
    out.sort(key=lambda r: (-r.gpu_seconds, r.key))
    return out


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
                spans: Sequence[tuple[datetime, datetime]]) -> list[tuple[list[AuditRow], int, int]]:
    """Per span (a period clipped to the window: ``[start, end)``, consecutive, in order): its rows, its
    GPU-microseconds and its leases. ``define_entries`` first."""
    if not spans:
        return []
    table = [(period_index(every, lo), micros(lo), micros(hi)) for lo, hi in spans]
    if len({i for i, _lo, _hi in table}) != len(table):
        raise ValueError("spans: one per calendar period")
    run(con, "CREATE OR REPLACE TEMP TABLE audit_periods AS SELECT unnest(?::BIGINT[]) AS i, "
             "unnest(?::BIGINT[]) AS ps, unnest(?::BIGINT[]) AS pe",
        [[i for i, _, _ in table], [lo for _, lo, _ in table], [hi for _, _, hi in table]])
    keys = ", ".join(_keys(by))
    found = run(con, f"""
WITH r AS (SELECT i, {keys}, sum(w * (least(u, pe) - greatest(f, ps))::HUGEINT) AS us, count(*) AS leases
           FROM (SELECT *, unnest(range({_index_sql(every, 'f')}, {_index_sql(every, 'u - 1')} + 1)) AS i
                 FROM {ENTRIES}) JOIN audit_periods USING (i)
           GROUP BY ALL),
ev AS (SELECT {keys}, t, sum(d) AS d FROM (SELECT {keys}, f AS t, w AS d FROM {ENTRIES}
                                           UNION ALL SELECT {keys}, u AS t, -w AS d FROM {ENTRIES})
       GROUP BY ALL),
lv AS (SELECT {keys}, t, {_index_sql(every, 't')} AS i,
              sum(d) OVER (PARTITION BY {keys} ORDER BY t ROWS UNBOUNDED PRECEDING) AS level FROM ev),
ag AS (SELECT i, {keys}, max(level) FILTER (WHERE t > ps) AS inside, max(level) FILTER (WHERE t = ps) AS at_start,
              arg_max(level, t) AS last_level
       FROM lv JOIN audit_periods USING (i) GROUP BY ALL),
c AS (SELECT *, last_value(last_level IGNORE NULLS) OVER (PARTITION BY {keys} ORDER BY i
                                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS carried
      FROM r FULL JOIN ag USING (i, {keys}))
SELECT i, {keys}, us, leases, greatest(coalesce(at_start, carried, 0), coalesce(inside, 0)) AS peak
FROM c WHERE us IS NOT NULL""")
    width = len(by)
    per: dict[int, list[tuple]] = {}
    for r in found:
        per.setdefault(r[0], []).append(r[1:])
    totals: dict[int, tuple[int, int]] = {}
    if NODE in by:
        totals = _lease_period_totals(con, namespace, every)
    out = []
    for i, _lo, _hi in table:
        got = per.get(i, [])
        if NODE in by:
            total, count = totals.get(i, (0, 0))
        else:
            total, count = sum(int(r[width]) for r in got), sum(r[width + 1] for r in got)
        out.append((_audit_rows(got, width), total, count))
    return out


def _lease_period_totals(con, namespace: str | None, every: str) -> dict[int, tuple[int, int]]:
    where = "" if namespace is None else f" WHERE namespace = {db.quote(namespace)}"
    found = run(con, f"""
SELECT i, sum(gpus * (least(held_until_us, pe) - greatest(held_from_us, ps))::HUGEINT), count(*)
FROM (SELECT gpus, held_from_us, held_until_us,
             unnest(range({_index_sql(every, 'held_from_us')}, {_index_sql(every, 'held_until_us - 1')} + 1)) AS i
      FROM {VIEW}{where}) JOIN audit_periods USING (i) GROUP BY i""")
    return {i: (int(us), count) for i, us, count in found}


def run(con, query: str, params: list | None = None) -> list[tuple]:
    """Run one query of the audit; DuckDB's errors (an unreadable file, no memory) as one line."""
    try:
        return con.execute(query, params).fetchall()
    except db.Error as exc:
        raise ArchiveError(f"the archived leases: cannot be counted: {db.first_line(exc)}") from None
