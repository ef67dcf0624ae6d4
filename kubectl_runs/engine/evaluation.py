"""What every plan of one snapshot at one instant shares, computed once (engine/plan.py's stages).

A plan reads the leases open at its instant and their ledger, the free slots of its flavor's nodes, the lease
groups, nodes and reported completions of its scope, and the funding inputs of its flavor. None of these
depends on the run being planned, yet computed per plan they cost (runs × leases) for a batch: the reconciler
plans every Run of a flavor when one lease of it changes. An ``Evaluation`` holds them, each computed on first
use and kept for the next plan of the same snapshot and instant:

- the open leases and their ledger (``book``), the open leases and the charges of each run;
- the Reservations of each run;
- free GPUs per schedulable node of a flavor, and each ``Capacity`` by (flavor, domain, unit, spread);
- the funding inputs by (flavor, domain): the flavor's envelopes, every envelope's room, the selector matcher;
- per scope: its nodes, every run's lease groups, the Active GPUs each run holds, and the reported releases.

Every value is the one the stage functions compute from the snapshot for a single plan (packing.capacity,
funding.funding, remedies.remedy_candidates, releases.releases): only the repetition goes
(tests/unit/test_evaluation.py holds them equal on generated fleets). Pure: the snapshot is never changed, ``at``
is an argument; an Evaluation is used by one thread at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from ..model import GPULease, ProtectedEntry, Reservation, Run, Scope, Snapshot
from .accounting import LeaseCharge, Ledger, ledger
from .funding import Funding, FundingInputs, FundingState, funding, funding_inputs, state_now
from .packing import Capacity, capacity, free_by_node, open_leases
from .protection import Windows, protections
from .releases import Release, releases
from .remedies import (
    GroupKey,
    LeaseGroup,
    RemedyCandidates,
    ScopeNodes,
    active_held,
    remedy_candidates,
    scope_groups,
    scope_nodes,
)


def open_book(snapshot: Snapshot, leases: Sequence[GPULease], at: datetime) -> Ledger:
    """The ledger of just the open ``leases``: the same headroom, classes and findings as ``ledger(snapshot,
    at)`` (closed leases only add GPU-hours, which a plan does not read), at a fraction of the cost on a fleet
    with a long history."""
    return ledger(dataclasses.replace(snapshot, leases=tuple(leases), notes=()), at)


class Evaluation:
    """The shared values of every plan of ``snapshot`` at ``at`` (see the module's docstring). ``leases`` (the
    leases open at ``at``) and ``book`` (a ledger at ``at``, of the open leases or of all) may be passed when
    already computed."""

    def __init__(
        self,
        snapshot: Snapshot,
        at: datetime,
        *,
        leases: Sequence[GPULease] | None = None,
        book: Ledger | None = None,
    ):
        self.snapshot = snapshot
        self.at = at
        self._open = leases
        self._book = book
        self._leases_by_run: dict[str, list[GPULease]] | None = None
        self._charges_by_run: dict[str, list[LeaseCharge]] | None = None
        self._reservations_by_run: dict[str, list[Reservation]] | None = None
        self._free: dict[str, dict[str, int]] = {}
        self._capacity: dict[tuple, Capacity] = {}
        self._state: FundingState | None = None
        self._funding_inputs: dict[tuple[str, str | None], FundingInputs] = {}
        self._scope_nodes: dict[Scope, ScopeNodes] = {}
        self._groups: dict[Scope, dict[GroupKey, LeaseGroup]] = {}
        self._held: dict[str, int] | None = None
        self._releases: dict[Scope, list[Release]] = {}
        self._protections: dict[str, ProtectedEntry] | None = None

    # --- the leases and the ledger ------------------------------------------------------------------------------

    @property
    def open(self) -> Sequence[GPULease]:
        """The leases open at ``at``, in snapshot order."""
        if self._open is None:
            self._open = open_leases(self.snapshot, self.at)
        return self._open

    @property
    def book(self) -> Ledger:
        if self._book is None:
            self._book = self.make_book()
        return self._book

    def make_book(self) -> Ledger:
        """The ledger plans read: of the open leases only (``open_book``)."""
        return open_book(self.snapshot, self.open, self.at)

    def leases_of(self, run_key: str) -> list[GPULease]:
        """The run's open leases, in snapshot order."""
        if self._leases_by_run is None:
            by_run: dict[str, list[GPULease]] = {}
            for lease in self.open:
                by_run.setdefault(lease.run_key, []).append(lease)
            self._leases_by_run = by_run
        return self._leases_by_run.get(run_key, [])

    def charges_of(self, run_key: str) -> list[LeaseCharge]:
        """The ledger's charges of the run's open leases, in the ledger's order."""
        if self._charges_by_run is None:
            by_run: dict[str, list[LeaseCharge]] = {}
            for charge in self.book.charges.values():
                by_run.setdefault(charge.lease.run_key, []).append(charge)
            self._charges_by_run = by_run
        return self._charges_by_run.get(run_key, [])

    def reservations_of(self, run_key: str) -> list[Reservation]:
        """The Reservations for the run, in snapshot order."""
        if self._reservations_by_run is None:
            by_run: dict[str, list[Reservation]] = {}
            for reservation in self.snapshot.reservations:
                by_run.setdefault(reservation.spec.run_ref.key, []).append(reservation)
            self._reservations_by_run = by_run
        return self._reservations_by_run.get(run_key, [])

    # --- capacity ------------------------------------------------------------------------------------------------

    def free(self, flavor: str) -> dict[str, int]:
        """Free GPUs of every schedulable node of ``flavor`` (``packing.free_by_node``)."""
        found = self._free.get(flavor)
        if found is None:
            nodes = [n for n in self.snapshot.nodes if n.flavor == flavor and n.schedulable]
            found = self._free[flavor] = free_by_node(nodes, self.open)
        return found

    def capacity(self, flavor: str, *, domain: str | None = None, unit: int | None = None,
                 spread: bool = True) -> Capacity:
        """``packing.capacity`` of the open leases."""
        key = (flavor, domain, unit, spread)
        found = self._capacity.get(key)
        if found is None:
            found = self._capacity[key] = capacity(
                self.snapshot, self.open, flavor, domain=domain, unit=unit, spread=spread, free=self.free(flavor),
            )
        return found

    # --- funding -------------------------------------------------------------------------------------------------

    def funding(self, run: Run, room: Capacity) -> Funding:
        """``funding.funding`` of the run on the candidate nodes of ``room``."""
        key = (room.flavor, room.domain_scope)
        inputs = self._funding_inputs.get(key)
        if inputs is None:
            if self._state is None:
                self._state = state_now(self.book)
            inputs = self._funding_inputs[key] = funding_inputs(self.book, room.flavor, room.nodes, self._state)
        limited = run.spec.funding is not None and run.spec.funding.max_borrow_gpus is not None
        borrowed = sum(c.borrowed for c in self.charges_of(run.key)) if limited else None  # as run_borrowed
        return funding(self.book, run, room.nodes, borrowed_now=borrowed, inputs=inputs)

    # --- a scope: what the resolver could free, who reports completion ------------------------------------------

    def scope_nodes(self, scope: Scope) -> ScopeNodes:
        found = self._scope_nodes.get(scope)
        if found is None:
            found = self._scope_nodes[scope] = scope_nodes(self.snapshot, scope)
        return found

    def remedy_candidates(self, scope: Scope, *, exclude_run: str | None = None,
                          seed: str | None = None) -> RemedyCandidates:
        """``remedies.remedy_candidates`` in ``scope``."""
        groups = self._groups.get(scope)
        if groups is None:
            groups = self._groups[scope] = scope_groups(self.snapshot, self.book, scope)
        if self._held is None:
            self._held = active_held(self.book)
        return remedy_candidates(self.snapshot, self.book, scope, exclude_run=exclude_run, seed=seed,
                                 every_group=groups, nodes=self.scope_nodes(scope), held=self._held)

    def protections(self) -> dict[str, ProtectedEntry]:
        """``protection.protections`` at ``at`` with the reconciler's default windows (what ``plan`` shows a
        lottery would leave out), computed once."""
        if self._protections is None:
            self._protections = protections(self.snapshot, self.at, Windows())
        return self._protections

    def releases(self, scope: Scope, *, exclude_run: str | None = None) -> list[Release]:
        """``releases.releases`` in ``scope`` at ``at``."""
        found = self._releases.get(scope)
        if found is None:
            found = self._releases[scope] = releases(self.snapshot, self.book, self.scope_nodes(scope), self.at)
        return [r for r in found if r.run != exclude_run]
