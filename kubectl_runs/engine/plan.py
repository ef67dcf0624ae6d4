"""The plan for one run: what it needs, where it could go, who could pay, what is missing, why, and what would
fix it (API.md §3 Plan, Reasons, Remedies, Forecast; §5 ``plan``).

- **need** = width planned + spares − GPUs held. The width planned is the start width (``minTotalGPUs`` when
  elastic, else ``totalGPUs``); an elastic run that already runs below its desired width plans toward
  ``desiredTotalGPUs``. Spares are ``sparesPerGroup`` per group (one group when the run has no
  ``groupGPUs``). Held = the run's open Active leases (``width.allocated``) and open Spare leases.
- **placeable** (engine/packing.py) and **fundable** (engine/funding.py) at ``at``, on the candidate nodes: the
  flavor, schedulable, and the pending Reservation's domain when its scope names one.
- ``capacityDeficitGPUs = max(0, need − placeable)``, ``fundingDeficitGPUs = max(0, need − fundable)``,
  ``deficitGPUs = max(0, need − min(placeable, fundable))``.
- **reasons**: what is wrong with the request first (``InvalidRequest``, ``UnboundNamespace``), then funding
  (``NoEnvelope``, ``WindowNotOpen``, ``InsufficientBudget``, ``BorrowLimit``, ``ACLDenied``), then capacity
  (``NoSingleDomain``, ``InsufficientCapacity``) — each with a sentence a researcher can act on.
- **remedies**, in API.md order, each naming a run, lease or owner and the GPUs it frees or supplies:
  ``ReclaimUnfunded``, ``DropSpare``, ``Shrink`` (engine/remedies.py, only as many as the capacity deficit
  takes), ``Borrow`` (only as much as the funding deficit takes), ``Wait`` (engine/forecast.py), ``Lottery``.

Pure: the snapshot is never changed, ``at`` is an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..model import GPULease, Reservation, Run, Scope, Snapshot
from ..text import counted
from ..timeutil import rfc3339
from .accounting import BORROWED, OWNED, SHARED, UNFUNDED, EnvelopeKey, LeaseCharge, Ledger, ledger
from .forecast import REPORTED, UNKNOWN, WINDOW_ALIGNED, Forecast, forecast, releases
from .funding import ANCESTOR, OWN, SIBLING, SPONSOR, Funding, Releases, Walk, funding, state_at, walk
from .lottery import RunDraw, derive_seed, run_draws
from .packing import Capacity, candidate_nodes, capacity, group_unit, open_leases, place
from .remedies import RemedyCandidates, remedy_candidates, scope_nodes

# Reason codes (API.md §3), in the order a plan lists them.
INVALID_REQUEST = "InvalidRequest"
UNBOUND_NAMESPACE = "UnboundNamespace"
NO_ENVELOPE = "NoEnvelope"
WINDOW_NOT_OPEN = "WindowNotOpen"
INSUFFICIENT_BUDGET = "InsufficientBudget"
BORROW_LIMIT = "BorrowLimit"
ACL_DENIED = "ACLDenied"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
NO_SINGLE_DOMAIN = "NoSingleDomain"
REASON_CODES = (
    INVALID_REQUEST, UNBOUND_NAMESPACE, NO_ENVELOPE, WINDOW_NOT_OPEN, INSUFFICIENT_BUDGET, BORROW_LIMIT, ACL_DENIED,
    INSUFFICIENT_CAPACITY, NO_SINGLE_DOMAIN,
)

# Remedy kinds (API.md §3), in the order a plan lists them.
RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, BORROW, WAIT, LOTTERY = (
    "ReclaimUnfunded", "DropSpare", "Shrink", "Borrow", "Wait", "Lottery",
)
REMEDY_KINDS = (RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, BORROW, WAIT, LOTTERY)


@dataclass(frozen=True)
class Width:
    min: int
    max: int
    desired: int
    allocated: int  # GPUs of the run's open Active leases at ``at``

    def to_json(self) -> dict:
        return {"min": self.min, "max": self.max, "desired": self.desired, "allocated": self.allocated}


@dataclass(frozen=True)
class Reason:
    code: str
    message: str

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Remedy:
    kind: str
    target: str  # namespace/name of a run or lease, or an owner path (Borrow, window-aligned Wait)
    gpus: int  # GPUs it would free or supply
    message: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "target": self.target, "gpus": self.gpus, "message": self.message}


@dataclass(frozen=True)
class Plan:
    run: Run
    at: datetime
    width: Width
    planned_width: int  # the width the plan is for: start width, or desired when growing
    growing: bool  # an elastic run below its desired width, planning toward it
    spares: int  # spare GPUs the planned width takes
    held_spares: int  # GPUs of the run's open Spare leases
    need: int
    capacity: Capacity
    funding: Funding
    reasons: tuple[Reason, ...]
    remedies: tuple[Remedy, ...]
    forecast: Forecast
    reservation: Reservation | None
    notes: tuple[str, ...] = field(default=())

    # --- the arithmetic ---------------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def flavor(self) -> str:
        return self.run.spec.resources.gpu_type

    @property
    def finished(self) -> bool:
        return self.run.finished

    @property
    def placeable(self) -> int:
        return self.capacity.placeable

    @property
    def fundable(self) -> int:
        return self.funding.fundable

    @property
    def capacity_deficit(self) -> int:
        return max(0, self.need - self.placeable)

    @property
    def funding_deficit(self) -> int:
        return max(0, self.need - self.fundable)

    @property
    def deficit(self) -> int:
        return max(0, self.need - min(self.placeable, self.fundable))

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    @property
    def blocked(self) -> Reason | None:
        """The reason that no GPU count can fix (an invalid request, an unbound namespace), if any."""
        return next((r for r in self.reasons if r.code in (INVALID_REQUEST, UNBOUND_NAMESPACE)), None)

    def to_json(self) -> dict:
        return {
            "run": self.key,
            "at": rfc3339(self.at),
            "need": self.need,
            "width": self.width.to_json(),
            "capacity": self.capacity.to_json(),
            "funding": self.funding.to_json(),
            "deficitGPUs": self.deficit,
            "capacityDeficitGPUs": self.capacity_deficit,
            "fundingDeficitGPUs": self.funding_deficit,
            "reasons": [r.to_json() for r in self.reasons],
            "remedies": [r.to_json() for r in self.remedies],
            "forecast": self.forecast.to_json(),
        }

    # --- the answer in words ------------------------------------------------------------------------------------

    def headline(self) -> str:
        """One line: starts now, or short by N GPUs because …"""
        key = self.key
        if self.finished:
            return f"{key} has finished ({self.run.status.phase}): nothing to plan."
        blocked = self.blocked
        if blocked is not None:
            namespace = self.run.metadata.namespace
            if blocked.code == INVALID_REQUEST:
                return f"{key} cannot start: {blocked.message}."
            if self.funding.unbound:
                owners = len(self.funding.unbound_owners)
                return f"{key} cannot start: namespace {namespace} is unbound (its Budgets name {owners} owners)."
            return f"{key} cannot start: namespace {namespace} has no Budget, so no owner pays for its runs."
        if self.need == 0:
            what = "its desired width" if self.run.spec.malleable else "full width"
            return f"{key} is running at {what} ({self.width.allocated} GPUs): nothing to plan."
        grow = (
            f" to grow from {self.width.allocated} toward its desired {self.width.desired}" if self.growing else ""
        )
        if self.deficit == 0:
            return f"{key} starts now{grow}: {self.need} GPUs can be placed and funded."
        because = []
        if self.capacity_deficit:
            because.append(f"only {self.placeable} of {self.need} fit" if self.placeable else f"none of {self.need} fit")
        if self.funding_deficit:
            codes = self.codes
            if NO_ENVELOPE in codes:
                because.append(f"no envelope of its family pays for {self.flavor}")
            elif WINDOW_NOT_OPEN in codes:
                because.append(f"no {self.flavor} window is open")
            else:
                because.append(f"only {self.fundable} can be funded")
        return f"{key} is short by {self.deficit} GPUs{grow} because {' and '.join(because)}."


# --- lookups ------------------------------------------------------------------------------------------------------


def reservation_of(snapshot: Snapshot, run: Run, *, pending_only: bool = False) -> Reservation | None:
    """The run's Reservation: the one its ``status.pendingReservation`` names, else a pending one (latest
    earliestStart first), else — unless ``pending_only`` — the latest one whatever its state."""
    mine = [r for r in snapshot.reservations if r.spec.run_ref.key == run.key]
    if not mine:
        return None
    named = run.status.pending_reservation
    for r in mine:
        if named and named in (r.metadata.name, r.key):
            return r
    pending = [r for r in mine if r.status.state in (None, "Pending")]
    chosen = pending or ([] if pending_only else mine)
    return max(chosen, key=lambda r: (r.spec.earliest_start, r.key), default=None)


def open_ledger(snapshot: Snapshot, at: datetime) -> tuple[list[GPULease], Ledger]:
    """The leases open at ``at`` and the ledger of just those: the same headroom, classes and findings as
    ``ledger(snapshot, at)`` (closed leases only add GPU-hours, which a plan does not read), at a fraction of
    the cost on a fleet with a long history."""
    leases = open_leases(snapshot, at)
    current = Snapshot(
        nodes=snapshot.nodes,
        budgets=snapshot.budgets,
        runs=snapshot.runs,
        reservations=snapshot.reservations,
        leases=tuple(leases),
        taken_at=snapshot.taken_at,
    )
    return leases, ledger(current, at)


# --- the plan -------------------------------------------------------------------------------------------------


def plan_run(
    snapshot: Snapshot,
    run: Run,
    at: datetime,
    *,
    leases: Sequence[GPULease] | None = None,
    book: Ledger | None = None,
) -> Plan:
    """Plan ``run`` at ``at``. ``leases`` (the leases open at ``at``) and ``book`` (a ledger at ``at``) may be
    passed when already computed; otherwise ``open_ledger`` computes both."""
    if leases is None or book is None:
        leases, book = open_ledger(snapshot, at)
    spec = run.spec
    flavor = spec.resources.gpu_type
    reservation = None if run.finished else reservation_of(snapshot, run, pending_only=True)
    domain = reservation.spec.scope.domain if reservation is not None else None

    mine = [lease for lease in leases if lease.run_key == run.key]
    allocated = sum(lease.gpus for lease in mine if lease.spec.slice.role == "Active")
    held_spares = sum(lease.gpus for lease in mine if lease.spec.slice.role == "Spare")
    malleable = spec.malleable
    if malleable is not None:
        desired = malleable.desired_total_gpus or min(max(spec.resources.total_gpus, malleable.min_total_gpus),
                                                      malleable.max_total_gpus)
        width = Width(malleable.min_total_gpus, malleable.max_total_gpus, desired, allocated)
    else:
        total = spec.resources.total_gpus
        width = Width(total, total, total, allocated)
    growing = malleable is not None and 0 < allocated < width.desired and not run.finished
    planned = width.desired if growing else width.min
    group_gpus = spec.locality.group_gpus if spec.locality else None
    spread = spec.locality.allow_cross_group_spread if spec.locality else True
    groups = -(-planned // group_gpus) if group_gpus else 1
    spares = spec.spares_per_group * groups
    need = 0 if run.finished else max(0, planned + spares - allocated - held_spares)

    unit = group_unit(group_gpus, spec.spares_per_group)
    room = capacity(snapshot, leases, flavor, domain=domain, unit=unit, spread=spread)
    nodes = candidate_nodes(snapshot, flavor, domain)
    money = funding(book, run, nodes)

    invalid = _invalid(snapshot, run, room, planned, group_gpus)
    reasons: list[Reason] = list(invalid)
    if run.finished:
        reasons = []
    elif money.owner is None:
        reasons.append(_unbound(run, money))
    blocked = bool(reasons)
    short_capacity = need > room.placeable
    short_funding = need > money.fundable
    if not invalid and short_funding and money.owner is not None and not run.finished:
        reasons.extend(_funding_reasons(run, money, book, need, at))
    if not invalid and short_capacity and not run.finished:
        reasons.extend(_capacity_reasons(room, need, group_gpus, unit, domain))

    deficit = max(0, need - min(room.placeable, money.fundable))
    remedies: list[Remedy] = []
    if run.finished or blocked:
        outlook = Forecast(None, UNKNOWN)  # nothing will start, or it cannot start as asked: no ETA to give
    elif need == 0 or deficit == 0:
        outlook = Forecast(at, REPORTED)
    else:
        outlook = Forecast(None, UNKNOWN)
    if deficit and not blocked:
        scope = Scope(flavor=flavor, domain=domain)
        seed = derive_seed(reservation.key, reservation.spec.earliest_start) if reservation is not None else None
        gentle = remedy_candidates(snapshot, book, scope, exclude_run=run.key, seed=seed)
        envelope_owner = lambda key: book.envelopes[key].owner if key in book.envelopes else None  # noqa: E731

        def walk_at(when: datetime, given_back: Releases) -> Walk:
            return walk(money.candidates, state_at(book, when, given_back), borrow_left=money.borrow_left)

        outlook = forecast(
            at=at,
            need=need,
            fundable_now=money.fundable,
            free=room.free_by_domain,
            unit=unit,
            spread=spread,
            remedies_by_run=gentle.freed_by_run(),
            reported=releases(snapshot, book, scope_nodes(snapshot, scope), at, exclude_run=run.key),
            windows=[c for c in money.candidates if c.admitted and c.envelope.start > at],
            fundable_at=lambda when, given_back: walk_at(when, given_back).fundable,
            envelope_owner=envelope_owner,
        )
        remedies = _remedies(
            run, reservation, gentle, money, outlook, at,
            capacity_deficit=max(0, need - room.placeable), funding_deficit=max(0, need - money.fundable),
            walk_at=walk_at, envelope_owner=envelope_owner,
        )
    return Plan(
        run=run, at=at, width=width, planned_width=planned, growing=growing, spares=spares,
        held_spares=held_spares, need=need, capacity=room, funding=money, reasons=tuple(reasons),
        remedies=tuple(remedies), forecast=outlook, reservation=reservation,
    )


# --- reasons --------------------------------------------------------------------------------------------------


def _invalid(snapshot: Snapshot, run: Run, room: Capacity, planned: int, group_gpus: int | None) -> list[Reason]:
    spec = run.spec
    out = []
    flavor = spec.resources.gpu_type
    if room.flavor_nodes == 0:
        offered = sorted({n.flavor for n in snapshot.nodes if n.flavor})
        here = f"nodes here offer {', '.join(offered)}" if offered else "no node has a gpu.flavor label"
        out.append(Reason(INVALID_REQUEST, f"no node offers GPU flavor {flavor} ({here}): check spec.resources.gpuType"))
    malleable = spec.malleable
    if malleable is not None:
        low, high = malleable.min_total_gpus, malleable.max_total_gpus
        if low > high:
            out.append(Reason(INVALID_REQUEST, f"spec.malleable.minTotalGPUs {low} is more than maxTotalGPUs {high}"))
        desired = malleable.desired_total_gpus
        if desired is not None and not low <= desired <= high:
            out.append(Reason(INVALID_REQUEST,
                              f"spec.malleable.desiredTotalGPUs {desired} is outside [{low}, {high}] (min, max)"))
        if group_gpus and malleable.step_gpus % group_gpus:
            out.append(Reason(INVALID_REQUEST, f"spec.malleable.stepGPUs {malleable.step_gpus} is not a whole "
                                               f"number of groups of {group_gpus} (spec.locality.groupGPUs)"))
    if group_gpus and planned % group_gpus:
        field_name = "spec.malleable.minTotalGPUs" if malleable is not None else "spec.resources.totalGPUs"
        out.append(Reason(INVALID_REQUEST, f"{field_name} {planned} is not a whole number of groups of {group_gpus} "
                                           "(spec.locality.groupGPUs)"))
    return out


def _unbound(run: Run, money: Funding) -> Reason:
    namespace = run.metadata.namespace
    if money.unbound:
        names = ", ".join(money.unbound_owners)
        return Reason(UNBOUND_NAMESPACE, f"namespace {namespace} has Budgets of {len(money.unbound_owners)} owners "
                                         f"({names}), so its runs have no owner to pay for them: make its Budgets "
                                         "name one owner")
    return Reason(UNBOUND_NAMESPACE, f"namespace {namespace} has no Budget, so its runs have no owner to pay for "
                                     f"them: create a Budget in {namespace} that names the owner")


def _when(then: datetime, at: datetime) -> str:
    """``2025-12-01 00:00 UTC (in 10 days)``: exact, and how far from ``at``."""
    import humanize

    def span(delta) -> str:
        return humanize.precisedelta(delta, minimum_unit="minutes", format="%0.0f")

    rel = f"in {span(then - at)}" if then >= at else f"{span(at - then)} ago"
    return f"{then:%Y-%m-%d %H:%M} UTC ({rel})"


def _funding_reasons(run: Run, money: Funding, book: Ledger, need: int, at: datetime) -> list[Reason]:
    owner = money.owner
    flavor = money.flavor
    out = []
    admitted = [c for c in money.candidates if c.admitted]
    open_now = [c for c in admitted if book.envelopes[c.key].window_active]
    borrowing = " or the sponsors it borrows from" if money.allow_borrow and run.spec.funding.sponsors else ""
    if not admitted:
        text = f"no Budget of {owner}, its ancestors or its siblings{borrowing} has an envelope of {flavor}"
        if money.unselected:
            picked = ", ".join(f"{k[0]}/{k[1]} {k[2]}" for k in money.unselected)
            text = (f"no envelope of {flavor} in the family of {owner}{borrowing} pays for the nodes that can take "
                    f"it: the selectors of {picked} match none of them")
        out.append(Reason(NO_ENVELOPE, text))
    elif not open_now:
        upcoming = sorted((c for c in admitted if c.envelope.start > at), key=lambda c: (c.envelope.start, c.key))
        if upcoming:
            first = upcoming[0]
            text = (f"no {flavor} envelope of {owner}'s family is inside its window now: the first to open is "
                    f"{first.label} of {first.owner}, on {_when(first.envelope.start, at)}")
        else:
            last = max(admitted, key=lambda c: (c.envelope.end, c.key))
            text = (f"every {flavor} envelope of {owner}'s family is outside its window: the last, {last.label}, "
                    f"closed on {_when(last.envelope.end, at)}")
        out.append(Reason(WINDOW_NOT_OPEN, text))
    else:
        by_relation = {rel: 0 for rel in (OWN, ANCESTOR, SIBLING, SPONSOR)}
        for source in money.sources:
            by_relation[source.relation] += source.usable
        split = ", ".join(
            f"{'ancestors' if rel == ANCESTOR else 'siblings' if rel == SIBLING else 'sponsors' if rel == SPONSOR else rel}"
            f" {gpus}"
            for rel, gpus in by_relation.items()
            if gpus or rel == OWN
        )
        out.append(Reason(INSUFFICIENT_BUDGET, f"the {flavor} envelopes it may use have {money.fundable} GPUs of "
                                               f"headroom ({split}); it needs {need}"))
    if money.walk.borrow_cut:
        limit = run.spec.funding.max_borrow_gpus
        already = limit - (money.borrow_left or 0) if limit is not None else 0
        held = f" and it already borrows {already}" if already else ""
        out.append(Reason(BORROW_LIMIT, f"spec.funding.maxBorrowGPUs is {limit}{held}: its sponsors would lend "
                                        f"{money.walk.borrow_cut} more"))
    for denied in money.denied:
        lending = denied.envelope.lending
        if lending is None or not lending.allow:
            why = "does not lend"
        else:
            why = f"lends only to {', '.join(lending.to) or 'nobody'}"
        out.append(Reason(ACL_DENIED, f"sponsor {denied.owner}'s {denied.label} {why}, not to {owner}"))
    return out


def _capacity_reasons(
    room: Capacity, need: int, group_gpus: int | None, unit: int | None, domain: str | None
) -> list[Reason]:
    where = f" in fabric domain {domain}" if domain else ""
    excluded = (
        f" ({room.excluded_nodes} more node{'s' if room.excluded_nodes != 1 else ''} cordoned or out of service)"
        if room.excluded_nodes
        else ""
    )
    nodes = room.node_count
    free_text = (
        f"{room.free} {room.flavor} GPUs are free on {nodes} schedulable node{'s' if nodes != 1 else ''}{where}"
        f"{excluded}"
    )
    if group_gpus and not room.spread:
        spread_total = place(room.free_by_domain, unit, True)[0]
        best = room.best_domain
        if spread_total >= need and best is not None:
            groups = -(-need // unit) if unit else 0
            return [Reason(NO_SINGLE_DOMAIN, f"spec.locality.allowCrossGroupSpread is false and no fabric domain has "
                                             f"room for all {groups} groups of {unit}: the best, {best.domain}, "
                                             f"holds {best.groups}")]
    if group_gpus:
        spares = f" (with {unit - group_gpus} spares)" if unit and unit != group_gpus else ""
        text = f"{free_text}, {room.placeable} of them in whole groups of {group_gpus}{spares}; it needs {need}"
    else:
        text = f"{free_text}; it needs {need}"
    return [Reason(INSUFFICIENT_CAPACITY, text)]


# --- remedies ----------------------------------------------------------------------------------------------------


def _remedies(
    run: Run,
    reservation: Reservation | None,
    gentle: RemedyCandidates,
    money: Funding,
    outlook: Forecast,
    at: datetime,
    *,
    capacity_deficit: int,
    funding_deficit: int,
    walk_at: Callable[[datetime, Releases], Walk],
    envelope_owner: Callable[[EnvelopeKey], str | None],
) -> list[Remedy]:
    out: list[Remedy] = []
    left = capacity_deficit
    if left:
        for group in gentle.reclaim:
            if left <= 0:
                break
            out.append(Remedy(RECLAIM_UNFUNDED, group.run, group.gpus,
                              f"reclaim unfunded group {group.group} of {group.run} (frees {group.gpus})"))
            left -= group.gpus
        for drop in gentle.spares:
            if left <= 0:
                break
            out.append(Remedy(DROP_SPARE, drop.lease.key, drop.gpus,
                              f"drop spare {drop.lease.key} of {drop.run} (frees {drop.gpus})"))
            left -= drop.gpus
        for step in gentle.shrinks:
            if left <= 0:
                break
            out.append(Remedy(SHRINK, step.run, step.gpus,
                              f"shrink {step.run} from {step.from_gpus} to {step.to_gpus} (frees {step.gpus})"))
            left -= step.gpus
    wanted = funding_deficit
    for lender in money.lenders:
        if wanted <= 0:
            break
        give = min(lender.extra, wanted)
        lending = lender.envelope.lending
        cap = (
            f"lending allows {lending.max_concurrency}, {lender.room} free"
            if lending is not None and lending.max_concurrency is not None
            else f"lends without a cap, {lender.room} free"
        )
        out.append(Remedy(BORROW, lender.owner, give, f"borrow {give} from {lender.owner} ({cap}): {lender.change}"))
        wanted -= give
    start = outlook.earliest_start
    if start is not None and start > at:
        if outlook.confidence == WINDOW_ALIGNED and outlook.opened:
            given_back = Releases()
            for release in outlook.releases:
                for charge in release.charges:
                    given_back.add(charge, envelope_owner(charge.envelope) if charge.envelope else None)
            opened = {c.key: c for c in outlook.opened}
            supplying = [s for s in walk_at(start, given_back).sources if s.key in opened and s.usable > 0]
            gives = sum(s.usable for s in supplying)
            if supplying:
                first = opened[supplying[0].key]
                more = f" (and {len(supplying) - 1} more)" if len(supplying) > 1 else ""
                out.append(Remedy(WAIT, first.owner, gives,
                                  f"wait until {_when(start, at)}, when {first.label} of {first.owner}{more} "
                                  f"opens its window: {gives} GPUs of headroom"))
        else:
            released = outlook.releases
            gpus = sum(r.gpus for r in released)
            last = released[-1].run if released else run.key
            who = (
                f"{released[0].run} reports completion by then" if len(released) == 1
                else f"{len(released)} runs report completion by then (the last, {last})"
            )
            out.append(Remedy(WAIT, last, gpus, f"wait until {_when(start, at)}: {who}, freeing {gpus}"))
    if left > 0 and gentle.conflict:
        pool = sum(g.active_gpus for g in gentle.conflict)
        gpus = min(left, pool)
        target = reservation.key if reservation is not None else run.key
        by = f"when reservation {reservation.key} activates" if reservation is not None else "when a reservation for it activates"
        out.append(Remedy(LOTTERY, target, gpus,
                          f"{by}, a seeded lottery over {counted(len(gentle.conflict), 'group')} in scope frees the remaining "
                          f"{gpus} (unfunded first, then borrowed, shared, owned)"))
    return out



# --- explain: everything about one run --------------------------------------------------------------------------

PREEMPTING_CLOSURES = ("RandomPreempt", "ReclaimUnfunded")


@dataclass(frozen=True)
class LeaseView:
    """One of the run's leases, with its funding at ``at`` when it is open then."""

    lease: GPULease
    open: bool
    charge: LeaseCharge | None  # the ledger's funding of it (open leases only)

    @property
    def cls(self) -> str | None:
        return self.charge.worst_class if self.charge is not None else None

    def to_json(self) -> dict:
        lease = self.lease
        payer = lease.payer
        nodes = sorted({slot.rpartition("#")[0] or slot for slot in lease.spec.slice.slots})
        return {
            "name": lease.key,
            "group": lease.spec.group,
            "role": lease.spec.slice.role,
            "gpus": lease.gpus,
            "nodes": nodes,
            "paidBy": "/".join(payer) if payer else None,
            "start": rfc3339(lease.spec.start),
            "open": self.open,
            "class": self.cls,
            "closed": lease.status.closed,
            "ended": rfc3339(lease.status.ended),
            "closureReason": lease.status.closure_reason,
        }


