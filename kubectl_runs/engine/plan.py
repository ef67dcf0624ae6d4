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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..model import GPULease, Reservation, Run, Scope, Snapshot
from ..text import counted
from ..timeutil import rfc3339
from .accounting import EnvelopeKey, Ledger, ledger
from .forecast import REPORTED, UNKNOWN, WINDOW_ALIGNED, Forecast, forecast, releases
from .funding import ANCESTOR, OWN, SIBLING, SPONSOR, Funding, Releases, Walk, funding, state_at, walk
from .lottery import derive_seed
from .packing import Capacity, candidate_nodes, capacity, group_unit, open_leases, place
from .remedies import RemedyCandidates, remedy_candidates, scope_nodes
from .reports import (
    PlanReport,
    Reason,
    Remedy,
    Width,
    capacity_report,
    forecast_report,
    funding_report,
)

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

    @property
    def report(self) -> PlanReport:
        """The value ``-o json`` prints."""
        return PlanReport(
            run=self.key,
            at=rfc3339(self.at) or "",
            need=self.need,
            width=self.width,
            capacity=capacity_report(self.capacity),
            funding=funding_report(self.funding),
            deficit_gpus=self.deficit,
            capacity_deficit_gpus=self.capacity_deficit,
            funding_deficit_gpus=self.funding_deficit,
            reasons=list(self.reasons),
            remedies=list(self.remedies),
            forecast=forecast_report(self.forecast),
        )

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
