"""Which keys a change touches (``changed_keys``, from an informer's event) and the objects a batch's keys name
(``expand``: groups expanded from the snapshot of that moment). See reconciler/loop.py for the keys."""

from __future__ import annotations

from collections.abc import Iterable

from ..model import Snapshot
from .cache import Entry
from .status import BadObject, ObjKey, all_keys

FLAVOR, NAMESPACE, ALL = "Flavor", "Namespace", "All"
RUN_OTHERS = "RunOthers"  # (RUN_OTHERS, "ns/name", flavor): the flavor's runs, if this run holds leases
RUN_RESERVATIONS = "RunReservations"  # (RUN_RESERVATIONS, ns, name): the Reservations of that run
GROUP_KINDS = (FLAVOR, NAMESPACE, ALL, RUN_OTHERS, RUN_RESERVATIONS)
ALL_KEY: ObjKey = (ALL, "", "")


# --- which keys a change touches ---------------------------------------------------------------------------


def _same_spec(old: Entry | None, new: Entry | None) -> bool:
    if old is None or new is None or old.record is None or new.record is None:
        return False
    return old.record.spec == new.record.spec


def _flavors(entry: Entry | None) -> set[str]:
    record = entry.record if entry is not None else None
    if record is None:
        return set()
    kind = entry.kind
    if kind == "Budget":
        return {e.flavor for e in record.spec.envelopes}
    if kind == "Run":
        return {record.spec.resources.gpu_type}
    if kind == "Reservation":
        return {record.spec.scope.flavor}
    if kind == "GPULease":
        return {record.spec.flavor}
    if kind == "Node":
        return {record.flavor} if record.flavor else set()
    return set()


def changed_keys(kind: str, old: Entry | None, new: Entry | None) -> set[ObjKey]:
    """The keys to look at again after ``kind`` changed from ``old`` to ``new`` (None: absent)."""
    keys: set[ObjKey] = set()
    entries = [e for e in (old, new) if e is not None]
    for entry in entries:
        if entry.bad is not None and entry is new:
            keys.add((kind, entry.namespace, entry.name))  # its Event (and condition) only
    flavors = _flavors(old) | _flavors(new)
    if kind == "Budget":
        for entry in entries:
            keys.add(("Budget", entry.namespace, entry.name))
        if not _same_spec(old, new):
            keys |= {(NAMESPACE, "", e.namespace) for e in entries}
            keys |= {(FLAVOR, "", f) for f in flavors}
    elif kind == "Run":
        for entry in entries:
            keys.add(("Run", entry.namespace, entry.name))
        keys.add((RUN_RESERVATIONS, (new or old).namespace, (new or old).name))
        if not _own_echo(old, new):
            keys |= {(RUN_OTHERS, (new or old).key, f) for f in flavors}
    elif kind == "Reservation":
        for entry in entries:
            keys.add(("Reservation", entry.namespace, entry.name))
            if entry.record is not None:
                ref = entry.record.spec.run_ref
                keys.add(("Run", ref.namespace, ref.name))
    elif kind == "GPULease":
        for entry in entries:
            lease = entry.record
            if lease is None:
                continue
            payer = lease.payer
            if payer is not None:
                keys.add(("Budget", payer[0], payer[1]))
            keys.add(("Run", lease.spec.run_ref.namespace, lease.spec.run_ref.name))
        keys |= {(FLAVOR, "", f) for f in flavors}
    elif kind == "Node" and (old is None or new is None or old.record is None or old.record != new.record):
        # Node records carry no resourceVersion: equal records mean nothing the engine reads changed.
        keys |= {(FLAVOR, "", f) for f in flavors}
    return keys


def _own_echo(old: Entry | None, new: Entry | None) -> bool:
    """Only the status keys the core reconciler writes changed (our own write coming back, or a twin's)."""
    if not _same_spec(old, new):
        return False
    a, b = old.record, new.record
    return (a.status.eta == b.status.eta and a.status.preemptions == b.status.preemptions
            and a.finished == b.finished and a.metadata.deletion_timestamp == b.metadata.deletion_timestamp)


def expand(keys: Iterable[ObjKey], snapshot: Snapshot, bad: dict[ObjKey, BadObject]) -> tuple[set[ObjKey], bool]:
    """Object keys for a batch of keys (groups expanded from ``snapshot``); True when ``All`` was among them."""
    out: set[ObjKey] = set()
    everything = False
    for key in keys:
        kind, a, b = key
        if kind == ALL:
            everything = True
        elif kind == FLAVOR:
            out |= {("Run", r.metadata.namespace, r.metadata.name) for r in snapshot.runs
                    if r.spec.resources.gpu_type == b}
            out |= {("Reservation", r.metadata.namespace, r.metadata.name) for r in snapshot.reservations
                    if r.spec.scope.flavor == b}
        elif kind == NAMESPACE:
            out |= {("Run", r.metadata.namespace, r.metadata.name) for r in snapshot.runs if r.metadata.namespace == b}
            out |= {("Reservation", r.metadata.namespace, r.metadata.name) for r in snapshot.reservations
                    if r.metadata.namespace == b}
        elif kind == RUN_OTHERS:
            if snapshot.leases_by_run.get(a):
                out |= expand([(FLAVOR, "", b)], snapshot, bad)[0]
        elif kind == RUN_RESERVATIONS:
            out |= {("Reservation", r.metadata.namespace, r.metadata.name) for r in snapshot.reservations
                    if r.spec.run_ref.namespace == a and r.spec.run_ref.name == b}
        else:
            out.add(key)
    if everything:
        out = set(all_keys(snapshot)) | set(bad)
    return out, everything
