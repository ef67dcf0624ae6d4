"""Histories of closed and open leases for the archive tests: seeded, spread over months, some leases sharing
slots (DoubleBooked), some unfunded, preempted, spare, without an end; every lease with a uid."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from builders import T0, budget, envelope, lease, node, preempted, run

from kubectl_runs.archive import reader

NODES = tuple(node(f"n{i}") for i in range(6))


def history(seed: int, count: int, *, days: int = 120, open_share: float = 0.1, prefix: str = "l") -> list:
    """``count`` leases starting over ``days`` days before T0 + 30 days; each lease named ``{prefix}{i}``."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        start = T0 - timedelta(days=days) + timedelta(minutes=rng.randrange(0, (days + 30) * 24 * 60))
        node_name = f"n{rng.randrange(6)}"
        gpus = rng.choice((1, 2, 4, 8))
        first = rng.randrange(0, 9 - gpus)
        slot_list = [f"{node_name}#{k}" for k in range(first, first + gpus)]
        owner = rng.choice(("org:team", "org:team:sub", "org:other", "ext:partner"))
        namespace = {"org:team": "team", "org:team:sub": "sub", "org:other": "other", "ext:partner": "ext"}[owner]
        paid = rng.choice((("team", "b", "west"), ("team", "b", "west"), None, ("team", "b", "gone")))
        duration = timedelta(minutes=rng.randrange(10, 3 * 24 * 60))
        kind = rng.random()
        name = f"{prefix}{i}"
        if kind < open_share:
            item = lease(name, namespace, owner=owner, slot_list=slot_list, run_name=f"r{i % 7}", paid_by=paid,
                         start=start, role=rng.choice(("Active", "Active", "Spare")))
        elif kind < open_share + 0.03:
            item = lease(name, namespace, owner=owner, slot_list=slot_list, run_name=f"r{i % 7}", paid_by=paid,
                         start=start, closed=True)
        elif kind < open_share + 0.08:
            item = preempted(lease(name, namespace, owner=owner, slot_list=slot_list, run_name=f"r{i % 7}",
                                   paid_by=paid, start=start), ended=start + duration,
                             reservation="team/res", seed=f"0x{rng.getrandbits(64):016x}")
        else:
            item = lease(name, namespace, owner=owner, slot_list=slot_list, run_name=f"r{i % 7}", paid_by=paid,
                         start=start, ended=start + duration,
                         closure_reason=rng.choice(("Completed", "Shrink", "NodeFailure", "RunDeleted")))
        out.append(with_uid(item, f"uid-{prefix}{i}"))
    return out


def with_uid(item, uid: str):
    import msgspec

    return msgspec.structs.replace(item, metadata=msgspec.structs.replace(item.metadata, uid=uid))


def fleet_objects() -> list:
    """Nodes, a Budget and some runs for the leases of ``history`` (others are unknown on purpose)."""
    return [*NODES, budget("b", "team", owner="org:team",
                           envelopes=[envelope("west", concurrency=24, start=T0 - timedelta(days=200),
                                               end=T0 + timedelta(days=200))]),
            run("r0", "team"), run("r1", "team"), run("r2", "sub")]


def on_edges(leases: list, seed: int) -> list:
    """``leases`` with some instants moved onto the edges of periods (midnight, Monday, the 1st of the month, UTC)
    and others given microseconds, keeping each lease's order of start and end: the cases where clipping to a
    window or a period, half-open intervals and exact sums can go wrong."""
    import msgspec

    rng = random.Random(seed)
    out = []
    for item in leases:
        spec, status = item.spec, item.status
        start, ended = spec.start, status.ended
        pick = rng.random()
        if pick < 0.15:
            start = start.replace(hour=0, minute=0, second=0, microsecond=0)
        elif pick < 0.25:
            start = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        elif pick < 0.45:
            start = start.replace(microsecond=rng.randrange(1, 1_000_000))
        if ended is not None:
            pick = rng.random()
            if pick < 0.2:
                ended = (ended + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
            elif pick < 0.3:
                ended = ended - timedelta(days=ended.weekday()) + timedelta(days=7)
                ended = ended.replace(hour=0, minute=0, second=0, microsecond=0)
            elif pick < 0.5:
                ended = ended.replace(microsecond=rng.randrange(0, 1_000_000))
            if ended < start:
                ended = start
        out.append(msgspec.structs.replace(item, spec=msgspec.structs.replace(spec, start=start),
                                           status=msgspec.structs.replace(status, ended=ended)))
    return out


def with_archived(snapshot, archives, lo, hi):
    """The reference the archive path is compared with: ``snapshot`` with the archived leases that held GPUs
    during ``[lo, hi)`` added, each lease once (a lease read live wins over its archived copy), in the order a
    loaded snapshot keeps (namespace, name) — one snapshot holding every lease, for the JSON path's engine."""
    if not archives or lo >= hi:
        return snapshot
    live = {(x.metadata.namespace, x.metadata.name, x.metadata.uid) for x in snapshot.leases}
    archived = reader.leases_between(archives, lo, hi, skip=live)
    archived += _unsound(archives, lo, hi, live)  # in no window, but the audit of [lo, hi) reports them (#28)
    if not archived:
        return snapshot
    merged = sorted([*snapshot.leases, *archived], key=lambda x: (x.metadata.namespace, x.metadata.name))
    return replace(snapshot, leases=tuple(merged))


def _unsound(archives, lo, hi, skip):
    """The archived closed leases starting in ``[lo, hi)`` with no sound interval (no end, or an end before the
    start: engine/lease_faults.py), each once, leaving out the keys in ``skip``."""
    from kubectl_runs.archive import db
    from kubectl_runs.archive.schema import LEASE_SELECT, lease_of, micros

    seen, out = set(skip), []
    con = db.connect()
    try:
        for arch in archives:
            files = [p for p in arch.manifest.partitions if p.first_start < hi and p.last_start >= lo]
            if not files:
                continue
            paths = "[" + ", ".join(db.quote(arch.directory / p.file) for p in files) + "]"
            rows = con.execute(f"SELECT {LEASE_SELECT} FROM read_parquet({paths}) WHERE "
                               f"start >= make_timestamp({micros(lo)})::TIMESTAMPTZ AND "
                               f"start < make_timestamp({micros(hi)})::TIMESTAMPTZ AND (ended IS NULL OR ended < start)"
                               ).fetchall()
            for values in rows:
                if (values[0], values[1], values[2]) not in seen:
                    seen.add((values[0], values[1], values[2]))
                    out.append(lease_of(values))
    finally:
        con.close()
    return out
