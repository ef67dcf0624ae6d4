"""Records as the reconciler's cache keeps them: the values many objects repeat, held once.

At 10,000 runs the cache holds 200,000 GPULeases, and a decoded lease repeats what its neighbours hold: the
namespace (three times: metadata, owner, runRef), the run's name (its 20 leases), the flavor, the payer's
Budget and envelope, the start (a run's leases are minted together), two empty dicts (labels, annotations).
msgspec makes a new object for each of them on every decode; ``Sharing.lease`` (and ``run``, ``node``,
``budget``, ``reservation``) swap each for the one equal object seen before — same value, same type, so
nothing that reads a record can tell — roughly halving a lease's memory.

Frozen records are changed in place (``msgspec.structs.force_setattr``) right after their decode, before
anything else sees them. What is shared:

- strings, by value (names, namespaces, flavors, owners);
- UTC datetimes, by value (an equal instant in another offset keeps its own object: it prints differently);
- small frozen structs compared by value (a lease's ``runRef`` and ``paidBy``, a Run's ``spec``, a Node's
  ``spec``), and a Node's labels and ``status`` by their items (in order);
- empty ``labels``/``annotations``: one empty dict (nothing mutates a record's dicts).

The pools never hold more than ``limit`` values each: past it they start over (what was shared stays
shared; only later objects stop sharing with earlier ones), so a fleet that churns through names for months
does not grow them without bound."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from msgspec.structs import force_setattr

from ..model import Budget, GPULease, Node, NodeStatus, Reservation, Run

LIMIT = 1 << 18  # values per pool (a 10,000-run fleet has ~30,000 distinct values in all)
_EMPTY: dict = {}


class Sharing:
    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._strings: dict[str, str] = {}
        self._times: dict[datetime, datetime] = {}
        self._values: dict[Any, Any] = {}

    # --- values -------------------------------------------------------------------------------------------

    def _pooled(self, pool: dict, key: Any, value: Any) -> Any:
        """The value ``pool`` holds under ``key``, else ``value`` (kept there; the pool starts over when full)."""
        found = pool.get(key)
        if found is None:
            if len(pool) >= self.limit:
                pool.clear()
            pool[key] = found = value
        return found

    def text(self, value: str) -> str:
        return self._pooled(self._strings, value, value)

    def time(self, value: datetime | None) -> datetime | None:
        if value is None or value.tzinfo is not UTC:
            return value
        return self._pooled(self._times, value, value)

    def value(self, value: Any, key: Any = None) -> Any:
        """``value`` or the one seen before under the same ``key`` (default: the value itself, hashable and
        compared by type and fields, as frozen msgspec structs are)."""
        return self._pooled(self._values, (type(value), value if key is None else key), value)

    def _meta(self, meta: Any) -> None:
        force_setattr(meta, "namespace", self.text(meta.namespace))
        force_setattr(meta, "creation_timestamp", self.time(meta.creation_timestamp))
        if not meta.labels:
            force_setattr(meta, "labels", _EMPTY)
        if not meta.annotations:
            force_setattr(meta, "annotations", _EMPTY)

    # --- records, by kind ---------------------------------------------------------------------------------

    def lease(self, lease: GPULease) -> GPULease:
        self._meta(lease.metadata)
        spec = lease.spec
        text = self.text
        force_setattr(spec, "owner", text(spec.owner))
        force_setattr(spec, "flavor", text(spec.flavor))
        force_setattr(spec, "start", self.time(spec.start))
        force_setattr(spec, "run_ref", self.value(spec.run_ref))
        if spec.paid_by is not None:
            force_setattr(spec, "paid_by", self.value(spec.paid_by))
        status = lease.status
        if status.ended is not None:
            force_setattr(status, "ended", self.time(status.ended))
        return lease

    def run(self, run: Run) -> Run:
        self._meta(run.metadata)
        force_setattr(run, "spec", self.value(run.spec))
        return run

    def budget(self, budget: Budget) -> Budget:
        self._meta(budget.metadata)
        return budget

    def reservation(self, reservation: Reservation) -> Reservation:
        self._meta(reservation.metadata)
        return reservation

    def node(self, node: Node) -> Node:
        meta = node.metadata
        force_setattr(meta, "creation_timestamp", self.time(meta.creation_timestamp))
        labels = meta.labels
        force_setattr(meta, "labels", self.value(labels, tuple(labels.items())) if labels else _EMPTY)
        force_setattr(node, "spec", self.value(node.spec))
        status = node.status  # its one field: allocatable (asserted below)
        force_setattr(node, "status", self.value(status, tuple(status.allocatable.items())))
        return node

    def record(self, kind: str, record: Any) -> Any:
        """``record`` (of ``kind``), its repeated values shared."""
        share = getattr(self, _BY_KIND.get(kind, ""), None)
        return record if share is None else share(record)


assert NodeStatus.__struct_fields__ == ("allocatable",), "Sharing.node keys a NodeStatus by its allocatable alone"
_BY_KIND = {"GPULease": "lease", "Run": "run", "Node": "node", "Budget": "budget", "Reservation": "reservation"}
