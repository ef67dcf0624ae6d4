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

from ..model import GPULease, Node, ProtectedEntry, Reservation, Run, Scope, Snapshot
from .accounting import LeaseCharge, Ledger, ledger
from .book import OpenBook
from .funding import Funding, FundingInputs, FundingState, funding, funding_inputs, state_now
from .packing import (
    NO_DOMAIN,
    Capacity,
    DomainSums,
    ScopedNodes,
    capacity,
    capacity_moved,
    domain_sums,
    open_leases,
    scoped_nodes,
    slot_counts,
)
from .protection import Windows, protections
from .releases import Release, releases
from .remedies import (
    GroupKey,
    LeaseGroup,
    RemedyCandidates,
    ScopeNodes,
    active_held,
    lease_group,
    remedy_candidates,
    scope_groups,
    scope_nodes,
)

Change = tuple  # (the object before, after): before None for a Create


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
        self._node_lists: dict[tuple[str, str | None], ScopedNodes] = {}  # packing.scoped_nodes: of the nodes alone
        self._state: FundingState | None = None
        self._funding_inputs: dict[tuple[str, str | None], FundingInputs] = {}
        self._scope_nodes: dict[Scope, ScopeNodes] = {}
        self._groups: dict[Scope, dict[GroupKey, LeaseGroup]] = {}
        self._held: dict[str, int] | None = None
        self._releases: dict[Scope, list[Release]] = {}
        self._protections: dict[str, ProtectedEntry] | None = None
        self._lottery: dict[Scope, tuple[RemedyCandidates, tuple[ProtectedEntry, ...]]] = {}
        self._keeper: OpenBook | None = None
        self._slots: dict[str, dict[str, int]] = {}  # node of a flavor in _free -> its valid slots held (count)
        self._sums: dict[tuple[str, str | None], DomainSums] = {}  # capacity's free GPUs and nodes by domain
        self._moved: dict[tuple, set[str]] = {}  # a key of _capacity -> the domains whose free GPUs moved since
        self._open_nodes: dict[str, dict[str, Node]] = {}  # flavor -> its schedulable nodes with a free GPU

    @classmethod
    def kept(cls, snapshot: Snapshot, at: datetime) -> Evaluation:
        """An Evaluation that ``advance`` keeps up to date as leases, Reservations and Runs change (the ledger
        keeper's pass): its ledger is an ``OpenBook``'s."""
        leases = open_leases(snapshot, at)
        keeper = OpenBook(snapshot, at, leases)
        ev = cls(snapshot, at, leases=leases, book=keeper.ledger)
        ev._keeper = keeper
        return ev

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
            held = slot_counts(nodes, self.open)  # packing.used_slots, with how many leases hold each slot
            for node in nodes:  # kept up to date by advance
                self._slots[node.name] = held.get(node.name, {})
            found = self._free[flavor] = {
                n.name: 0 if n.out_of_service else max(0, n.gpus - len(held.get(n.name, ()))) for n in nodes
            }
        return found

    def capacity(self, flavor: str, *, domain: str | None = None, unit: int | None = None,
                 spread: bool = True) -> Capacity:
        """``packing.capacity`` of the open leases."""
        key = (flavor, domain, unit, spread)
        found = self._capacity.get(key)
        moved = self._moved.pop(key, None)
        if found is not None and moved:  # the leases written since moved a few domains' free GPUs
            found = self._capacity[key] = capacity_moved(found, self._sums[(flavor, domain)], moved)
        if found is None:
            nodes = self._node_lists.get((flavor, domain))
            if nodes is None:
                nodes = self._node_lists[(flavor, domain)] = scoped_nodes(self.snapshot, flavor, domain)
            sums = self._sums.get((flavor, domain))
            if sums is None:
                sums = self._sums[(flavor, domain)] = domain_sums(nodes[3], self.free(flavor))
            found = self._capacity[key] = capacity(  # with the sums given, capacity reads no lease
                self.snapshot, (), flavor, domain=domain, unit=unit, spread=spread, scoped=nodes, sums=sums,
            )
        return found

    def open_nodes(self, flavor: str) -> dict[str, Node]:
        """The schedulable nodes of ``flavor`` with a free GPU (``free``), by name, in snapshot order."""
        found = self._open_nodes.get(flavor)
        if found is None:
            by_name = self.snapshot.nodes_by_name
            found = self._open_nodes[flavor] = {name: by_name[name] for name, gpus in self.free(flavor).items()
                                                if gpus}
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

    def lottery_candidates(self, scope: Scope, *, exclude_run: str | None = None, seed: str | None = None
                           ) -> tuple[RemedyCandidates, tuple[ProtectedEntry, ...]]:
        """What a plan lists in ``scope``: ``remedy_candidates(scope, exclude_run=…, seed=…)`` with the Runs
        ``protections()`` shields left out of the conflict set, and those Runs (sorted). Computed once per scope
        for every plan of a Run that holds nothing in it (a pending Run: the common case), then put in the
        seed's order; a Run that holds leases in scope gets its own."""
        if exclude_run is not None and self._holds_in(scope, exclude_run):
            return self._shielded(self.remedy_candidates(scope, exclude_run=exclude_run, seed=seed))
        found = self._lottery.get(scope)
        if found is None:
            found = self._lottery[scope] = self._shielded(self.remedy_candidates(scope))
        gentle, protected = found
        return (gentle.in_order_of(seed) if seed else gentle), protected

    def _shielded(self, gentle: RemedyCandidates) -> tuple[RemedyCandidates, tuple[ProtectedEntry, ...]]:
        shield = self.protections()
        protected = tuple(shield[r] for r in sorted({g.run for g in gentle.conflict if g.run in shield}))
        return dataclasses.replace(gentle, conflict=tuple(g for g in gentle.conflict if g.run not in shield)), protected

    def _holds_in(self, scope: Scope, run_key: str) -> bool:
        mine = self.leases_of(run_key)
        return bool(mine) and any(map(self.scope_nodes(scope).in_scope, mine))

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

    # --- keeping up with writes (the ledger keeper's pass) -------------------------------------------------------

    def advance(self, snapshot: Snapshot, *, leases: Sequence[Change] = (), reservations: Sequence[Change] = (),
                runs: Sequence[Change] = ()) -> None:
        """Make this the Evaluation of ``snapshot``: the previous snapshot with ``leases``, ``reservations`` and
        ``runs`` changed ((before, after) pairs, before None for a created object). Every value it serves is
        then the one a new Evaluation of ``snapshot`` would compute (tests/unit/test_ledger_incremental.py):
        the ledger is funded again where the leases that opened or closed are charged (``OpenBook``), the
        open leases, charges and Active GPUs of the touched Runs, the free GPUs of the nodes whose slots moved,
        the lease groups that changed, each capacity's entries of the domains whose free GPUs moved
        (``packing.capacity_moved``, when next asked); what else is computed from all of those (funding inputs,
        remedy candidates, releases) is dropped and computed again when asked. Only for ``Evaluation.kept``."""
        if self._keeper is None:
            raise ValueError("only an Evaluation made by Evaluation.kept can advance")
        at = self.at
        self.snapshot = snapshot
        pairs = [(old if old is not None and old.open_at(at) else None, new if new.open_at(at) else None)
                 for old, new in leases]
        pairs = [(old, new) for old, new in pairs if old is not None or new is not None]
        self._open = None  # in snapshot order, computed again when asked
        if pairs:
            self._leases_changed(snapshot, pairs)
        if any(new.status.closure_reason == "RandomPreempt" for _, new in leases):
            self._forget_protections()  # a recent victim
        for old, new in reservations:
            if self._reservations_by_run is not None:
                _replace_or_append(self._reservations_by_run.setdefault(new.spec.run_ref.key, []), old, new)
            if "Activated" in (new.status.state, old.status.state if old is not None else None):
                self._forget_protections()
        if runs:  # an ETA or a phase: protections, releases, shrinkable runs
            self._forget_protections()
            self._releases = {}

    def _leases_changed(self, snapshot: Snapshot, pairs: list[tuple[GPULease | None, GPULease | None]]) -> None:
        closed = [old for old, _ in pairs if old is not None]
        opened = [new for _, new in pairs if new is not None]
        keeper = self._keeper
        refunded = keeper.change(opened, closed)
        runs = {x.run_key for x in closed + opened}
        if self._leases_by_run is not None:
            for old, new in pairs:
                mine = self._leases_by_run.setdefault((old or new).run_key, [])
                if new is None:
                    mine[:] = [x for x in mine if x.key != old.key]
                else:
                    _replace_or_append(mine, old, new)
        touched_groups = {(x.run_key, x.spec.group) for x in closed + opened}
        for key in refunded:  # their charges are new: a group's class may have moved
            touched_groups.update((x.run_key, x.spec.group) for x in keeper.by_envelope[key].values())
        charges = self.book.charges
        if self._charges_by_run is not None:
            for run in runs | {run for run, _ in touched_groups}:
                self._charges_by_run[run] = [charges[x.key] for x in self.leases_of(run) if x.key in charges]
        if self._held is not None:
            for lease, sign in [(x, -1) for x in closed] + [(x, 1) for x in opened]:
                if lease.spec.slice.role == "Active":
                    self._held[lease.run_key] = self._held.get(lease.run_key, 0) + sign * lease.gpus
        for scope, groups in self._groups.items():
            nodes = self.scope_nodes(scope)
            for key in touched_groups:
                members = [x for x in self.leases_of(key[0]) if x.spec.group == key[1] and nodes.in_scope(x)]
                if members:
                    groups[key] = lease_group(self.book, nodes, key,
                                              [x for x in members if x.spec.slice.role == "Active"],
                                              [x for x in members if x.spec.slice.role != "Active"])
                else:
                    groups.pop(key, None)
        moved = self._free_changed(snapshot, closed, opened)
        for key in self._capacity:
            if key[0] in moved:
                self._moved.setdefault(key, set()).update(moved[key[0]])
        self._state, self._funding_inputs = None, {}
        self._releases, self._lottery = {}, {}
        activated = {r.spec.run_ref.key for run in runs for r in self.reservations_of(run)
                     if r.status.state == "Activated"}
        if activated:  # the leases of a Run started through an activation
            self._forget_protections()

    def _free_changed(self, snapshot: Snapshot, closed: list[GPULease], opened: list[GPULease]
                      ) -> dict[str, set[str]]:
        """Update the free GPUs of the nodes whose slots the leases hold; returns the domains whose free GPUs
        moved (NO_DOMAIN for none), by flavor."""
        nodes = snapshot.nodes_by_name
        moved: set[str] = set()
        for leases, sign in ((closed, -1), (opened, 1)):
            for lease in leases:
                for slot in lease.spec.slice.slots:
                    name, _, ordinal = slot.rpartition("#")
                    node = nodes.get(name)
                    if node is None:
                        continue
                    moved.add(name)
                    held = self._slots.get(name)
                    if held is not None and ordinal.isdigit() and int(ordinal) < node.gpus:
                        held[slot] = held.get(slot, 0) + sign
                        if not held[slot]:
                            del held[slot]
        flavors = {nodes[name].flavor for name in moved}
        domains: dict[str, set[str]] = {}
        for flavor in flavors & set(self._free):
            free = self._free[flavor]
            sums = [(domain, found[0]) for (of, domain), found in self._sums.items() if of == flavor]
            open_nodes = self._open_nodes.get(flavor)
            for name in moved:
                if name in free:
                    node = nodes[name]
                    was = free[name]
                    now = free[name] = 0 if node.out_of_service else max(0, node.gpus - len(self._slots.get(name, ())))
                    if now == was:
                        continue
                    domains.setdefault(flavor, set()).add(node.domain or NO_DOMAIN)
                    for domain, by_domain in sums:  # packing.domain_sums of the nodes in scope
                        if domain is None or node.domain == domain:
                            by_domain[node.domain or NO_DOMAIN] += now - was
                    if open_nodes is None:
                        continue
                    if not now:
                        open_nodes.pop(name, None)
                    elif not was:  # back among them, in snapshot order: listed again when asked
                        self._open_nodes.pop(flavor, None)
                        open_nodes = None
        return domains

    def _forget_protections(self) -> None:
        self._protections = None
        self._lottery = {}


def _replace_or_append(items: list, old, new) -> None:
    """``new`` in the place of ``old`` (same key) in ``items``, else last."""
    if old is not None:
        for i, item in enumerate(items):
            if item.key == old.key:
                items[i] = new
                return
    items.append(new)