@dataclass(frozen=True)
class Preemption:
    """GPUs a reservation's activation took from the run, and the seed that anyone can replay."""

    reservation: str
    seed: str
    at: datetime | None
    gpus: int
    verified: bool | None  # `seeds verify` of that reservation; None when it has no recorded draw here
    closure: str | None = None  # RandomPreempt or ReclaimUnfunded, when the leases say

    def to_json(self) -> dict:
        return {
            "reservation": self.reservation,
            "seed": self.seed,
            "at": rfc3339(self.at),
            "gpus": self.gpus,
            "verified": self.verified,
        }


@dataclass(frozen=True)
class Explanation:
    run: Run
    at: datetime
    plan: Plan
    owned: int
    shared: int
    borrowed: int
    unfunded: int
    lenders: tuple[tuple[str, int], ...]  # (owner, GPUs) the run borrows from
    reservation: Reservation | None
    preemptions: tuple[Preemption, ...]
    leases: tuple[LeaseView, ...]  # open first, then the most recent
    events: tuple[dict, ...] | None = None  # live only: the run's recent core/v1 Events
    draws: tuple[RunDraw, ...] = ()  # the recorded draws this run was in: its tickets and places, verified

    def to_json(self) -> dict:
        out = {
            "run": self.run.key,
            "phase": self.run.status.phase,
            "width": self.plan.width.to_json(),
            "funding": {
                "owned": self.owned,
                "shared": self.shared,
                "borrowed": self.borrowed,
                "unfunded": self.unfunded,
                "lenders": [{"owner": owner, "gpus": gpus} for owner, gpus in self.lenders],
            },
            "plan": self.plan.to_json(),
            "reservation": reservation_json(self.reservation),
            "preemptions": [p.to_json() for p in self.preemptions],
            "leases": [view.to_json() for view in self.leases],
        }
        if self.events is not None:
            out["events"] = [dict(e) for e in self.events]
        return out


