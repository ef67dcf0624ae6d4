"""The `leases audit` report: who used which GPUs over a window, and was the ledger honest (API.md §5).

``audit(snapshot, at, since=…, until=…, by=…)`` clips every lease to the window ``[since, min(until, at))``
(a lease holds its slots on ``[start, ended)``, or up to ``at`` while it is open; nothing after the evaluation
clock is known) and reports, per key of the ``by`` dimensions, the GPU-hours used, the leases that overlap the
window and the peak of GPUs held at one instant, with the totals and the findings:

* ``DoubleBooked`` — two or more leases held one slot at the same instant: one finding per *episode* (a
  maximal interval during which the slot is held more than once) and node, the slots with the same episode
  together, naming the lease that made it double-booked, the interval, the number of leases and the first few
  of them (never one finding per pair: 100,000 leases on the same slots are a handful of findings, found in
  O(n log n));
* ``UnknownNode``, ``UnknownRun``, ``UnknownEnvelope`` — a lease names a node, run or envelope that is not in
  the snapshot;
* ``ACLViolation``, ``Overdraft``, ``UnboundNamespace`` — funding problems, found by the ledger itself
  (``accounting.ledger``) evaluated at the end of the window and at every lease start inside the window where a
  problem is possible (see ``_ledger_findings``).

Histories run to millions of leases, so the arithmetic works on flat lists of floats (epoch seconds, computed
once per lease) and leans on C-level builtins (``sorted``, ``map``, ``accumulate``) rather than per-slot Python
work: slots are looked at once per distinct slot list, not once per lease.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from itertools import accumulate, compress, count, groupby, islice, takewhile
from operator import attrgetter, le, mul, neg, sub

from ..model import GPULease, GPULeaseSpec, PaidBy, Snapshot
from ..text import counted
from ..timeutil import rfc3339
from . import findings as fk
from . import reports
from .accounting import BORROWED, EnvelopeKey, ledger, lends_to, relation, unknown_envelope
from .findings import Finding, sort_findings

OWNER, ENVELOPE, FLAVOR, RUN, NODE = "owner", "envelope", "flavor", "run", "node"
DIMENSIONS = (OWNER, ENVELOPE, FLAVOR, RUN, NODE)
NO_ENVELOPE = "<none>"  # the envelope key of leases minted unfunded (no paidBy)

# Closed leases whose run or node is expected to be gone: not reported as UnknownRun / UnknownNode.
RUN_GONE_REASONS = frozenset({"RunDeleted", "Orphaned"})
NODE_GONE_REASONS = frozenset({"NodeFailure"})

# Above this many keys, peaks come from one sweep over every event instead of one sort per key.
_MANY_KEYS = 2000


@dataclass(frozen=True)
class AuditRow:
    """One key of the breakdown: ``key`` holds one value per ``by`` dimension."""

    key: tuple[str, ...]
    gpu_seconds: float  # GPU-seconds inside the window
    leases: int  # leases of this key that overlap the window
    peak_gpus: int  # most GPUs this key held at one instant inside the window

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


@dataclass(frozen=True)
class AuditReport:
    at: datetime
    since: datetime
    until: datetime
    by: tuple[str, ...]
    rows: list[AuditRow]
    total_gpu_seconds: float
    total_leases: int
    findings: list[Finding]
    ledger_instants: int = 0  # how many instants the ledger was evaluated at
    notes: list[str] = field(default_factory=list)

    @property
    def total_gpu_hours(self) -> float:
        return self.total_gpu_seconds / 3600.0

    @property
    def report(self) -> reports.AuditReport:
        """The value ``-o json`` prints: each row's ``by`` dimensions first, in the order asked for."""
        row_type = reports.audit_row_type(self.by)
        round_hours = reports.round_hours
        return reports.AuditReport(
            since=rfc3339(self.since) or "",
            until=rfc3339(self.until) or "",
            rows=[row_type(*row.key, round_hours(row.gpu_hours), row.leases, row.peak_gpus) for row in self.rows],
            totals=reports.AuditTotals(round_hours(self.total_gpu_hours), self.total_leases),
            findings=reports.finding_entries(self.findings),
        )


# --- the window -------------------------------------------------------------------------------------------


@dataclass
class _Window:
    """The leases that overlap the window, as parallel lists (index i = one lease)."""

    lo: float  # epoch seconds
    hi: float
    leases: list[GPULease] = field(default_factory=list)
    specs: list[GPULeaseSpec] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # clipped to the window
    ends: list[float] = field(default_factory=list)
    slots: list[tuple[str, ...]] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    _columns: dict[str, list] = field(default_factory=dict)

    def column(self, name: str) -> list:
        """One field of every window lease (``owner``, ``flavor``, ``run_namespace``, ``run_name``, ``paid_by``),
        extracted once at C speed."""
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = list(map(_GETTERS[name], self.specs))
        return found

    def gpu_seconds(self) -> list[float]:
        """Slots × seconds held inside the window, per lease."""
        found = self._columns.get("gpu_seconds")
        if found is None:
            found = self._columns["gpu_seconds"] = list(map(mul, self.gpus, map(sub, self.ends, self.starts)))
        return found

    def slot_lists(self) -> tuple[list[int], dict[int, list[int]]]:
        """Each lease's slot-list id (the index of the first window lease with an equal slot list) and the leases
        of each id, in order: slot lists are hashed once per lease, then handled once per distinct list."""
        found = self._columns.get("slot_ids")
        if found is None:
            first: dict[tuple[str, ...], int] = {}
            ids = list(map(first.setdefault, self.slots, count()))
            members: dict[int, list[int]] = {}
            if len(first) == len(ids):
                members = {i: [i] for i in ids}
            else:
                grouped: defaultdict[int, list[int]] = defaultdict(list)
                for i, list_id in enumerate(ids):
                    grouped[list_id].append(i)
                members = dict(grouped)
            found = self._columns["slot_ids"] = [ids, members]
        return found[0], found[1]


