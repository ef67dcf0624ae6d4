"""The one state of a ledger pass: the snapshot it started from, the instant, the options, the writes so far and
the view they make (``Objects``), the Evaluation every plan of that view shares, and what the activations of
this instant decided (their victims, the Run being served). Every stage is a function of it.

The pass is incremental: the writes it emits update one Evaluation in place (``Evaluation.advance``: the ledger
funded again where a lease opened or closed, the touched Runs' leases and charges, the moved nodes' free GPUs)
and the indexes minting reads (the slots held, the lease names taken), instead of computing them again from
every object after each write. ``PassState(..., incremental=False)`` keeps the way it was done before — a new
Evaluation for every view — for tests/unit/test_ledger_incremental.py to hold the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ...engine.evaluation import Evaluation
from ...engine.packing import Capacity
from ...engine.plan import open_ledger
from ...model import GPULease, Node, Reservation, Snapshot
from ..actions import AnyWrite, PatchStatus
from .free_slots import FreeSlots
from .options import LedgerOptions
from .writes import Objects


@dataclass
class PassState:
    origin: Snapshot
    at: datetime
    options: LedgerOptions
    writes: list[AnyWrite] = field(default_factory=list)
    incremental: bool = True
    start: Evaluation | None = None  # an Evaluation of ``origin`` at ``at`` made already (memory.PassMemory)

    def __post_init__(self) -> None:
        self.objects = Objects(self.origin)
        if self.start is not None and (self.start.snapshot is not self.origin or self.start.at != self.at
                                       or self.start._keeper is None or not self.incremental):
            raise ValueError("a pass starts only from a kept Evaluation of its own snapshot and instant")
        self._ev: Evaluation | None = self.start
        self._changes: dict[str, list[tuple]] = {}  # kind -> (before, after) not yet in the Evaluation
        self._busy: dict[str, dict[str, int]] | None = None  # node -> slot -> leases not closed at the instant
        self._names: dict[str, set[str]] | None = None  # namespace -> names of its GPULeases
        self._ordinals: dict[str, tuple[int, ...]] = {}  # node -> its ordinals free of _busy (free_ordinals)
        self._free_slots: dict[tuple[str, str | None], FreeSlots] = {}  # (flavor, domain scope) -> free_slots
        self._candidates: dict[tuple[str, str | None], dict[str, Node]] = {}  # (flavor, scope) -> candidates
        self.waiting: tuple | None = None  # (view, keys of runs with a Pending Reservation)
        self.victims: dict[str, set[str]] = {}  # run -> slots it lost to an activation at this instant
        self.serving: str | None = None  # the run an activation is admitting right now

    @property
    def snap(self) -> Snapshot:
        """The view: the snapshot with every write of the pass so far applied."""
        return self.objects.snapshot

    def evaluation(self) -> Evaluation:
        """What every plan of the current view shares (engine/evaluation.py: the open leases, their ledger, free
        capacity, funding inputs, remedy candidates): one Evaluation for the pass, advanced by the writes."""
        snap = self.snap
        if not self.incremental:
            if self._ev is None or self._ev.snapshot is not snap:
                leases, book = open_ledger(snap, self.at)
                self._ev = Evaluation(snap, self.at, leases=leases, book=book)
            self._changes = {}
            return self._ev
        if self._ev is None:
            self._ev = Evaluation.kept(snap, self.at)
        elif self._ev.snapshot is not snap:
            changes = self._changes
            self._ev.advance(snap, leases=changes.get("GPULease", ()), reservations=changes.get("Reservation", ()),
                             runs=changes.get("Run", ()))
        self._changes = {}
        return self._ev

    @property
    def shared(self) -> Evaluation | None:
        """The Evaluation the pass's plans shared (made, or given as ``start``); None when none was needed."""
        return self._ev

    def emit(self, write: AnyWrite) -> None:
        self.writes.append(write)
        change = self.objects.apply(write)
        if change is None:
            return
        if self._ev is not None:
            self._changes.setdefault(write.kind, []).append(change)
        if write.kind == "GPULease":
            self._lease_changed(*change)

    def settle(self, reservation: Reservation, state: str, reason: str, message: str) -> None:
        """Write ``state`` and ``reason`` into the Reservation's status."""
        self.emit(PatchStatus(
            kind="Reservation", namespace=reservation.namespace, name=reservation.name,
            status={"state": state, "reason": reason},
            cause=f"{state.lower()} {reservation.key}: {message}",
        ))

    # --- what minting reads -------------------------------------------------------------------------------------

    def busy(self) -> dict[str, dict[str, int]]:
        """Per node, the slots of every lease not closed at the instant (open, or starting later), each with the
        number of such leases that hold it: what minting never places on."""
        if self._busy is None:
            self._busy = {}
            for lease in self.snap.leases:
                if self._holds(lease):
                    self._count(lease, 1)
        return self._busy

    def free_ordinals(self, node: Node) -> tuple[int, ...]:
        """The ordinals of ``node`` that no lease not closed at the instant holds (``busy``), ascending."""
        found = self._ordinals.get(node.name)
        if found is None:
            held = self.busy().get(node.name) or {}
            name = node.name
            found = self._ordinals[name] = tuple(i for i in range(node.gpus) if f"{name}#{i}" not in held)
        return found

    def free_slots(self, flavor: str, scope: str | None) -> FreeSlots:
        """The candidate nodes of ``flavor`` in ``scope`` with a free ordinal (``free_slots.FreeSlots``), as the
        current view has them."""
        key = (flavor, scope)
        found = self._free_slots.get(key)
        if found is None or not found.catch_up(self):
            self.busy()  # from now on, the leases the pass writes mark the nodes they move
            found = self._free_slots[key] = FreeSlots.of(self, flavor, scope)
        return found

    def candidates(self, capacity: Capacity) -> dict[str, Node]:
        """``capacity``'s candidate nodes by name: the schedulable nodes of its flavor in its domain scope, which
        the pass does not change (made once per flavor and scope, not per Run minted)."""
        key = (capacity.flavor, capacity.domain_scope)
        found = self._candidates.get(key)
        if found is None:
            found = self._candidates[key] = {node.name: node for node in capacity.nodes}
        return found

    def lease_names(self, namespace: str) -> set[str]:
        """The names of the GPULeases of ``namespace`` (any state)."""
        if self._names is None:
            self._names = {}
            for lease in self.snap.leases:
                self._names.setdefault(lease.namespace, set()).add(lease.name)
        return self._names.setdefault(namespace, set())

    def _holds(self, lease: GPULease) -> bool:
        status = lease.status
        return not status.closed or (status.ended is not None and status.ended > self.at)

    def _count(self, lease: GPULease, sign: int) -> None:
        for slot in lease.spec.slice.slots:
            node = slot.rpartition("#")[0]
            self._ordinals.pop(node, None)
            for free in self._free_slots.values():
                free.moved.add(node)
            held = self._busy.setdefault(node, {})
            held[slot] = held.get(slot, 0) + sign
            if not held[slot]:
                del held[slot]

    def _lease_changed(self, before: GPULease | None, after: GPULease) -> None:
        if self._names is not None and before is None:
            self._names.setdefault(after.namespace, set()).add(after.name)
        if self._busy is not None:
            if before is not None and self._holds(before):
                self._count(before, -1)
            if self._holds(after):
                self._count(after, 1)