def reservation_json(reservation: Reservation | None) -> dict | None:
    if reservation is None:
        return None
    spec, status = reservation.spec, reservation.status
    activation = status.activation
    return {
        "name": reservation.key,
        "state": status.state,
        "scope": {"flavor": spec.scope.flavor, "domain": spec.scope.domain},
        "payingEnvelope": (
            {"budget": spec.paying_envelope.budget, "envelope": spec.paying_envelope.envelope}
            if spec.paying_envelope is not None
            else None
        ),
        "earliestStart": rfc3339(spec.earliest_start),
        "activation": (
            {
                "at": rfc3339(activation.at),
                "seed": activation.seed,
                "deficitGPUs": activation.deficit_gpus,
                "freedGPUs": activation.freed_gpus,
            }
            if activation is not None
            else None
        ),
    }


def explain_run(
    snapshot: Snapshot, run: Run, at: datetime, *, events: Sequence[Mapping[str, Any]] | None = None
) -> Explanation:
    """Everything about ``run`` at ``at``: its plan, how its open leases are funded (and by which lenders), its
    reservation, its preemption history (from its leases closed by RandomPreempt/ReclaimUnfunded with
    ``status.preemption`` and from ``status.preemptions``, each checked like ``seeds verify``), its leases, and
    — when given (live) — its recent Events."""
    leases, book = open_ledger(snapshot, at)
    result = plan_run(snapshot, run, at, leases=leases, book=book)
    mine = snapshot.leases_by_run.get(run.key, [])
    charges = {lease.key: book.charges.get(lease.key) for lease in mine}
    split = {cls: 0 for cls in (OWNED, SHARED, BORROWED, UNFUNDED)}
    lenders: dict[str, int] = {}
    for charge in charges.values():
        if charge is None:
            continue
        for cls in split:
            split[cls] += getattr(charge, cls)
        if charge.borrowed and charge.lender:
            lenders[charge.lender] = lenders.get(charge.lender, 0) + charge.borrowed
    views = sorted(
        (LeaseView(lease, charges[lease.key] is not None, charges[lease.key]) for lease in mine),
        key=lambda v: (not v.open, -v.lease.spec.start.timestamp(), v.lease.key),
    )
    draws = tuple(run_draws(snapshot, run.key))
    return Explanation(
        run=run,
        at=at,
        plan=result,
        owned=split[OWNED],
        shared=split[SHARED],
        borrowed=split[BORROWED],
        unfunded=split[UNFUNDED],
        lenders=tuple(sorted(lenders.items())),
        reservation=reservation_of(snapshot, run),
        preemptions=tuple(preemptions_of(run, mine, draws)),
        leases=tuple(views),
        events=None if events is None else tuple(events),
        draws=draws,
    )


