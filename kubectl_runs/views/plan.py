"""The view of ``plan``: the headline, the forecast line, NEED / PLACEABLE / FUNDABLE / DEFICIT with how each was
reached, and the reasons, remedies, capacity and funding tables. The reconciler writes the same headline into a
Run's Ready condition."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.codes import Confidence, ReasonCode
from ..engine.plan import Plan
from ..engine.reports import plain
from ..render import TABLE, TABLE_WIDTH, Column, Document, Section
from ..text import when

REPORTED, WINDOW_ALIGNED, UNKNOWN = Confidence


def headline(plan: Plan) -> str:
    """One line: starts now, or short by N GPUs because …"""
    key = plan.key
    if plan.finished:
        return f"{key} has finished ({plan.run.status.phase}): nothing to plan."
    blocked = plan.blocked
    if blocked is not None:
        namespace = plan.run.metadata.namespace
        if blocked.code == ReasonCode.INVALID_REQUEST:
            return f"{key} cannot start: {blocked.message}."
        if plan.funding.unbound:
            owners = len(plan.funding.unbound_owners)
            return f"{key} cannot start: namespace {namespace} is unbound (its Budgets name {owners} owners)."
        return f"{key} cannot start: namespace {namespace} has no Budget, so no owner pays for its runs."
    if plan.need == 0:
        what = "its desired width" if plan.run.spec.malleable else "full width"
        return f"{key} is running at {what} ({plan.width.allocated} GPUs): nothing to plan."
    grow = (
        f" to grow from {plan.width.allocated} toward its desired {plan.width.desired}" if plan.growing else ""
    )
    if plan.deficit == 0:
        return f"{key} starts now{grow}: {plan.need} GPUs can be placed and funded."
    because = []
    if plan.capacity_deficit:
        because.append(f"only {plan.placeable} of {plan.need} fit" if plan.placeable else f"none of {plan.need} fit")
    if plan.funding_deficit:
        codes = plan.codes
        if ReasonCode.NO_ENVELOPE in codes:
            because.append(f"no envelope of its family pays for {plan.flavor}")
        elif ReasonCode.WINDOW_NOT_OPEN in codes:
            because.append(f"no {plan.flavor} window is open")
        else:
            because.append(f"only {plan.fundable} can be funded")
    return f"{key} is short by {plan.deficit} GPUs{grow} because {' and '.join(because)}."




def plan_document(result: Plan, fmt: str) -> Document:
    wrap = fmt == TABLE
    lines = [headline(result), *forecast_lines(result), *draw_lines(result)]
    rows, columns = wrapped(figures(result), (("", lambda f: f.name), ("GPUS", lambda f: f"{f.gpus:,}")), "DETAIL",
                            lambda f: f.detail)
    return Document(
        data=plain(result.report),
        rows=rows,
        columns=columns,
        summary=[part for line in lines for part in (_wrap(line) if wrap else [line])],
        sections=plan_sections(result),
    )


def _wrap(line: str) -> list[str]:
    return textwrap.wrap(line, TABLE_WIDTH, break_on_hyphens=False)


@dataclass(frozen=True)
class Figure:
    name: str
    gpus: int
    detail: str


def figures(result: Plan) -> list[Figure]:
    """NEED, PLACEABLE, FUNDABLE, DEFICIT, each with how it was reached."""
    room = result.capacity
    width = result.width
    spec = result.run.spec
    group = spec.locality.group_gpus if spec.locality else None
    if result.finished:
        need = f"{result.run.status.phase}: nothing to start"
    else:
        planned = f"desired width {result.planned_width}" if result.growing else f"width {result.planned_width}"
        if group:
            groups = result.groups
            planned += f" ({groups} group{'s' if groups != 1 else ''} of {group})"
        spares = f" + {result.spares} spares" if result.spares else ""
        held = width.allocated + result.held_spares
        need = f"{planned}{spares}, {held} held"
    domains = len(room.domains)
    nodes = room.node_count
    placeable = f"{room.free:,} free on {nodes:,} schedulable {room.flavor} node{'s' if nodes != 1 else ''}"
    if room.domain_scope:
        placeable += f" in domain {room.domain_scope} (the reservation's scope)"
    elif domains > 1:
        placeable += f" in {domains} domains"
    if room.unit:
        placeable += f"; groups of {room.unit}"
        if not room.spread:
            best = room.best_domain
            placeable += f", one domain (best: {best.domain})" if best else ", one domain"
    by_relation = result.funding.usable_by_relation()
    if result.funding.owner is None:
        fundable = "no owner: the namespace is unbound"
    elif by_relation:
        fundable = ", ".join(f"{rel} {gpus:,}" for rel, gpus in by_relation.items())
        fundable += f" ({len(result.funding.sources)} envelope{'s' if len(result.funding.sources) != 1 else ''})"
    else:
        fundable = f"no {result.flavor} envelope of the family is open now"
    deficit = f"capacity {result.capacity_deficit}, funding {result.funding_deficit}"
    return [
        Figure("NEED", result.need, need),
        Figure("PLACEABLE", result.placeable, placeable),
        Figure("FUNDABLE", result.fundable, fundable),
        Figure("DEFICIT", result.deficit, deficit),
    ]


def forecast_lines(result: Plan) -> list[str]:
    if result.finished or result.need == 0 or result.deficit == 0 or result.blocked is not None:
        return []
    outlook = result.forecast
    start = outlook.earliest_start
    if outlook.confidence == UNKNOWN or start is None:
        return ["Earliest start: unknown: no run in scope reports when it completes early enough, and no budget "
                "window opens that would fund it."]
    if start <= result.at:
        return ["Earliest start: now, when its reservation activates and frees the rest (remedies below)."]
    exact = when(start, result.at)
    if outlook.confidence == WINDOW_ALIGNED:
        return [f"Earliest start: {exact}, when a budget window opens."]
    if outlook.confidence == REPORTED:
        return [f"Earliest start: {exact}, by reported completion times."]
    return [f"Earliest start: {exact} ({outlook.confidence})."]


def draw_lines(result: Plan) -> list[str]:
    """The pending Reservation's lottery before it happens: the instant, the seed anyone can replay, and who a
    protection window leaves out."""
    r = result.reservation
    if r is None or result.finished:
        return []
    lines = [f"Reservation {r.key} draws at {when(r.spec.earliest_start, result.at)} with seed {result.seed}."]
    if result.protected:
        lines.append("Out of its lottery now: " + "; ".join(
            f"{p.run} ({p.reason} until {when(p.until, result.at)}: {p.detail})" for p in result.protected) + ".")
    return lines


def plan_sections(result: Plan) -> list[Section]:
    reasons = wrapped(
        result.reasons, (("CODE", lambda r: r.code),), "MESSAGE", lambda r: r.message,
    )
    remedies = wrapped(
        list(enumerate(result.remedies, start=1)),
        (
            ("#", lambda item: item[0]),
            ("KIND", lambda item: item[1].kind),
            ("GPUS", lambda item: f"{item[1].gpus:,}"),
        ),
        "MESSAGE",
        lambda item: item[1].message,
        wide=(("TARGET", lambda item: item[1].target),),
    )
    shown = [d for d in result.capacity.domains if d.free] or list(result.capacity.domains)
    hidden = len(result.capacity.domains) - len(shown)
    domains = Section(
        "Capacity by fabric domain (most placeable first"
        + (f"; {hidden} domain{'s' if hidden != 1 else ''} with no free GPU not shown" if hidden else "") + ")",
        sorted(shown, key=lambda d: (-d.placeable, -d.free, d.domain)),
        (
            Column("DOMAIN", lambda d: d.domain or "<none>"),
            Column("NODES", lambda d: d.nodes),
            Column("FREE", lambda d: d.free),
            Column("PLACEABLE", lambda d: d.placeable),
            Column("GROUPS", lambda d: d.groups),
        ),
    )
    sources = Section(
        "Funding sources",
        result.funding.sources,
        (
            Column("RELATION", lambda s: s.relation),
            Column("OWNER", lambda s: s.owner),
            Column("BUDGET", lambda s: f"{s.key[0]}/{s.key[1]}"),
            Column("ENVELOPE", lambda s: s.key[2]),
            Column("HEADROOM", lambda s: s.headroom),
            Column("USABLE", lambda s: s.usable),
        ),
    )
    return [Section("Reasons", reasons[0], reasons[1]), Section("Remedies", remedies[0], remedies[1]), domains,
            sources]


def wrapped(
    items: Sequence[Any],
    fixed: Sequence[tuple[str, Callable[[Any], Any]]],
    text_header: str,
    text: Callable[[Any], str],
    *,
    wide: Sequence[tuple[str, Callable[[Any], Any]]] = (),
) -> tuple[list[Any], list[Column]]:
    """Rows and columns for a table whose last column is prose, which the renderer wraps in default mode so the
    table fits 100 columns (one line with -o wide). ``wide`` columns (before the prose) show only with -o wide."""
    columns = [Column(name, get) for name, get in fixed]
    columns += [Column(name, get, wide=True) for name, get in wide]
    columns.append(Column(text_header, text, align="left", prose=True))
    return list(items), columns