_GETTERS = {
    "start": attrgetter("start"),
    "owner": attrgetter("owner"),
    "flavor": attrgetter("flavor"),
    "run_namespace": attrgetter("run_ref.namespace"),
    "run_name": attrgetter("run_ref.name"),
    "paid_by": attrgetter("paid_by"),
}
_STATUS = attrgetter("status")


def _window(leases: Sequence[GPULease], lo_at: datetime, hi_at: datetime) -> _Window:
    """Every lease whose ``[start, ended or hi)`` overlaps ``[lo, hi)``, with its interval clipped to it.

    Histories are mostly leases that closed long before the window: one cheap test on each lease's status keeps
    the candidates, and one loop over those reads every field the report needs while the lease is at hand (one
    pass over each record is what costs: reading the same records column by column is about twice as slow)."""
    lo, hi = lo_at.timestamp(), hi_at.timestamp()
    win = _Window(lo=lo, hi=hi)
    statuses = list(map(_STATUS, leases))
    # Open, or closed after the window opened (a closed lease without an end never held anything).
    candidates = [i for i, st in enumerate(statuses) if not st.closed or ((e := st.ended) is not None and e > lo_at)]
    kept, specs, starts, ends, slots = win.leases, win.specs, win.starts, win.ends, win.slots
    owners: list[str] = []
    paid_by: list[PaidBy | None] = []
    run_namespaces: list[str] = []
    run_names: list[str] = []
    for i in candidates:
        lease = leases[i]
        spec = lease.spec
        start = spec.start
        if start >= hi_at:
            continue
        status = statuses[i]
        if status.closed:
            ended = status.ended
            if ended <= start:
                continue  # never held anything
            end = ended.timestamp()
            if end > hi:
                end = hi
        else:
            end = hi
        begin = start.timestamp()
        kept.append(lease)
        specs.append(spec)
        starts.append(begin if begin > lo else lo)
        ends.append(end)
        slots.append(spec.slice.slots)
        owners.append(spec.owner)
        paid_by.append(spec.paid_by)
        ref = spec.run_ref
        run_namespaces.append(ref.namespace)
        run_names.append(ref.name)
    win.gpus = list(map(len, slots))
    win._columns.update(owner=owners, paid_by=paid_by, run_namespace=run_namespaces, run_name=run_names)
    return win


def _gpu_seconds(win: _Window, idx: Sequence[int] | None = None) -> float:
    """Σ slots × seconds held inside the window, over ``idx`` (default: every window lease)."""
    seconds = win.gpu_seconds()
    if idx is None:
        return sum(seconds)
    return sum(map(seconds.__getitem__, idx))


# --- peaks ------------------------------------------------------------------------------------------------


def peak(starts: Sequence[float], ends: Sequence[float], gpus: Sequence[int]) -> int:
    """Most GPUs held at one instant by intervals ``[start, end)`` holding ``gpus`` each.

    Ends are put before starts and the sort is stable, so an interval that ends exactly when another starts
    does not count with it (the intervals are half-open)."""
    if not starts:
        return 0
    if len(starts) == 1:
        return gpus[0]
    times = list(ends)
    times += starts
    deltas = list(map(neg, gpus))
    deltas += gpus
    order = sorted(range(len(times)), key=times.__getitem__)
    return max(accumulate(map(deltas.__getitem__, order)))


def _peaks(keys: list, groups: dict, win_starts: list[float], win_ends: list[float], weights: list[int]) -> dict:
    """Peak GPUs per key; ``groups`` maps each key to the entry indices of ``keys``/``weights``, whose
    intervals are ``win_starts``/``win_ends`` (entries, not leases: with ``--by node`` a lease on two nodes is
    two entries)."""
    if len(groups) <= _MANY_KEYS:
        out = {}
        for key, idx in groups.items():
            out[key] = peak(
                list(map(win_starts.__getitem__, idx)),
                list(map(win_ends.__getitem__, idx)),
                list(map(weights.__getitem__, idx)),
            )
        return out
    # Many small keys (e.g. --by run): one stable sort of every event, one sweep with a running sum per key.
    n = len(keys)
    times = list(win_ends)
    times += win_starts
    order = sorted(range(2 * n), key=times.__getitem__)
    current = dict.fromkeys(groups, 0)
    best = dict.fromkeys(groups, 0)
    for j in order:
        if j < n:
            current[keys[j]] -= weights[j]
        else:
            key = keys[j - n]
            now = current[key] + weights[j - n]
            current[key] = now
            if now > best[key]:
                best[key] = now
    return best