def preemptions_of(run: Run, mine: Sequence[GPULease], draws: Sequence[RunDraw]) -> list[Preemption]:
    found: dict[tuple[str, str], dict] = {}
    for lease in mine:
        status = lease.status
        if not status.closed or status.closure_reason not in PREEMPTING_CLOSURES or status.preemption is None:
            continue
        key = (status.preemption.reservation, status.preemption.seed)
        entry = found.setdefault(key, {"at": None, "gpus": 0, "closure": status.closure_reason})
        entry["gpus"] += lease.gpus
        if status.ended is not None and (entry["at"] is None or status.ended > entry["at"]):
            entry["at"] = status.ended
    for record in run.status.preemptions:
        key = (record.reservation, record.seed)
        if key not in found:
            found[key] = {"at": record.at, "gpus": record.gpus, "closure": None}
        elif found[key]["at"] is None:
            found[key]["at"] = record.at
    if not found:
        return []
    verdicts = {(d.reservation, d.seed): d.verified for d in draws}
    out = [
        Preemption(reservation=r, seed=s, at=e["at"], gpus=e["gpus"], verified=verdicts.get((r, s)),
                   closure=e["closure"])
        for (r, s), e in found.items()
    ]
    return sorted(out, key=lambda p: (p.at is None, p.at or datetime.min, p.reservation, p.seed))
