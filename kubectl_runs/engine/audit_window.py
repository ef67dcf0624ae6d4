"""The audit's window: every lease that overlaps it, clipped, as flat columns (epoch seconds, GPUs, slot lists
read once), and the sweeps over them (GPU-seconds, peaks). Shared by the report (engine/audit.py) and its
findings (engine/audit_slots.py, engine/audit_findings.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate, compress, count, repeat
from operator import attrgetter, eq, mul, neg, sub

from ..model import GPULease, GPULeaseSpec, PaidBy
from .slots import split_slot  # (archive/ reads it from here)

# Above this many keys, peaks come from one sweep over every event instead of one sort per key.
_MANY_KEYS = 2000
# Up to this many distinct keys, group_indices makes one comparison pass per key.
_FEW_KEYS = 8


@dataclass
class Window:
    """The leases that overlap the window, as parallel lists (index i = one lease)."""

    lo: float  # epoch seconds
    hi: float
    leases: list[GPULease] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # clipped to the window
    ends: list[float] = field(default_factory=list)
    slots: list[tuple[str, ...]] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    _columns: dict[str, list] = field(default_factory=dict)

    @property
    def specs(self) -> list[GPULeaseSpec]:
        """Each window lease's spec (read when a column is first asked for: the report by owner never does)."""
        found = self._columns.get("spec")
        if found is None:
            found = self._columns["spec"] = list(map(_SPEC, self.leases))
        return found

    def column(self, name: str) -> list:
        """One field of every window lease (``owner``, ``flavor``, ``run_namespace``, ``run_name``, ``paid_by``;
        ``begin``: the lease's own start in epoch seconds, not clipped), extracted once."""
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = list(map(_GETTERS[name], self.specs))
        return found

    def gpu_micros(self) -> list[int]:
        """Slots × whole microseconds held inside the window, per lease (``held_micros``)."""
        found = self._columns.get("gpu_micros")
        if found is None:
            found = self._columns["gpu_micros"] = list(map(mul, self.gpus, held_micros(self.starts, self.ends)))
        return found

    def slot_members(self) -> dict[int, list[int]]:
        """The window leases of each distinct slot list, keyed by the first of them (its *id*), in order: slot
        lists are hashed once per lease, then handled once per distinct list."""
        found = self._columns.get("slot_members")
        if found is None:  # (clip fills it in its own loop; a window made otherwise groups its slots here)
            first: dict[tuple[str, ...], list[int]] = {}
            for i, held in enumerate(self.slots):
                first.setdefault(held, []).append(i)
            found = self._columns["slot_members"] = {idx[0]: idx for idx in first.values()}
        return found

    def slot_ids(self) -> list[int]:
        """Each window lease's slot-list id (``slot_members``)."""
        found = self._columns.get("slot_ids")
        if found is None:
            found = self._columns["slot_ids"] = [0] * len(self.slots)
            for list_id, idx in self.slot_members().items():
                for i in idx:
                    found[i] = list_id
        return found


_SPEC = attrgetter("spec")
_GETTERS = {
    "begin": lambda spec: spec.start.timestamp(),  # the lease's own start in epoch seconds (not clipped)
    "owner": attrgetter("owner"),
    "flavor": attrgetter("flavor"),
    "run_namespace": attrgetter("run_ref.namespace"),
    "run_name": attrgetter("run_ref.name"),
    "paid_by": attrgetter("paid_by"),
}


def clip(leases: Sequence[GPULease], lo_at: datetime, hi_at: datetime) -> Window:
    """Every lease whose ``[start, ended or hi)`` overlaps ``[lo, hi)``, with its interval clipped to it.

    Histories are mostly leases that closed long before the window: a cheap test on each lease's status comes
    first, and the same loop reads every field the report needs from the leases kept while each is at hand (one
    pass over each record is what costs: reading the same records column by column is about twice as slow).
    The same loop groups the leases by slot list (``Window.slot_members``), makes equal owners, payers and run
    references one object each and keys each lease's payer (``audit_findings.payers``), while each lease's fields are in the cache: the later passes that hash or
    compare them then find each value already hashed, and equal values identical."""
    lo, hi = lo_at.timestamp(), hi_at.timestamp()
    win = Window(lo=lo, hi=hi)
    kept, ends, slots = win.leases, win.ends, win.slots
    owners: list[str] = []
    paid_by: list[PaidBy | None] = []
    run_namespaces: list[str] = []
    run_names: list[str] = []
    begins: list[float] = []
    by_list: dict[tuple[str, ...], list[int]] = {}  # slot list -> the window leases that hold it
    one: dict = {}  # one object per distinct owner, payer, run namespace and run name
    same = one.setdefault
    last_owner = last_namespace = last_name = ""
    last_paid: PaidBy | None = None
    payers: list[tuple[str, str, str] | None] = []  # (namespace, budget, envelope) charged; None = unfunded
    payer = payer_paid = None
    payer_namespace = ""
    n = 0
    for lease in leases:
        status = lease.status
        if status.closed:
            # Closed after the window opened (a closed lease without an end never held anything).
            ended = status.ended
            if ended is None or ended <= lo_at:
                continue
            spec = lease.spec
            start = spec.start
            if start >= hi_at or ended <= start:
                continue  # starts after the window, or never held anything
            end = ended.timestamp()
            if end > hi:
                end = hi
        else:
            spec = lease.spec
            start = spec.start
            if start >= hi_at:
                continue
            end = hi
        begin = start.timestamp()
        begins.append(begin)
        kept.append(lease)
        ends.append(end)
        held = spec.slice.slots
        slots.append(held)
        holding = by_list.get(held)
        if holding is None:
            by_list[held] = [n]
        else:
            holding.append(n)
        n += 1
        # Consecutive leases are mostly of one run (a List is sorted by name: a run's groups are in a row), so each
        # value is first compared with the last one's, which hashes nothing.
        owner = spec.owner
        if owner != last_owner:
            last_owner = same(owner, owner)
        owners.append(last_owner)
        paid = spec.paid_by
        if paid != last_paid:
            last_paid = same(paid, paid)
        paid_by.append(last_paid)
        ref = spec.run_ref
        namespace, name = ref.namespace, ref.name
        if namespace != last_namespace:
            last_namespace = same(namespace, namespace)
        run_namespaces.append(last_namespace)
        if name != last_name:
            last_name = same(name, name)
        run_names.append(last_name)
        if last_paid is not payer_paid or last_namespace is not payer_namespace:  # (interned: by identity)
            payer_paid, payer_namespace = last_paid, last_namespace
            if last_paid is None:
                payer = None
            else:  # a paidBy without a namespace names an envelope in the run's namespace
                key = (last_paid.namespace or last_namespace, last_paid.budget, last_paid.envelope)
                payer = same(key, key)
        payers.append(payer)
    win.gpus = list(map(len, slots))
    # Starts clipped to the window: the leases' own starts when none began before it (one list for both).
    win.starts = begins if not begins or min(begins) >= lo else [b if b > lo else lo for b in begins]
    win._columns.update(owner=owners, paid_by=paid_by, payer=payers, run_namespace=run_namespaces, run_name=run_names,
                        begin=begins, slot_members={idx[0]: idx for idx in by_list.values()})
    return win