# --- the report -------------------------------------------------------------------------------------------


def audit(
    snapshot: Snapshot,
    at: datetime,
    *,
    since: datetime,
    until: datetime,
    by: Sequence[str] = (OWNER,),
    namespace: str | None = None,
    ledger_at_starts: bool = True,
) -> AuditReport:
    """GPU-hours, leases and peak GPUs per key of ``by`` over ``[since, until)``, with findings.

    Units: GPU-hours in the rows and totals, GPUs for peaks. Only leases of ``namespace`` are counted and
    reported when it is given; funding is still judged with every lease charged to an envelope (a borrower in
    another namespace uses the same envelope). ``ledger_at_starts=False`` evaluates the ledger only at the end
    of the window."""
    by = tuple(by)
    if not by:
        raise ValueError("by: at least one dimension")
    for dim in by:
        if dim not in DIMENSIONS:
            raise ValueError(f"by: {dim!r} is not one of {', '.join(DIMENSIONS)}")
    if len(set(by)) != len(by):
        raise ValueError("by: each dimension at most once")
    if since >= until:
        raise ValueError(f"since ({rfc3339(since)}) must be before until ({rfc3339(until)})")
    # The report builds lists, tuples and dicts for every lease in the window (hundreds of thousands over a
    # month of history), none of them in a reference cycle: collecting while they are made only rescans them
    # (about a fifth of the engine's time on the 1M-lease history). They are freed by reference counting as
    # ``_audit`` returns, before the collector is switched back on.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _audit(snapshot, at, since, until, by, namespace, ledger_at_starts)
    finally:
        if paused:
            gc.enable()


def _audit(
    snapshot: Snapshot,
    at: datetime,
    since: datetime,
    until: datetime,
    by: tuple[str, ...],
    namespace: str | None,
    ledger_at_starts: bool,
) -> AuditReport:
    notes: list[str] = []
    hi_at = min(until, at)
    if until > at:
        notes.append(f"--until is after the evaluation time {rfc3339(at)}: GPU-hours are counted up to it")
    win = _window(snapshot.leases, since, hi_at) if since < hi_at else _Window(lo=0.0, hi=0.0)

    selected = None
    if namespace is not None:
        selected = [i for i, lease in enumerate(win.leases) if lease.metadata.namespace == namespace]

    rows = _rows(win, by, selected)
    if selected is None:
        total_seconds, total_leases = _gpu_seconds(win), len(win.leases)
    else:
        total_seconds, total_leases = _gpu_seconds(win, selected), len(selected)

    found: list[Finding] = []
    by_payer = _group(_payers(win))
    found += _slot_findings(snapshot, win, notes)
    found += _run_findings(snapshot, win)
    found += _envelope_findings(snapshot, win, by_payer)
    ledger_found, instants = _ledger_findings(snapshot, win, by_payer, since, hi_at, ledger_at_starts)
    found += ledger_found
    if namespace is not None:
        found = [f for f in found if _finding_namespace(f) == namespace]
    return AuditReport(
        at=at,
        since=since,
        until=until,
        by=by,
        rows=rows,
        total_gpu_seconds=total_seconds,
        total_leases=total_leases,
        findings=sort_findings(found),
        ledger_instants=instants,
        notes=notes,
    )


def _finding_namespace(finding: Finding) -> str | None:
    if finding.lease is not None:
        return finding.lease.partition("/")[0]
    return finding.namespace


# --- rows -------------------------------------------------------------------------------------------------


def _rows(win: _Window, by: tuple[str, ...], selected: list[int] | None) -> list[AuditRow]:
    """One row per key: entries are leases, or (lease, node) pairs when ``node`` is a dimension."""
    index = selected if selected is not None else range(len(win.leases))
    columns: list[list[str]] = []
    for dim in by:
        if dim == NODE:
            continue
        column = _dimension(dim, win)
        columns.append(column if selected is None else list(map(column.__getitem__, selected)))
    if NODE in by:
        lease_of, node_keys, weights = _node_entries(win, index)
        node_at = by.index(NODE)
        if selected is not None:  # back to window indices: lease_of holds window indices
            columns = [_dimension(dim, win) for dim in by if dim != NODE]
        columns = [list(map(col.__getitem__, lease_of)) for col in columns]
        columns.insert(node_at, node_keys)
        starts = list(map(win.starts.__getitem__, lease_of))
        ends = list(map(win.ends.__getitem__, lease_of))
        seconds = list(map(mul, weights, map(sub, ends, starts)))
    elif selected is not None:
        weights = list(map(win.gpus.__getitem__, index))
        starts = list(map(win.starts.__getitem__, index))
        ends = list(map(win.ends.__getitem__, index))
        seconds = list(map(win.gpu_seconds().__getitem__, index))
    else:
        weights, starts, ends, seconds = win.gpus, win.starts, win.ends, win.gpu_seconds()
    single = len(columns) == 1
    keys: list = columns[0] if single else list(zip(*columns, strict=True))
    groups = _group(keys)
    peaks = _peaks(keys, groups, starts, ends, weights)
    rows = []
    for key, idx in groups.items():
        total = sum(map(seconds.__getitem__, idx))
        rows.append(AuditRow(key=(key,) if single else key, gpu_seconds=total, leases=len(idx), peak_gpus=peaks[key]))
    rows.sort(key=lambda r: (-r.gpu_seconds, r.key))
    return rows


