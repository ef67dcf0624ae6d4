"""The findings of ``leases audit --archive`` over the audit window's DuckDB view (archive/relation.py): the same
findings as the JSON path on the same leases, without a Python object per archived lease.

Slot lists are the expensive column (a list of strings per lease): they are read twice, once grouped into the
window's distinct lists (exactly: ``_lists``) and once hashed into ``audit_findings_spans``, a narrow temp table
of one row per lease (list hash, start, end, GPUs, payer hash: ``_spans``) that the clash sweep, the envelopes'
bounds and the choice of the leases to read again share. Leases are read again at their starts only (an IN
list of constants the Parquet scan prunes row groups with: ``_by_start``).

``DoubleBooked`` is computed in SQL; every other kind depends on a small part of the window that SQL can find
(engine/audit.py ``window_findings``), so DuckDB selects that part and the unchanged engine runs on it alone:

* ``DoubleBooked`` (``double_booked_findings``): the slots held twice at one instant are found by a sweep in
  order of start (a lease that starts before the previous lease's end clashes; half-open intervals) — per slot
  list over the spans for a list that shares no slot with another (no list is read: a history of fixed
  partitions is swept lease by lease), per slot for the others (``_Lists``) — and only the rows holding such a
  slot are read again for the episodes (engine/audit_slots.py ``_episodes``): of a list sharing no slot, only
  its leases that overlap another of its leases (the others are in no episode). Episodes are grouped per node as
  the engine groups them and said by the engine's ``double_booked``: no lease is rebuilt, so 100,000 leases
  piled on one slot cost one query;
* ``UnknownNode``, ``UnknownRun``, ``UnknownEnvelope`` are findings of one lease each: the leases whose slot
  list holds a slot the snapshot's nodes do not have (judged once per distinct list), naming a run it does not
  have (unless closed as the run went away), or charged to an envelope it does not have;
* the ledger findings (``ACLViolation``, ``Overdraft``, ``UnboundNamespace``) come from the ledger evaluated
  at the end of the window, on the leases open then, and at the suspect instants of the budgets where a cheap
  bound says a problem is possible (engine/audit_findings.py ``_suspect_instants``). Those bounds — a lease
  outside its envelope's window, an owner the envelope does not lend to, a peak of charged (or borrowed) GPUs
  above the concurrency (or lending cap), envelope peaks adding up above an aggregate cap — are computed here
  in SQL per envelope and owner, as upper bounds of the engine's; every lease of a budget that may be suspect
  is taken, and the leases open at the end of the window.

The bounds only fall when leases are left out, so the engine on the union of those leases finds exactly the
findings (and ledger instants) it finds on the whole window. ``gpus`` is the number of slots (archive/schema.py).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from operator import attrgetter
from typing import NamedTuple

from ..engine.accounting import BORROWED, lends_to, relation
from ..engine.audit import window_findings
from ..engine.audit_findings import RUN_GONE_REASONS
from ..engine.audit_slots import NO_NODES_NOTE, double_booked
from ..engine.audit_window import Window, clip, split_slot
from ..engine.findings import Finding, sort_findings
from ..engine.lease_faults import lease_time_findings
from ..engine.slots import slot_fault
from ..model import GPULease, Snapshot
from . import db
from .manifest import ArchiveError
from .schema import LEASE_SELECT, lease_of, micros

# The small tables of the snapshot and of the leases to fetch (temp tables of the connection).
_RUNS = "audit_findings_runs"
_PAYERS = "audit_findings_payers"
_PEAKS = "audit_findings_peak_members"
_CLASH = "audit_findings_clashing_slots"
_SPANS = "audit_findings_spans"  # one narrow row per lease of the window (``_spans``)
_LISTS = "audit_findings_lists"  # the slot lists of the first rows, each with its hash (``_spans``)
_SAMPLE = 100_000  # the rows whose lists are grouped before the one scan of every list

# How a slot list is hashed: DuckDB's 64-bit hash, every list of the window found exactly (``_lists``), so that a
# collision only makes the lists concerned swept per slot. (The tests replace it with a hash that collides.)
_LIST_HASH = "hash(slots)"

_FETCH_BY_START = 1_000  # up to this many distinct starts, the view is read at those starts only (``_by_start``)
# (beyond, an IN list costs more than it prunes: 1M leases, 5,000 spread starts: 0.65 s CPU against 0.31 s for a full
# scan; 1,000: 0.29 s)

EnvelopeKey = tuple[str, str, str]


def findings(con, view: str, snapshot: Snapshot, since: datetime, hi_at: datetime, *, namespace: str | None = None,
             ledger_at_starts: bool = True, notes: list[str] | None = None,
             read: datetime | None = None) -> tuple[list[Finding], int]:
    """The findings of the leases of ``view`` — the window ``[since, hi_at)`` (``hi_at``: ``min(until, at)``)
    as archive/relation.py defines it, each lease once — sorted and narrowed to ``namespace`` as the engine's
    ``window_findings``, with the number of ledger instants; the notes the engine adds go into ``notes``.
    ``snapshot`` gives the nodes, runs and budgets, and the live leases (their rows in the view are the live
    copies)."""
    lo_us, hi_us = micros(since), micros(hi_at)
    # One scan of the narrow columns for two groupings: per envelope and owner (the ledger's bounds), per run.
    rows = _query(con, f"SELECT GROUPING(owner), payer_namespace, paid_by_budget, paid_by_envelope, owner, count(*), "
                       f"sum(gpus), min(held_from_us), max(held_until_us), sum(held_until_us - held_from_us), "
                       f"hash(payer_namespace, paid_by_budget, paid_by_envelope), run_namespace, run_name FROM {view} "
                       f"GROUP BY GROUPING SETS ((payer_namespace, paid_by_budget, paid_by_envelope, owner), "
                       f"(run_namespace, run_name))")
    groups = [row[1:11] for row in rows if not row[0]]
    refs = [(row[11], row[12]) for row in rows if row[0]]
    in_window = sum(row[4] for row in groups)
    part: list[GPULease] = []
    found: list[Finding] = []
    if in_window:
        runs = _unknown_runs(snapshot, refs)
        lists = _spans(con, view, runs)
        unknown = lists.unknown(snapshot)
        clashing, holding = lists.clashing(con, view, lo_us)
        found = double_booked_findings(con, view, clashing, holding)
        if namespace is not None:
            found = [f for f in found if f.namespace == namespace]
        payers = _unknown_payers(snapshot, groups)
        if ledger_at_starts:
            payers += _suspect_payers(con, view, snapshot, groups, lo_us, hi_us)
        part = _part(con, view, snapshot, hi_us, unknown, runs, payers)
    sub = replace(snapshot, leases=tuple(part))
    win = clip(sub.leases, since, hi_at) if since < hi_at else Window(lo=0.0, hi=0.0)
    said: list[str] = []
    others, instants = window_findings(sub, win, since, hi_at, namespace, ledger_at_starts, said, double_booked=False)
    # The times of the live leases (InvalidInterval, ClosedWithoutEnd, FutureStart: engine/lease_faults.py); those
    # of archived leases are not read back from the archive (docs/arithmetic.md, Findings).
    # (``read``: when the objects were read, for FutureStart; None: the snapshot's stamp, or not judged)
    timed = lease_time_findings(snapshot.leases, since, hi_at, read or snapshot.taken_at)
    others += [f for f in timed if namespace is None or f.namespace == namespace]
    if in_window and not snapshot.nodes and NO_NODES_NOTE not in said:
        said.append(NO_NODES_NOTE)  # the engine says it when the window has leases, not only the part taken
    if notes is not None:
        notes.extend(said)
    return sort_findings([*found, *others]), instants


def _spans(con, view: str, runs: list[tuple[str, str]]) -> _Lists:
    """The temp table ``audit_findings_spans`` — one narrow row per lease of the window, made by the one scan
    that reads every slot list, and shared by the scans that would each read them again (the clash sweep, the
    envelopes' bounds, finding the leases to read again) — and the window's distinct slot lists, exactly:

    * ``h``: the hash of the slot list (``_LIST_HASH``; ``_Lists`` knows which lists each hash stands for);
    * ``start_us``, ``e`` (``held_until_us``), ``g`` (``gpus``: the number of slots);
    * ``k``: the hash of the paying envelope's key (NULL: unfunded);
    * ``r``: the hash of the run reference when ``runs`` (the unknown ones) are to be judged and the lease is
      not closed as its run went away (NULL otherwise).

    The lists: those of the first ``_SAMPLE`` rows are grouped first (``audit_findings_lists``); the scan
    compares every lease's list with the sampled list of its hash, and the lists of the leases that differ
    (*odd*: a list first used later, or a hash collision) are grouped from those leases alone, read again at
    their starts — one scan of every list instead of two (grouping every lease's list costs more than comparing
    it with one). A lease's rows are found again by ``start`` (``_by_start``)."""
    gone = ", ".join(f"'{reason}'" for reason in sorted(RUN_GONE_REASONS))
    judged = (f"CASE WHEN coalesce(NOT closed OR closure_reason IS NULL OR closure_reason NOT IN ({gone}), false) "
              f"THEN hash(run_namespace, run_name) END") if runs else "NULL::UBIGINT"
    _query(con, f"CREATE OR REPLACE TEMP TABLE {_LISTS} AS SELECT slots, {_LIST_HASH} AS h "
                f"FROM (SELECT slots FROM {view} LIMIT {_SAMPLE}) GROUP BY slots", fetch=False)
    # Each lease's list is compared with the sampled list of its hash (a hash two sampled lists have is no one's)
    _query(con, f"CREATE OR REPLACE TEMP TABLE {_SPANS} AS SELECT v.h, l.h IS NULL OR v.slots IS DISTINCT FROM "
                f"l.slots AS odd, start_us, e, g, k, r FROM (SELECT slots, {_LIST_HASH} AS h, start_us, "
                f"held_until_us AS e, gpus AS g, CASE WHEN paid_by_budget IS NOT NULL THEN hash(payer_namespace, "
                f"paid_by_budget, paid_by_envelope) END AS k, {judged} AS r FROM {view}) AS v LEFT JOIN "
                f"(SELECT h, any_value(slots) AS slots FROM {_LISTS} GROUP BY h HAVING count(*) = 1) AS l "
                f"ON v.h = l.h", fetch=False)
    rows = _query(con, f"SELECT slots, h FROM {_LISTS}")
    odd = _starts(con, f"SELECT start_us FROM {_SPANS} WHERE odd")
    if odd != []:
        rows += _query(con, f"SELECT slots, {_LIST_HASH} FROM (SELECT slots FROM {view} WHERE {_by_start(odd)}) "
                            f"ANTI JOIN {_LISTS} USING (slots) GROUP BY slots")
    return _Lists(rows)


def _starts(con, query: str, params: list | None = None) -> list[int] | None:
    """The distinct ``start_us`` of the rows of ``query``; None when there are more than ``_FETCH_BY_START`` of
    them (a scan filtered by so many instants gains nothing)."""
    found = _query(con, f"SELECT DISTINCT start_us FROM ({query}) LIMIT {_FETCH_BY_START + 1}", params)
    return None if len(found) > _FETCH_BY_START else sorted(x for (x,) in found)


def _by_start(starts: list[int] | None) -> str:
    """A filter of the view's rows on ``start`` (a conjunct: ``"true"`` when ``starts`` is None): one IN list of
    constants, which DuckDB pushes into the Parquet scan, so that only the rows it keeps are decoded whole."""
    if starts is None:
        return "true"
    if not starts:
        return "false"
    return "start IN (" + ", ".join(f"make_timestamp({x})::TIMESTAMPTZ" for x in starts) + ")"


def _part(con, view: str, snapshot: Snapshot, hi_us: int, lists: list[int], runs: list[tuple[str, str]],
          payers: list[EnvelopeKey]) -> list[GPULease]:
    """The leases of the window the findings other than ``DoubleBooked`` depend on (module docstring), in the
    order of a loaded snapshot (namespace, name; a live lease before an archived one). ``lists``: hashes of the
    slot lists to take (a list whose hash collides with another's takes that one's leases too). The spans
    (hashes) say which starts can hold such a lease; the view is then read at those starts only."""
    _register(con, _RUNS, ("ref_namespace", "ref_name"), runs)
    _register(con, _PAYERS, ("key_namespace", "key_budget", "key_envelope"), payers)
    starts = _starts(
        con,
        f"SELECT start_us FROM {_SPANS} WHERE e >= {hi_us} OR k IN (SELECT hash(key_namespace, key_budget, key_envelope) FROM {_PAYERS}) "
        f"OR r IN (SELECT hash(ref_namespace, ref_name) FROM {_RUNS})"
        + (" OR h IN (SELECT unnest(?::UBIGINT[]))" if lists else ""),
        [lists] if lists else None,
    )
    gone = ", ".join(f"'{reason}'" for reason in sorted(RUN_GONE_REASONS))
    rows = _query(
        con,
        f"SELECT {LEASE_SELECT}, live FROM {view} "
        f"LEFT JOIN {_RUNS} ON ref_namespace = run_namespace AND ref_name = run_name "
        f"LEFT JOIN {_PAYERS} ON key_namespace = payer_namespace AND key_budget = paid_by_budget "
        f"AND key_envelope = paid_by_envelope "
        f"WHERE {_by_start(starts)} AND (held_until_us >= {hi_us} OR key_namespace IS NOT NULL "
        f"OR (ref_namespace IS NOT NULL AND (NOT closed OR closure_reason IS NULL OR closure_reason NOT IN ({gone})))"
        + (f" OR {_LIST_HASH} IN (SELECT unnest(?::UBIGINT[])))" if lists else ")"),
        [lists] if lists else None,
    )
    return _leases(snapshot, rows)


def _leases(snapshot: Snapshot, rows: list[tuple]) -> list[GPULease]:
    """The rows as leases: a live row is the snapshot's own lease (its status may be open), an archived row is
    rebuilt (``schema.lease_of``); in the order a loaded snapshot holding them all keeps (namespace, name)."""
    live_keys = {(row[0], row[1], row[2]) for row in rows if row[-1]}
    live = [x for x in snapshot.leases if x.archive_key in live_keys] \
        if live_keys else []
    archived = [lease_of(row[:-1]) for row in rows if not row[-1]]
    archived.sort(key=attrgetter("archive_key"))
    merged = [*live, *archived]
    merged.sort(key=lambda x: (x.metadata.namespace, x.metadata.name))
    return merged


# --- slots: DoubleBooked, UnknownNode ----------------------------------------------------------------------


class _Lists:
    """The window's distinct slot lists (each with DuckDB's hash of it): a slot held by one list only is swept
    with that list's leases, without unnesting them (a history of fixed partitions never unnests); only the
    lists sharing a slot with another list (or whose hash collides with another's) are swept per slot."""

    def __init__(self, rows: list[tuple]):
        self.rows = [(tuple(held), h) for held, h in rows]
        holders: dict[str, set[tuple[str, ...]]] = {}
        by_hash: dict[int, list[tuple[str, ...]]] = {}
        for held, h in self.rows:
            by_hash.setdefault(h, []).append(held)
            for slot in held:
                holders.setdefault(slot, set()).add(held)
        self.shared = {h for held, h in self.rows if len(by_hash[h]) > 1 or any(len(holders[x]) > 1 for x in held)}

    def unknown(self, snapshot: Snapshot) -> list[int]:
        """The hashes of the lists holding a slot that names no GPU of the snapshot's nodes (engine/slots.py:
        without nodes, only malformed slots)."""
        nodes = snapshot.nodes_by_name
        out = set()
        for held, h in self.rows:
            if any(slot_fault(slot, nodes) is not None for slot in held):
                out.add(h)
        return sorted(out)

    def clashing(self, con, view: str, lo_us: int) -> tuple[dict[str, str], _Holding]:
        """Every slot held twice at one instant (slot -> node), and which rows hold them. In order of start, a
        lease that starts before the previous lease's end (of its list, or of its slot for shared lists)
        clashes: half-open intervals. The lists sharing no slot are swept over the spans (no list is read)."""
        slots: set[str] = set()
        flagged: list[int] = []
        starts: list[int] | None = []
        if len(self.shared) < len(self.rows):  # some lists are exclusive: swept per list, over the spans
            held_from = f"greatest(start_us, {lo_us})"
            flagged = sorted(h for (h,) in _query(
                con, f"SELECT DISTINCT h FROM (SELECT h, s < lag(e) OVER (PARTITION BY h ORDER BY s) AS clash FROM "
                     f"(SELECT h, {held_from} AS s, e FROM {_SPANS}"
                     + (" WHERE h NOT IN (SELECT unnest(?::UBIGINT[]))" if self.shared else "") + ")) WHERE clash",
                [sorted(self.shared)] if self.shared else None))
            chosen = set(flagged)
            slots.update(x for held, h in self.rows if h in chosen for x in held)
            if flagged:
                # A row of such a list that overlaps no other row of it is in no episode (never a holder of an
                # overlap either): only the rows overlapping another are read again.
                starts = _starts(
                    con, f"SELECT start_us FROM (SELECT start_us, s < max(e) OVER (PARTITION BY h ORDER BY s ROWS BETWEEN "
                         f"UNBOUNDED PRECEDING AND 1 PRECEDING) OR e > lead(s) OVER (PARTITION BY h ORDER BY s) "
                         f"AS involved FROM (SELECT h, start_us, {held_from} AS s, e FROM {_SPANS} "
                         f"WHERE h IN (SELECT unnest(?::UBIGINT[])))) WHERE involved", [flagged])
        if self.shared:
            slots.update(x for (x,) in _query(
                con, f"SELECT DISTINCT slot FROM (SELECT slot, held_from_us < lag(held_until_us) OVER (PARTITION BY "
                     f"slot ORDER BY held_from_us) AS clash FROM (SELECT unnest(slots) AS slot, held_from_us, "
                     f"held_until_us FROM {view} WHERE {_LIST_HASH} IN (SELECT unnest(?::UBIGINT[])))) WHERE clash",
                [sorted(self.shared)]))
        shared = sorted({h for held, h in self.rows if h in self.shared and any(x in slots for x in held)})
        return {x: split_slot(x)[0] for x in slots}, _Holding(flagged, starts, shared)


class _Holding(NamedTuple):
    """The rows holding a clashing slot: of the exclusive lists ``flagged`` (hashes) those starting at
    ``starts`` (epoch µs; None: all of them), and every row of the shared lists ``shared``."""

    flagged: list[int]
    starts: list[int] | None
    shared: list[int]

    def select(self, view: str) -> tuple[str, list]:
        """The view's rows holding a clashing slot (``namespace, name, uid, start_us, held_from_us,
        held_until_us, slot``: one row per slot), with the query's parameters."""
        columns = (f"SELECT namespace, name, uid, start_us, held_from_us, held_until_us, unnest(slots) AS slot "
                   f"FROM {view} WHERE ")
        parts, params = [], []
        if self.flagged:
            parts.append(f"{columns}{_by_start(self.starts)} AND {_LIST_HASH} IN (SELECT unnest(?::UBIGINT[]))")
            params.append(self.flagged)
        if self.shared:
            parts.append(f"{columns}{_LIST_HASH} IN (SELECT unnest(?::UBIGINT[]))")
            params.append(self.shared)
        return " UNION ALL ".join(parts), params


def double_booked_findings(con, view: str, clashing: dict[str, str], holding: _Holding) -> list[Finding]:
    """The ``DoubleBooked`` findings of the slots in ``clashing`` (slot -> node; ``holding``: the rows holding
    them, which alone are unnested), from their episodes swept in SQL
    (engine/audit_slots.py ``_episodes``, docs/archive.md's query): per slot in order of start (then end and
    key: a total order, so that every window sees ties alike), a lease that starts before the latest end so far
    shares the slot with the lease holding it longest (the *holder*) until the earlier end; those overlaps,
    merged where they touch, are the episodes, and an episode's leases are its overlapping leases and their
    holders (a holder that starts inside an episode, when overlaps touch, is one of them too). A lease that
    overlaps no other lease on the slot changes none of this, so the rows read may leave it out. The slots of one
    node with the same episode — same interval, same leases — are one finding, said by the engine's
    ``double_booked``."""
    if not clashing:
        return []
    _register(con, _CLASH, ("slot", "node"), sorted(clashing.items()))
    order = "s, e, h, namespace, name, uid"  # h: cheap to compare; the names only on a tie of hashes
    before = "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
    rows_holding, params = holding.select(view)
    rows = _query(con, f"""
WITH held AS (
  SELECT DISTINCT namespace, name, uid, start_us, held_from_us AS s, held_until_us AS e, slot, node,
                  hash(namespace, name, uid) AS h
  FROM ({rows_holding})
  JOIN {_CLASH} USING (slot)),
swept AS (
  SELECT *, max(e) OVER w AS held_until,
         arg_max({{'start_us': start_us, 'lease': namespace || '/' || name, 'uid': uid}}, e) OVER w AS held_by
  FROM held WINDOW w AS (PARTITION BY slot ORDER BY {order} {before})),
shared AS (
  SELECT *, max(until) OVER (PARTITION BY slot ORDER BY {order} {before}) AS reach
  FROM (SELECT *, least(e, held_until) AS until FROM swept WHERE s < held_until)),
islands AS (
  SELECT *,
         sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END) OVER (PARTITION BY slot ORDER BY {order}
                                                                           ROWS UNBOUNDED PRECEDING) AS episode
  FROM shared),
episodes AS (
  SELECT slot, any_value(node) AS node, min(s) AS lo, max(until) AS hi,
         list_sort(list_distinct(list({{'start_us': start_us, 'lease': namespace || '/' || name, 'uid': uid}})
                                 || list(held_by))) AS leases
  FROM islands GROUP BY slot, episode)
SELECT node, lo, hi, list(slot ORDER BY slot), len(leases), [x.lease FOR x IN leases[1:4]]
FROM episodes GROUP BY node, lo, hi, leases""", params)
    return [double_booked(lo / 1e6, hi / 1e6, held, first, slots) for _node, lo, hi, slots, held, first in rows]


# --- runs and envelopes: UnknownRun, UnknownEnvelope -----------------------------------------------------------


def _unknown_runs(snapshot: Snapshot, refs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The run references of the window that the snapshot does not have."""
    known = {(r.metadata.namespace, r.metadata.name) for r in snapshot.runs}
    return [ref for ref in refs if ref not in known]


def _unknown_payers(snapshot: Snapshot, groups: list[tuple]) -> list[EnvelopeKey]:
    envelopes = snapshot.envelopes_by_key
    keys = {(ns, budget, envelope) for ns, budget, envelope, *_rest in groups if budget is not None}
    return sorted(key for key in keys if key not in envelopes)


# --- the ledger: ACLViolation, Overdraft, UnboundNamespace -------------------------------------------------------


def _suspect_payers(con, view: str, snapshot: Snapshot, groups: list[tuple], lo_us: int,
                    hi_us: int) -> list[EnvelopeKey]:
    """Every known envelope of the budgets where ``_suspect_instants`` may find an instant to evaluate: the
    same tests on upper bounds of the same numbers. A peak is only needed where the GPUs' sum exceeds the limit,
    and then a bound comes first (``_bounds``): the exact peak only where the bound exceeds it too."""
    envelopes = snapshot.envelopes_by_key
    per_envelope: dict[EnvelopeKey, list[tuple]] = {}
    hashes: dict[EnvelopeKey, int] = {}
    for ns, budget, envelope, owner, leases, gpus, first, last, held, key_hash in groups:
        key = (ns, budget, envelope)
        if key in envelopes:
            per_envelope.setdefault(key, []).append((owner, leases, gpus, first, last, held))
            hashes[key] = key_hash
    suspects: set[tuple[str, str]] = set()
    totals = {key: sum(o[2] for o in owners) for key, owners in per_envelope.items()}
    over = [key for key, total in totals.items() if total > envelopes[key][1].concurrency]
    bounds = _bounds(con, [hashes[key] for key in over], [o for key in over for o in per_envelope[key]], lo_us,
                     hi_us)
    env_peaks: dict[EnvelopeKey, int] = {}  # an upper bound of the engine's (bounded) peak of each envelope
    peaks_wanted: list[tuple[int, EnvelopeKey, str]] = []  # (group id, envelope, owner)
    lending_groups: dict[EnvelopeKey, int] = {}
    for n, (key, owners) in enumerate(per_envelope.items()):
        budget, envelope = envelopes[key]
        open_us, close_us = micros(envelope.start), micros(envelope.end)
        covers = open_us <= lo_us and close_us >= hi_us
        if not covers and (min(o[3] for o in owners) < open_us or max(o[4] for o in owners) > close_us):
            suspects.add(key[:2])
        env_owner = budget.spec.owner
        outsiders = [o for o in owners if relation(o[0], env_owner) == BORROWED]
        if any(not lends_to(envelope, o[0]) for o in outsiders):
            suspects.add(key[:2])
        env_peaks[key] = min(totals[key], bounds.get(hashes[key], totals[key]))
        if env_peaks[key] > envelope.concurrency:
            peaks_wanted.extend((2 * n, key, o[0]) for o in owners)
        cap = None if envelope.lending is None else envelope.lending.max_concurrency
        borrowed = [o for o in outsiders if lends_to(envelope, o[0])]
        if cap is not None and sum(o[2] for o in borrowed) > cap:
            lending_groups[key] = 2 * n + 1
            peaks_wanted.extend((2 * n + 1, key, o[0]) for o in borrowed)
    peaks = _peaks(con, view, peaks_wanted)
    for n, key in enumerate(per_envelope):
        env_peaks[key] = peaks.get(2 * n, env_peaks[key])
        if env_peaks[key] > envelopes[key][1].concurrency:
            suspects.add(key[:2])
        lending = lending_groups.get(key)
        if lending is not None and peaks.get(lending, 0) > envelopes[key][1].lending.max_concurrency:
            suspects.add(key[:2])
    for budget in snapshot.budgets:
        ns, name = budget.metadata.namespace, budget.metadata.name
        for cap in budget.spec.aggregate_caps:
            members = [(ns, name, e) for e in cap.envelopes if (ns, name, e) in env_peaks]
            if sum(env_peaks[m] for m in members) > cap.max_concurrency:
                suspects.add((ns, name))
    return sorted(key for key in per_envelope if key[:2] in suspects)


def _bounds(con, hashes: list[int], owners: list[tuple], lo_us: int, hi_us: int) -> dict[int, int]:
    """An upper bound of the peak of GPUs charged to each envelope (by the hash of its key; envelopes whose
    hashes collide share one bound, the larger): time is cut into buckets, and the GPUs of the leases held during
    a bucket bound what is held at any instant of it. Buckets are twice the leases' mean length (at least a
    256th of the window), so a lease falls into two or three of them and the bound stays within a few times the
    true peak: hash aggregation, no sort."""
    if not hashes:
        return {}
    leases = sum(o[1] for o in owners)
    mean = sum(o[5] for o in owners) // max(leases, 1)
    width = max((hi_us - lo_us) // 256, 2 * mean, 1)
    rows = _query(
        con,
        f"SELECT k, max(g) FROM (SELECT k, b, sum(g) AS g FROM (SELECT k, g, unnest(range(s // {width}, "
        f"(e - 1) // {width} + 1)) AS b FROM (SELECT k, g, greatest(start_us, {lo_us}) AS s, e FROM {_SPANS} "
        f"WHERE k IN (SELECT unnest(?::UBIGINT[])))) GROUP BY k, b) GROUP BY k",
        [hashes],
    )
    return {k: int(bound) for k, bound in rows}


def _peaks(con, view: str, wanted: list[tuple[int, EnvelopeKey, str]]) -> dict[int, int]:
    """The peak of GPUs held at one instant by the leases of each group (group id -> GPUs): a group is some
    owners' leases charged to one envelope. Ends come before starts at one instant (half-open intervals)."""
    if not wanted:
        return {}
    _register(con, _PEAKS, ("gid", "namespace", "budget", "envelope", "owner"),
              [(gid, *key, owner) for gid, key, owner in wanted], types=("BIGINT",))
    rows = _query(
        con,
        f"WITH m AS (SELECT gid, held_from_us AS s, held_until_us AS e, gpus AS g FROM {view} AS v "
        f"JOIN {_PEAKS} AS p ON p.namespace = v.payer_namespace AND p.budget = v.paid_by_budget "
        f"AND p.envelope = v.paid_by_envelope AND p.owner = v.owner), "
        f"ev AS (SELECT gid, s AS t, g AS d FROM m UNION ALL SELECT gid, e AS t, -g AS d FROM m) "
        f"SELECT gid, max(held) FROM (SELECT gid, sum(d) OVER (PARTITION BY gid ORDER BY t, d "
        f"ROWS UNBOUNDED PRECEDING) AS held FROM ev) GROUP BY gid",
    )
    return {gid: int(peak) for gid, peak in rows}


# --- DuckDB -------------------------------------------------------------------------------------------------


def _register(con, table: str, columns: tuple[str, ...], rows: list[tuple], types: tuple[str, ...] = ()) -> None:
    """``rows`` as the temp table ``table`` (VARCHAR columns unless ``types`` says otherwise, from the first)."""
    kinds = [*types, *("VARCHAR",) * (len(columns) - len(types))]
    values = [[row[i] for row in rows] for i in range(len(columns))]
    select = ", ".join(f"unnest(?::{kind}[]) AS {name}" for name, kind in zip(columns, kinds, strict=True))
    _query(con, f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT {select}", values, fetch=False)


def _query(con, query: str, params: list | None = None, *, fetch: bool = True) -> list[tuple]:
    try:
        result = con.execute(query, params)
        return result.fetchall() if fetch else []
    except db.Error as exc:
        raise ArchiveError(f"the audit's findings: DuckDB failed: {db.first_line(exc)}") from None