def held_micros(starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """Whole microseconds from each start to its end, exactly. Instants are whole microseconds (datetime's
    resolution) and their epoch seconds as floats lie within a quarter of a microsecond of them (half a
    microsecond of float spacing near 2^31 s, until 2106), so the rounded difference is the exact one: GPU-time is
    summed as integers, the same in any order and on any Python (3.12's ``sum`` of floats is compensated, 3.11's
    is not), and the same as the archive's SQL sums of epoch microseconds (archive/breakdown.py)."""
    return list(map(round, map(mul, map(sub, ends, starts), repeat(1e6))))


def seconds_of(micros: int) -> float:
    """GPU-seconds reported from exact GPU-microseconds: one correctly rounded division (int / int)."""
    return micros / 1_000_000


def gpu_seconds(win: Window, idx: Sequence[int] | None = None) -> float:
    """Σ slots × seconds held inside the window, over ``idx`` (default: every window lease), summed exactly."""
    micros = win.gpu_micros()
    if idx is None:
        return seconds_of(sum(micros))
    return seconds_of(sum(map(micros.__getitem__, idx)))


# --- peaks ------------------------------------------------------------------------------------------------


def peak(starts: Sequence[float], ends: Sequence[float], gpus: Sequence[int]) -> int:
    """Most GPUs held at one instant by intervals ``[start, end)`` holding ``gpus`` each.

    Ends are put before starts and the sort is stable, so an interval that ends exactly when another starts
    does not count with it (the intervals are half-open)."""
    if not starts:
        return 0
    if len(starts) == 1:
        return gpus[0]
    if max(starts) < min(ends):  # all held at one common instant (the last start is before the first end)
        return sum(gpus)
    times = list(ends)
    times += starts
    deltas = list(map(neg, gpus))
    deltas += gpus
    order = sorted(range(len(times)), key=times.__getitem__)
    return max(accumulate(map(deltas.__getitem__, order)))


def key_peaks(keys: list, groups: dict, win_starts: list[float], win_ends: list[float], weights: list[int]) -> dict:
    """Peak GPUs per key; ``groups`` maps each key to the entry indices of ``keys``/``weights``, whose
    intervals are ``win_starts``/``win_ends`` (entries, not leases: with ``--by node`` a lease on two nodes is
    two entries)."""
    if len(groups) == 1 and len(next(iter(groups.values()))) == len(keys):  # one key: every entry
        return {next(iter(groups)): peak(win_starts, win_ends, weights)}
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


def group_indices(keys: Iterable) -> dict:
    """key -> the indices where it occurs, in order; the keys in the order they first occur.

    A window usually has few distinct keys per dimension (owners, envelopes, flavors): each key's indices then
    come from one C-level comparison pass over the keys instead of a Python step per entry."""
    keys = keys if isinstance(keys, list) else list(keys)
    if keys and keys[0] == keys[-1] and keys.count(keys[0]) == len(keys):
        # One key (one owner, one payer): a C-level count, which compares identical values by identity (clip makes
        # equal values one object), instead of hashing every key.
        return {keys[0]: list(range(len(keys)))}
    distinct = dict.fromkeys(keys)
    if len(distinct) == 1:
        return {next(iter(distinct)): list(range(len(keys)))}
    if len(distinct) <= _FEW_KEYS:
        return {key: list(compress(count(), map(eq, keys, repeat(key)))) for key in distinct}
    groups: defaultdict = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    return dict(groups)


def nodes_of(slots: tuple[str, ...], node_of: dict[str, str] | None = None) -> dict[str, list[str]]:
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


def node_entries(win: Window, index: Iterable[int]) -> tuple[list[int], list[str], list[int]]:
    """(lease index, node, slots on that node) for every node each lease holds slots on. Slot lists are
    parsed once per distinct list, not once per lease."""
    list_ids = win.slot_ids()
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
            parts = per_list[list_id] = [(node, len(s)) for node, s in nodes_of(all_slots[list_id], node_of).items()]
        for node, count_on_node in parts:
            lease_of.append(i)
            nodes.append(node)
            weights.append(count_on_node)
    return lease_of, nodes, weights


# --- findings about slots: DoubleBooked, UnknownNode -----------------------------------------------------------

