"""The slot findings of ``leases audit`` (API.md §5): ``DoubleBooked`` (one finding per node and episode: a
group of slots held by the same leases over the same stretch of time) and the slots that name no GPU
(``UnknownNode``, ``MalformedSlot``, ``SlotOutOfRange``: engine/slots.py), over the window of
engine/audit_window.py. The findings about runs, envelopes and the ledger are engine/audit_findings.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from itertools import accumulate, chain, compress, islice
from operator import le, lt, neg

from ..model import GPULease, Snapshot
from ..timeutil import rfc3339
from . import findings as fk
from .audit_window import Window, nodes_of
from .findings import Finding
from .slots import MALFORMED, slot_fault, split_slot
from .slots import slot_findings as lease_slot_findings

# Closed leases whose node is expected to be gone: not reported as UnknownNode.
NODE_GONE_REASONS = frozenset({"NodeFailure"})
NO_NODES_NOTE = "the snapshot has no Nodes: slots were not checked against nodes (UnknownNode, SlotOutOfRange)"


def slot_findings(snapshot: Snapshot, win: Window, notes: list[str], double_booked: bool = True) -> list[Finding]:
    """Work per distinct slot (each parsed once), per distinct slot list (each list is hashed once per lease) and
    per node. A cheap exact test per node says whether any slot of it is held by two leases at once
    (``_node_may_double_book``); only the nodes where one is are swept for their episodes (``_double_booked``),
    so the findings are those of a search of every node."""
    out: list[Finding] = []
    if not win.leases:
        return out
    nodes = snapshot.nodes_by_name
    if not nodes:
        notes.append(NO_NODES_NOTE)
    members = win.slot_members()
    lists = list(map(win.slots.__getitem__, members))  # the distinct slot lists, by their first holder
    node_of, bad = _slot_nodes(lists, nodes)
    get_node = node_of.__getitem__
    per_node: dict[str, list[tuple[int, Sequence[str]]]] = {}  # node -> (slot list id, its slots on this node)
    for list_id, held in zip(members, lists, strict=True):
        if len(held) == 1:
            node: str | None = get_node(held[0])
        else:
            if len(set(held)) != len(held):  # a slot named twice in one lease is held once by it
                held = tuple(dict.fromkeys(held))
            on = list(map(get_node, held))
            # The usual slot list is on one node: no per-slot work in Python.
            node = on[0] if on.count(on[0]) == len(on) else None
        if node is not None:
            on_node = per_node.get(node)
            if on_node is None:
                per_node[node] = [(list_id, held)]
            else:
                on_node.append((list_id, held))
        else:
            for node_name, node_slots in nodes_of(held, node_of).items():
                per_node.setdefault(node_name, []).append((list_id, node_slots))
        if bad and not bad.keys().isdisjoint(held):
            faults: dict[str, list[str]] = {}
            for slot in dict.fromkeys(held):
                kind = bad.get(slot)
                if kind is not None:
                    faults.setdefault(kind, []).append(slot)
            for i in members[list_id]:
                lease = win.leases[i]
                if lease.status.closed and lease.status.closure_reason in NODE_GONE_REASONS:
                    # The node failed (gone, or fewer GPUs since): only a malformed slot is a fault of the lease.
                    said = {MALFORMED: faults[MALFORMED]} if MALFORMED in faults else {}
                else:
                    said = faults
                if said:
                    out.extend(lease_slot_findings(lease, said, nodes))
    for entries in per_node.values() if double_booked else ():
        piled = _piled_up(win, entries, members)
        if piled is not None:
            out.extend(piled)
        elif _node_may_double_book(win, entries, members):
            out.extend(_double_booked(win, [(node_slots, members[i]) for i, node_slots in entries]))
    return out


def _slot_nodes(lists: list[tuple[str, ...]], nodes: dict) -> tuple[dict[str, str], dict[str, str]]:
    """Each distinct slot of these lists parsed once: its node, and the kind of the slots that name no GPU of a
    node in the snapshot (engine/slots.py; without nodes, only malformed slots are told)."""
    node_of: dict[str, str] = {}
    bad: dict[str, str] = {}
    for slot in set().union(*lists):
        node_of[slot] = split_slot(slot)[0]
        kind = slot_fault(slot, nodes)
        if kind is not None:
            bad[slot] = kind
    return node_of, bad


def _piled_up(win: Window, entries: list[tuple[int, Sequence[str]]], members: dict[int, list[int]]) -> list[Finding] | None:
    """The DoubleBooked findings of a node whose leases are all held at one common instant (the last start
    comes before the first end: the usual pile-up), or None when they are not.

    Then every group of slots held by exactly the same slot lists (an *atom*, as in ``_double_booked``) that
    two or more leases hold has exactly one episode — from the second start to the second-latest end of its
    leases, involving all of them — and atoms never share one (different slot lists, different leases). So
    each finding comes from its atom's leases by C-level sorts (the first few by start, the two latest ends),
    without a sweep."""
    starts, ends = win.starts, win.ends
    lists = [members[list_id] for list_id, _slots in entries]
    node_idx = list(chain.from_iterable(lists))
    if len(node_idx) < 2:
        return []
    if max(map(starts.__getitem__, node_idx)) >= min(map(ends.__getitem__, node_idx)):
        return None
    leases, begin = win.leases, win.column("begin")
    out = []
    for held_by, slots in _atoms(slots for _list_id, slots in entries).items():
        idx = lists[held_by[0]] if len(held_by) == 1 else list(chain.from_iterable(map(lists.__getitem__, held_by)))
        if len(idx) < 2:
            continue
        first = _first_by_start(win, idx, 4, begin)
        two = sorted(map(ends.__getitem__, idx))[-2:]
        out.append(_double_booked_said(starts[first[1]], two[0], len(idx), list(map(leases.__getitem__, first)), slots))
    return out


def _first_by_start(win: Window, idx: Sequence[int], k: int, begin: list[float] | None = None) -> list[int]:
    """The first ``k`` of these leases by (start, namespace/name): one C-level sort by start (the leases' own
    starts, not clipped to the window: ``begin``, the window's column), then names compared only among the first
    ``k`` and those tied with the ``k``-th."""
    if begin is None:
        begin = win.column("begin")
    by = sorted(idx, key=begin.__getitem__)
    if len(by) > k:
        cutoff = begin[by[k - 1]]
        end = k
        while end < len(by) and begin[by[end]] == cutoff:
            end += 1
        del by[end:]
    at = list(map(begin.__getitem__, by))
    if not all(map(lt, at, islice(at, 1, None))):  # equal starts: by name among them
        leases = win.leases
        by.sort(key=lambda i: (begin[i], leases[i].key))
    return by[:k]


def _node_may_double_book(win: Window, entries: list[tuple[int, Sequence[str]]], members: dict[int, list[int]]) -> bool:
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


def _overlaps(win: Window, idx: list[int]) -> bool:
    """Whether any two of these leases overlap in time (clipped to the window).

    Two of them are held at once iff, for some k, the (k+2)-th start comes before the (k+1)-th end (half-open
    intervals: an end at the very instant of a start does not overlap it)."""
    if len(idx) < 2:
        return False
    starts = sorted(map(win.starts.__getitem__, idx))
    ends = sorted(map(win.ends.__getitem__, idx))
    return not all(map(le, islice(ends, len(ends) - 1), islice(starts, 1, None)))


def _atoms(slot_lists: Iterable[Sequence[str]]) -> dict[tuple[int, ...], list[str]]:
    """The node's *atoms*: its slots grouped by exactly which of ``slot_lists`` (by position) hold them."""
    holders: dict[str, list[int]] = {}
    for n, slots in enumerate(slot_lists):
        for slot in slots:
            found = holders.get(slot)
            if found is None:
                holders[slot] = [n]
            else:
                found.append(n)
    atoms: dict[tuple[int, ...], list[str]] = {}
    for slot, lists in holders.items():
        atoms.setdefault(tuple(lists), []).append(slot)
    return atoms


def _double_booked(win: Window, entries: list[tuple[Sequence[str], list[int]]]) -> list[Finding]:
    """The double bookings on one node, one finding per conflict: slots whose holders overlap in time are
    grouped by *episode* — a maximal time interval during which two or more leases hold the slot — and the
    slots of the node with the same episode (same interval, same leases) make one finding, which counts the
    leases and names the first few. ``entries`` are (this node's slots of a slot list, the leases holding
    exactly that list).

    The node's leases are sorted by start once; each *atom* (the slots held by exactly the same slot lists)
    takes its leases from that order with C-level masks, and its episodes come from ``_episodes``: O(n log n)
    in the leases on the node, whatever the overlap (at most one pass per atom, and a node has no more atoms
    than GPUs)."""
    atoms = _atoms(slots for slots, _idx in entries)
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


def _double_booked_finding(win: Window, lo: float, hi: float, involved: tuple[int, ...], slots: list[str]) -> Finding:
    """One episode on one node's slots (see ``_double_booked_said``)."""
    leases = win.leases
    return _double_booked_said(lo, hi, len(involved), [leases[i] for i in _first_by_start(win, involved, 4)], slots)


def _double_booked_said(lo: float, hi: float, held: int, ordered: list[GPULease], slots: list[str]) -> Finding:
    return double_booked(lo, hi, held, [x.key for x in ordered], slots)


def double_booked(lo: float, hi: float, held: int, ordered: list[str], slots: list[str]) -> Finding:
    """One episode on one node's slots, from ``lo`` to ``hi`` (epoch seconds), held by ``held`` leases of which
    ``ordered`` are the first (up to 4) by start then name (``namespace/name``): named after the lease that made
    the slots double-booked (the second), with the count of leases and the first few others named."""
    lease = ordered[1]
    others = [ordered[0], *ordered[2:]]
    said = _slot_list(sorted(slots, key=split_slot) if len(slots) > 1 else slots)
    if held == 2:
        detail = (f"holds {said} also held by {others[0]} from {_iso(lo)} to {_iso(hi)}: one slot is one GPU; "
                  "close the lease that is not running there")
    else:
        named = others[:3]
        more = held - 1 - len(named)
        names = f"{', '.join(named)} and {more} more" if more else f"{', '.join(named[:-1])} and {named[-1]}"
        detail = (f"holds {said} at once with {held - 1} other leases from {_iso(lo)} to {_iso(hi)} "
                  f"({names}): one slot is one GPU; close the leases that are not running there")
    return Finding(fk.DOUBLE_BOOKED, lease, detail, namespace=lease.partition("/")[0])


def _slot_list(slots: list[str]) -> str:
    if len(slots) <= 3:
        return "slot " + ", ".join(slots) if len(slots) == 1 else "slots " + ", ".join(slots)
    return f"{len(slots)} slots ({slots[0]} … {slots[-1]})"


@lru_cache(maxsize=4096)
def _iso(epoch: float) -> str:
    """(Cached: the findings of one episode's atoms, and of neighbouring nodes, share their instants.)"""
    return rfc3339(datetime.fromtimestamp(epoch, UTC)) or ""