def _group(keys: Iterable) -> dict:
    """key -> the indices where it occurs, in order."""
    groups: defaultdict = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    return dict(groups)


def _dimension(dim: str, win: _Window) -> list[str]:
    """The key of every window lease in one dimension (not ``node``: see ``_node_entries``)."""
    if dim in (OWNER, FLAVOR):
        return win.column(dim)
    if dim == RUN:
        refs = list(zip(win.column("run_namespace"), win.column("run_name"), strict=True))
        names: dict[tuple[str, str], str] = {}
        for ref in set(refs):
            names[ref] = f"{ref[0]}/{ref[1]}"
        return list(map(names.__getitem__, refs))
    names = {}
    for key in set(_payers(win)):
        names[key] = NO_ENVELOPE if key is None else "/".join(key)
    return list(map(names.__getitem__, _payers(win)))


def split_slot(slot: str) -> tuple[str, int | None]:
    """``gpu-a-01#3`` -> (``gpu-a-01``, 3); a slot without a valid ``#ordinal`` -> (slot, None)."""
    node, sep, ordinal = slot.rpartition("#")
    if not sep or not ordinal.isdigit():
        return slot, None
    return node, int(ordinal)


def _nodes_of(slots: tuple[str, ...], node_of: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The slots of one lease, by node, in first-seen order. ``node_of`` caches each slot's node: slot lists
    share slots (a node's slots appear in its whole-node, half-node and multi-node lists)."""
    if node_of is None:
        node_of = {}
    out: dict[str, list[str]] = {}
    for slot in slots:
        node = node_of.get(slot)
        if node is None:
            node = node_of[slot] = split_slot(slot)[0]
        found = out.get(node)
        if found is None:
            out[node] = [slot]
        else:
            found.append(slot)
    return out


def _node_entries(win: _Window, index: Iterable[int]) -> tuple[list[int], list[str], list[int]]:
    """(lease index, node, slots on that node) for every node each lease holds slots on. Slot lists are
    parsed once per distinct list, not once per lease."""
    list_ids, _members = win.slot_lists()
    per_list: dict[int, list[tuple[str, int]]] = {}
    node_of: dict[str, str] = {}
    lease_of: list[int] = []
    nodes: list[str] = []
    weights: list[int] = []
    all_slots = win.slots
    for i in index:
        list_id = list_ids[i]
        parts = per_list.get(list_id)
        if parts is None:
            parts = per_list[list_id] = [(node, len(s)) for node, s in _nodes_of(all_slots[list_id], node_of).items()]
        for node, count_on_node in parts:
            lease_of.append(i)
            nodes.append(node)
            weights.append(count_on_node)
    return lease_of, nodes, weights


# --- findings about slots: DoubleBooked, UnknownNode -----------------------------------------------------------


def _slot_findings(snapshot: Snapshot, win: _Window, notes: list[str]) -> list[Finding]:
    """Work per distinct slot list (each list is hashed once per lease) and per node. A cheap exact test per
    node says whether any slot of it is held by two leases at once (``_node_may_double_book``); only the nodes
    where one is are swept for their episodes (``_double_booked``), so the findings are those of a search of
    every node."""
    out: list[Finding] = []
    if not win.leases:
        return out
    nodes = snapshot.nodes_by_name
    if not nodes:
        notes.append("the snapshot has no Nodes: slots were not checked against nodes (UnknownNode)")
    _list_ids, members = win.slot_lists()
    per_node: dict[str, list[tuple[int, list[str]]]] = {}  # node -> (slot list id, its slots on this node)
    node_of: dict[str, str] = {}
    valid: set[str] = set()
    for list_id in members:
        unknown: list[str] = []
        for node, node_slots in _nodes_of(win.slots[list_id], node_of).items():
            on_node = per_node.get(node)
            if on_node is None:
                per_node[node] = [(list_id, node_slots)]
            else:
                on_node.append((list_id, node_slots))
            if nodes:
                unknown.extend(_unknown_slots(node, node_slots, nodes, valid))
        if unknown:
            for i in members[list_id]:
                lease = win.leases[i]
                if lease.status.closed and lease.status.closure_reason in NODE_GONE_REASONS:
                    continue
                out.append(_unknown_node(lease, unknown))
    for entries in per_node.values():
        if _node_may_double_book(win, entries, members):
            out.extend(_double_booked(win, [(node_slots, members[i]) for i, node_slots in entries]))
    return out


def _node_may_double_book(win: _Window, entries: list[tuple[int, list[str]]], members: dict[int, list[int]]) -> bool:
    """Whether two leases hold one slot of this node at the same instant (exact, not a bound).

    Leases whose slots on the node are the same set double-book iff two of them overlap in time. When the node
    has several such sets that share slots, each lease's set is written as an integer with a 2-bit counter per
    slot of the node; adding the leases' integers at their starts and subtracting them at their ends (ends first
    at equal instants: intervals are half-open), a slot is held twice exactly when its counter reaches 2, which
    sets its high bit. A counter only overflows after it has reached 2, so the first double booking is always
    seen."""
    position: dict[str, int] = {}
    by_set: dict[int, list[int]] = {}  # encoded slot set -> leases
    for list_id, node_slots in entries:
        encoded = 0
        for slot in node_slots:
            encoded |= 1 << (2 * position.setdefault(slot, len(position)))
        idx = by_set.get(encoded)
        if idx is None:
            by_set[encoded] = list(members[list_id])
        else:
            idx.extend(members[list_id])
    sets = list(by_set)
    union = 0
    for encoded in sets:
        if union & encoded:
            break
        union |= encoded
    else:  # the sets are disjoint: only leases of one set can collide
        return any(_overlaps(win, idx) for idx in by_set.values())
    idx = [i for encoded in sets for i in by_set[encoded]]
    gains = [encoded for encoded in sets for _ in by_set[encoded]]
    times = list(map(win.ends.__getitem__, idx))
    times += map(win.starts.__getitem__, idx)
    deltas = list(map(neg, gains))
    deltas += gains
    order = sorted(range(len(times)), key=times.__getitem__)
    high = int("10" * len(position), 2)
    return any(map(high.__and__, accumulate(map(deltas.__getitem__, order))))


def _unknown_slots(node: str, slots: list[str], nodes: dict, valid: set[str] | None = None) -> list[str]:
    """What is wrong with these slots of one node ([] = nothing). ``valid`` collects slots already found
    valid, so that each slot is parsed once however many slot lists hold it."""
    known = nodes.get(node)
    if known is None:
        return [f"{node} (not in the snapshot)"]
    if valid is not None and valid.issuperset(slots):
        return []
    gpus = known.gpus
    bad = [s for s in slots if (ordinal := split_slot(s)[1]) is None or ordinal >= gpus]
    if valid is not None:
        valid.update(s for s in slots if s not in bad)
    if bad:
        return [f"{', '.join(bad)} (node {node} has {gpus} GPUs: slots #0-#{gpus - 1})"]
    return []


def _unknown_node(lease: GPULease, unknown: list[str]) -> Finding:
    return Finding(
        fk.UNKNOWN_NODE,
        lease.key,
        f"holds slots on {'; '.join(unknown)}: fix the slot names, or restore the node if it was removed "
        "while the lease was open",
        namespace=lease.metadata.namespace,
    )


def _overlaps(win: _Window, idx: list[int]) -> bool:
    """Whether any two of these leases overlap in time (clipped to the window).

    Two of them are held at once iff, for some k, the (k+2)-th start comes before the (k+1)-th end (half-open
    intervals: an end at the very instant of a start does not overlap it)."""
    if len(idx) < 2:
        return False
    starts = sorted(map(win.starts.__getitem__, idx))
    ends = sorted(map(win.ends.__getitem__, idx))
    return not all(map(le, islice(ends, len(ends) - 1), islice(starts, 1, None)))


def _double_booked(win: _Window, entries: list[tuple[list[str], list[int]]]) -> list[Finding]:
    """The double bookings on one node, one finding per conflict: slots whose holders overlap in time are
    grouped by *episode* — a maximal time interval during which two or more leases hold the slot — and the
    slots of the node with the same episode (same interval, same leases) make one finding, which counts the
    leases and names the first few. ``entries`` are (this node's slots of a slot list, the leases holding
    exactly that list).

    The node's leases are sorted by start once; each *atom* (the slots held by exactly the same slot lists)
    takes its leases from that order with C-level masks, and its episodes come from ``_episodes``: O(n log n)
    in the leases on the node, whatever the overlap (at most one pass per atom, and a node has no more atoms
    than GPUs)."""
    holders: dict[str, list[int]] = {}
    for n, (slots, _idx) in enumerate(entries):
        for slot in slots:
            found = holders.get(slot)
            if found is None:
                holders[slot] = [n]
            else:
                found.append(n)
    atoms: dict[tuple[int, ...], list[str]] = {}
    for slot, lists in holders.items():
        atoms.setdefault(tuple(lists), []).append(slot)
    starts, ends = win.starts, win.ends
    node_idx = [i for _slots, idx in entries for i in idx]
    entry_of = [n for n, (_slots, idx) in enumerate(entries) for _ in idx]
    node_begun = list(map(starts.__getitem__, node_idx))
    by_start = sorted(range(len(node_idx)), key=node_begun.__getitem__)
    order = list(map(node_idx.__getitem__, by_start))
    begun = list(map(node_begun.__getitem__, by_start))
    done = list(map(ends.__getitem__, order))
    entry_sorted = list(map(entry_of.__getitem__, by_start))
    episodes: dict[tuple[float, float, frozenset[int]], tuple[tuple[int, ...], list[str]]] = {}
    for lists, slots in atoms.items():
        if len(lists) == len(entries):  # every lease of the node holds these slots
            found_episodes = _episodes(order, begun, done)
        else:
            if len(lists) == 1 and len(entries[lists[0]][1]) < 2:
                continue
            mask = list(map(frozenset(lists).__contains__, entry_sorted))
            found_episodes = _episodes(list(compress(order, mask)), list(compress(begun, mask)),
                                       list(compress(done, mask)))
        for lo, hi, involved in found_episodes:
            key = (lo, hi, frozenset(involved))  # atoms with the same episode are one conflict
            found = episodes.get(key)
            if found is None:
                episodes[key] = (involved, list(slots))
            else:
                found[1].extend(slots)
    return [_double_booked_finding(win, lo, hi, involved, slots)
            for (lo, hi, _set), (involved, slots) in episodes.items()]


def _episodes(order: list[int], begun: list[float], done: list[float]) -> list[tuple[float, float, tuple[int, ...]]]:
    """The maximal intervals during which two or more of these leases (``order``, sorted by start, with their
    starts ``begun`` and ends ``done``) are held at once — half-open intervals — each with the leases held
    during it.

    When they are all held at one common instant (the last start comes before the first end: the usual pile-up,
    however many leases) the answer is one episode, from the second start to the second-latest end, involving
    all of them — found without a pass in Python. Otherwise the leases are swept once (``_episodes_swept``)."""
    if len(order) < 2:
        return []
    if begun[-1] < min(done):
        return [(begun[1], sorted(done)[-2], tuple(order))]
    return _episodes_swept(order, begun, done)


def _episodes_swept(order: list[int], begun: list[float], done: list[float]) -> list[tuple[float, float, tuple[int, ...]]]:
    """``_episodes`` for several episodes: one pass in order of start, keeping the lease that is held longest so
    far (the *holder*); a lease starting before the holder's end is held at once with it until the earlier
    end, and the leases of a stretch that touches the episode's end so far join it."""
    out: list[tuple[float, float, tuple[int, ...]]] = []
    reach = float("-inf")
    holder = -1
    lo = hi = 0.0
    involved: list[int] | None = None
    holder_in = False  # the holder is already among the involved leases
    for i, start, end in zip(order, begun, done, strict=True):
        if start < reach:
            until = end if end < reach else reach
            if involved is not None and start <= hi:
                if until > hi:
                    hi = until
                if not holder_in:
                    involved.append(holder)
                    holder_in = True
                involved.append(i)
            else:
                if involved is not None:
                    out.append((lo, hi, tuple(involved)))
                lo, hi, involved, holder_in = start, until, [holder, i], True
            if end > reach:
                reach, holder = end, i
        else:
            reach, holder, holder_in = end, i, False
    if involved is not None:
        out.append((lo, hi, tuple(involved)))
    return out


def _double_booked_finding(win: _Window, lo: float, hi: float, involved: tuple[int, ...], slots: list[str]) -> Finding:
    """One episode on one node's slots: named after the lease that made the slots double-booked (the second of
    the leases involved, by start then name), with the count of leases and the first few others named."""
    ordered = _first_by_start(win, involved, 4)
    lease = ordered[1]
    others = [ordered[0], *ordered[2:]]
    held = _slot_list(sorted(slots, key=split_slot))
    if len(involved) == 2:
        detail = (f"holds {held} also held by {others[0].key} from {_iso(lo)} to {_iso(hi)}: one slot is one GPU; "
                  "close the lease that is not running there")
    else:
        named = [x.key for x in others[:3]]
        more = len(involved) - 1 - len(named)
        names = f"{', '.join(named)} and {more} more" if more else f"{', '.join(named[:-1])} and {named[-1]}"
        detail = (f"holds {held} at once with {len(involved) - 1} other leases from {_iso(lo)} to {_iso(hi)} "
                  f"({names}): one slot is one GPU; close the leases that are not running there")
    return Finding(fk.DOUBLE_BOOKED, lease.key, detail, namespace=lease.metadata.namespace)


def _first_by_start(win: _Window, involved: tuple[int, ...], k: int) -> list[GPULease]:
    """The first ``k`` of these leases by (start, namespace/name): one C-level sort by start (the leases' own
    starts, not clipped to the window), then names compared only among the first ``k`` and those tied with
    them."""
    leases, begun = win.leases, win.column("start")
    by_start = sorted(involved, key=begun.__getitem__)
    cutoff = begun[by_start[min(k, len(by_start)) - 1]]
    candidates = list(takewhile(lambda i: begun[i] <= cutoff, by_start))
    candidates.sort(key=lambda i: (begun[i], leases[i].key))
    return [leases[i] for i in candidates[:k]]


def _slot_list(slots: list[str]) -> str:
    if len(slots) <= 3:
        return "slot " + ", ".join(slots) if len(slots) == 1 else "slots " + ", ".join(slots)
    return f"{len(slots)} slots ({slots[0]} … {slots[-1]})"


@lru_cache(maxsize=4096)
def _iso(epoch: float) -> str:
    """(Cached: the findings of one episode's atoms, and of neighbouring nodes, share their instants.)"""
    return rfc3339(datetime.fromtimestamp(epoch, UTC)) or ""


# --- findings about references: UnknownRun, UnknownEnvelope ---------------------------------------------------


_NAMESPACE = attrgetter("metadata.namespace")
_NAME = attrgetter("metadata.name")


def _run_findings(snapshot: Snapshot, win: _Window) -> list[Finding]:
    namespaces, names = win.column("run_namespace"), win.column("run_name")
    # Leases and runs come a namespace at a time (loaded snapshots are sorted; any order is correct, only slower):
    # each costs one set operation on its name, and no key tuple is made.
    wanted: dict[str, set[str]] = {}  # namespace -> names of runs the window's leases refer to
    for namespace, idx in groupby(range(len(names)), key=namespaces.__getitem__):
        found = wanted.get(namespace)
        if found is None:
            wanted[namespace] = set(map(names.__getitem__, idx))
        else:
            found.update(map(names.__getitem__, idx))
    for namespace, runs in groupby(snapshot.runs, key=_NAMESPACE):
        found = wanted.get(namespace)
        if found:
            found.difference_update(map(_NAME, runs))
    missing = {(namespace, name) for namespace, left in wanted.items() for name in left}
    if not missing:
        return []
    out = []
    missing_names = {name for _namespace, name in missing}
    for i in compress(count(), map(missing_names.__contains__, names)):
        ref = (namespaces[i], names[i])
        if ref not in missing:
            continue
        lease = win.leases[i]
        status = lease.status
        if status.closed and status.closure_reason in RUN_GONE_REASONS:
            continue
        still = "still holds" if not status.closed else "held"
        out.append(
            Finding(
                fk.UNKNOWN_RUN,
                lease.key,
                f"run {ref[0]}/{ref[1]} is not in the snapshot but the lease {still} {counted(len(lease.spec.slice.slots), 'GPU')}: "
                + ("close it (RunDeleted) or restore the run" if not status.closed else "check the runRef"),
                namespace=lease.metadata.namespace,
            )
        )
    return out


def _payers(win: _Window) -> list[EnvelopeKey | None]:
    """The (namespace, budget, envelope) each window lease is charged to; None = minted unfunded. A paidBy
    without a namespace names an envelope in the run's namespace."""
    found = win._columns.get("payer")
    if found is not None:
        return found
    paid_by = win.column("paid_by")
    first: dict = {}
    paid_by = list(map(first.setdefault, paid_by, paid_by))  # one PaidBy object per distinct value
    keys = {id(paid): None if paid is None else (paid.namespace, paid.budget, paid.envelope) for paid in first}
    out = list(map(keys.__getitem__, map(id, paid_by)))
    if any(key is not None and not key[0] for key in keys.values()):
        run_namespaces = win.column("run_namespace")
        for i, key in enumerate(out):
            if key is not None and not key[0]:
                out[i] = (run_namespaces[i], key[1], key[2])
    win._columns["payer"] = out
    return out


def _envelope_findings(snapshot: Snapshot, win: _Window, by_payer: dict[EnvelopeKey | None, list[int]]) -> list[Finding]:
    known = snapshot.envelopes_by_key
    out = []
    for key, idx in by_payer.items():
        if key is None or key in known:
            continue
        out.extend(unknown_envelope(win.leases[i], key, hint="; fix paidBy or create the envelope") for i in idx)
    return out


# --- findings of the ledger: ACLViolation, Overdraft, UnboundNamespace ---------------------------------------------


def _ledger_findings(
    snapshot: Snapshot,
    win: _Window,
    by_payer: dict[EnvelopeKey | None, list[int]],
    since: datetime,
    hi_at: datetime,
    at_starts: bool,
) -> tuple[list[Finding], int]:
    """Run the ledger (``accounting.ledger``) itself, at the end of the window and — when ``at_starts`` — at
    every instant inside the window where it could find a problem, on the leases open at that instant.

    Funding only changes when a lease starts or an envelope's window closes, and a lease takes its place in the
    funding order by its start, so a lease that is unfunded at some instant is already unfunded at its own
    start or at the close of its envelope's window. Those are the instants evaluated, but only for budgets
    where a cheap bound says a problem is possible: an envelope whose peak of charged GPUs exceeds its
    concurrency (or the lending cap, or an aggregate cap), a lease of an owner it does not lend to, or a lease
    open outside its window. Each lease keeps its earliest finding of each kind, said with its instant."""
    evaluations: list[tuple[datetime, list[int]]] = []
    if hi_at > since:
        end_open = [i for i, e in enumerate(win.ends) if e >= win.hi and win.leases[i].open_at(hi_at)]
        evaluations.append((hi_at, end_open))
    else:
        evaluations.append((hi_at, []))
    if at_starts and win.leases:
        evaluations.extend(_suspect_instants(snapshot, win, by_payer))
    best: dict[tuple[str, str | None, str], tuple[datetime, Finding]] = {}
    for instant, idx in evaluations:
        view = Snapshot(budgets=snapshot.budgets, leases=tuple(win.leases[i] for i in idx))
        for finding in ledger(view, instant).findings:
            if finding.kind == fk.UNKNOWN_ENVELOPE:
                continue  # reported for every window lease by _envelope_findings
            key = (finding.kind, finding.lease, finding.detail if finding.lease is None else "")
            if key not in best or instant < best[key][0]:
                best[key] = (instant, finding)
    out = []
    for instant, finding in best.values():
        if finding.lease is None:
            out.append(finding)
        else:
            out.append(
                Finding(
                    finding.kind,
                    finding.lease,
                    f"at {rfc3339(instant)}: {finding.detail}",
                    envelope=finding.envelope,
                    namespace=finding.lease.partition("/")[0],
                )
            )
    return out, len(evaluations)


def _suspect_instants(
    snapshot: Snapshot, win: _Window, by_payer: dict[EnvelopeKey | None, list[int]]
) -> list[tuple[datetime, list[int]]]:
    """(instant, leases open then) for every instant where the ledger might find a problem (see above)."""
    envelopes = snapshot.envelopes_by_key
    by_envelope: dict[EnvelopeKey, list[int]] = {
        key: idx for key, idx in by_payer.items() if key is not None and key in envelopes
    }
    if not by_envelope:
        return []
    starts, ends = win.starts, win.ends
    owners = win.column("owner")
    suspects: dict[tuple[str, str], set[float]] = {}  # budget -> instants to evaluate

    def suspect(key: EnvelopeKey, instants: Iterable[float]) -> None:
        suspects.setdefault((key[0], key[1]), set()).update(instants)

    env_peaks: dict[EnvelopeKey, int] = {}
    for key, idx in by_envelope.items():
        budget, envelope = envelopes[key]
        open_at, close_at = envelope.start.timestamp(), envelope.end.timestamp()
        # Outside the envelope's window: at the start of a lease that starts before it opens or after it closes,
        # or when the window closes on a lease still held.
        covers = open_at <= win.lo and close_at >= win.hi  # then every lease is inside the envelope's window
        if not covers and (min(map(starts.__getitem__, idx)) < open_at or max(map(ends.__getitem__, idx)) > close_at):
            suspect(key, (starts[i] for i in idx if starts[i] < open_at or starts[i] >= close_at))
            if win.lo < close_at < win.hi:
                suspect(key, (close_at,))
        # Borrowed: an owner it does not lend to (ACL) is suspect at the lease's start; a lending cap is checked
        # like the concurrency below.
        env_owner = budget.spec.owner
        lending = envelope.lending
        borrowed: list[int] = []
        lease_owners = set(map(owners.__getitem__, idx))
        outsiders = {o for o in lease_owners if relation(o, env_owner) == BORROWED}
        if outsiders:
            denied = {o for o in outsiders if not lends_to(envelope, o)}
            if denied:
                suspect(key, (starts[i] for i in idx if owners[i] in denied))
            borrowed = [i for i in idx if owners[i] in outsiders and owners[i] not in denied]
        env_peaks[key] = _bounded_peak(win, idx, envelope.concurrency)
        if env_peaks[key] > envelope.concurrency:
            suspect(key, _over(win, idx, envelope.concurrency))
        cap = None if lending is None else lending.max_concurrency
        if borrowed and cap is not None and _bounded_peak(win, borrowed, cap) > cap:
            suspect(key, _over(win, borrowed, cap))
    for budget in snapshot.budgets:
        ns, name = budget.metadata.namespace, budget.metadata.name
        for cap in budget.spec.aggregate_caps:
            members = [(ns, name, e) for e in cap.envelopes if (ns, name, e) in by_envelope]
            if sum(env_peaks[m] for m in members) <= cap.max_concurrency:
                continue
            idx = [i for m in members for i in by_envelope[m]]
            if _bounded_peak(win, idx, cap.max_concurrency) > cap.max_concurrency:
                suspect(members[0], _over(win, idx, cap.max_concurrency))
    out = []
    for (ns, name), instants in suspects.items():
        idx = [i for key, members in by_envelope.items() if key[0] == ns and key[1] == name for i in members]
        for instant in sorted(instants):
            if not win.lo <= instant < win.hi:
                continue
            open_then = [i for i in idx if starts[i] <= instant < ends[i]]
            out.append((datetime.fromtimestamp(instant, UTC), open_then))
    return out


def _bounded_peak(win: _Window, idx: list[int], limit: int) -> int:
    """The peak of GPUs held by these leases, or any number ≤ ``limit`` when it cannot exceed it (their sum)."""
    total = sum(map(win.gpus.__getitem__, idx))
    if total <= limit:
        return total
    return peak(
        list(map(win.starts.__getitem__, idx)), list(map(win.ends.__getitem__, idx)), list(map(win.gpus.__getitem__, idx))
    )


def _over(win: _Window, idx: list[int], limit: int) -> list[float]:
    """The start instants at which these leases hold more than ``limit`` GPUs."""
    starts, ends, gpus = win.starts, win.ends, win.gpus
    events = sorted([(ends[i], 0, -gpus[i]) for i in idx] + [(starts[i], 1, gpus[i]) for i in idx])
    held = 0
    out = []
    for instant, kind, delta in events:
        held += delta
        if kind and held > limit:
            out.append(instant)
    return out
