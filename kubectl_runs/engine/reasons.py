"""The reasons of a plan (API.md §3 Reasons): what is wrong with the request first (``InvalidRequest``,
``UnboundNamespace``), then funding (``NoEnvelope``, ``WindowNotOpen``, ``InsufficientBudget``, ``BorrowLimit``,
``ACLDenied``), then capacity (``NoSingleDomain``, ``InsufficientCapacity``) — each with a sentence a researcher
can act on. A pure function of the need, capacity and funding stages (engine/plan.py).
"""

from __future__ import annotations

from datetime import datetime

from ..model import Run, Snapshot
from ..text import when
from .accounting import Ledger
from .codes import ReasonCode, Relation
from .funding import Funding
from .packing import Capacity
from .run_reports import Reason

(INVALID_REQUEST, UNBOUND_NAMESPACE, NO_ENVELOPE, WINDOW_NOT_OPEN, INSUFFICIENT_BUDGET, BORROW_LIMIT, ACL_DENIED,
 INSUFFICIENT_CAPACITY, NO_SINGLE_DOMAIN) = ReasonCode
OWN = Relation.OWN
_PLURAL = {Relation.ANCESTOR: "ancestors", Relation.SIBLING: "siblings", Relation.SPONSOR: "sponsors"}


def reasons(
    snapshot: Snapshot,
    run: Run,
    *,
    need: int,
    planned: int,
    group_gpus: int | None,
    unit: int | None,
    domain: str | None,
    room: Capacity,
    money: Funding,
    book: Ledger,
    at: datetime,
) -> list[Reason]:
    """Every reason ``run`` cannot start as asked at ``at`` (none for a finished run)."""
    if run.finished:
        return []
    invalid = _invalid(snapshot, run, room, planned, group_gpus)
    out = list(invalid)
    if money.owner is None:
        out.append(_unbound(run, money))
    if not invalid and need > money.fundable and money.owner is not None:
        out.extend(_funding_reasons(run, money, book, need, at))
    if not invalid and need > room.placeable:
        out.extend(_capacity_reasons(room, need, group_gpus, unit, domain))
    return out


def _invalid(snapshot: Snapshot, run: Run, room: Capacity, planned: int, group_gpus: int | None) -> list[Reason]:
    """What is wrong with the request itself: no node offers the flavor, or widths and groups that disagree."""
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
                    f"{first.label} of {first.owner}, on {when(first.envelope.start, at)}")
        else:
            last = max(admitted, key=lambda c: (c.envelope.end, c.key))
            text = (f"every {flavor} envelope of {owner}'s family is outside its window: the last, {last.label}, "
                    f"closed on {when(last.envelope.end, at)}")
        out.append(Reason(WINDOW_NOT_OPEN, text))
    else:
        usable = money.usable_by_relation()
        split = ", ".join(
            f"{_PLURAL.get(rel, rel)} {usable.get(rel, 0)}" for rel in Relation if usable.get(rel, 0) or rel == OWN
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
        spread_total = room.spread_placeable
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
