"""The view of ``explain``: a header of labelled lines (run, request, width, funding, plan, reservation), then
the plan's reasons and remedies, the run's leases, its preemptions with their draws, the findings about its
leases and sponsors, and — live — its Events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.explain import Explanation
from ..engine.reports import plain
from ..engine.verify import RunDraw
from ..render import TABLE, Column, Document, Section
from ..text import when
from ..timeutil import parse_time
from . import age, findings_section, labelled_lines, relative
from .plan import forecast_lines, headline, plan_sections, wrapped

RECENT_CLOSED = 8  # closed leases shown in the table (JSON lists them all)


def explain_document(info: Explanation, fmt: str) -> Document:
    """``info.draws`` (engine/lottery.run_draws) add to each preemption the run's tickets and places in the draw."""
    wrap = fmt == TABLE
    by_key = {(d.reservation, d.seed): d for d in info.draws}
    return Document(
        data=plain(info.report),
        summary=header_lines(info, wrap=wrap),
        sections=[*plan_sections(info.plan)[:2], leases_section(info), preemptions_section(info, by_key),
                  findings_section(info.findings), *events_sections(info)],
    )


def header_lines(info: Explanation, *, wrap: bool) -> list[str]:
    run, plan, at = info.run, info.plan, info.at
    spec = run.spec
    width = plan.width
    created = run.metadata.creation_timestamp
    lines = [("Run", f"{run.key}, {run.status.phase or 'Pending'}"
                     + (f", created {age(created, at)} ago" if created else ""))]
    group = spec.locality.group_gpus if spec.locality else None
    request = f"{spec.resources.total_gpus} {spec.resources.gpu_type} GPUs"
    if group:
        request += f" in groups of {group}"
        if spec.locality and not spec.locality.allow_cross_group_spread:
            request += " (one fabric domain)"
    if spec.spares_per_group:
        request += f", {spec.spares_per_group} spares per group"
    if spec.malleable:
        m = spec.malleable
        request += f"; elastic {m.min_total_gpus}–{m.max_total_gpus} by {m.step_gpus}"
    if spec.funding and spec.funding.allow_borrow:
        limit = spec.funding.max_borrow_gpus
        request += f"; may borrow {'any number of' if limit is None else limit} GPUs"
        if spec.funding.sponsors:
            request += f" from {', '.join(spec.funding.sponsors)}"
    lines.append(("Request", request))
    lines.append(("Width", f"min {width.min}, max {width.max}, desired {width.desired}, allocated {width.allocated}"))
    if plan.funding.owner is not None:
        owner = f"owner {plan.funding.owner}"
    elif plan.funding.unbound:
        owner = f"no owner: namespace {run.metadata.namespace} is unbound"
    else:
        owner = f"no owner: namespace {run.metadata.namespace} has no Budget"
    funding = (f"owned {info.owned}, shared {info.shared}, borrowed {info.borrowed}, unfunded {info.unfunded}"
               f" ({owner})")
    if info.lenders:
        funding += "; lenders: " + ", ".join(f"{o} {g}" for o, g in info.lenders)
    lines.append(("Funding", funding))
    lines.append(("Plan", headline(plan)))
    if plan.need and not plan.finished:
        lines.append(("", f"need {plan.need:,}, placeable {plan.placeable:,}, fundable {plan.fundable:,}; deficit "
                          f"{plan.deficit:,} (capacity {plan.capacity_deficit:,}, funding {plan.funding_deficit:,})"))
    for line in forecast_lines(plan):
        lines.append(("", line))
    reservation = info.reservation
    if reservation is not None:
        scope = reservation.spec.scope
        text = (f"{reservation.key}, {reservation.status.state or 'Pending'}: {scope.flavor}"
                f"{' in ' + scope.domain if scope.domain else ', any domain'}")
        paying = reservation.spec.paying_envelope
        if paying is not None:
            text += f", paid by {paying.budget}/{paying.envelope}"
        text += f", earliest start {when(reservation.spec.earliest_start, at)}"
        activation = reservation.status.activation
        if activation is not None and activation.seed:
            text += f"; activated with seed {activation.seed}, freed {activation.freed_gpus} GPUs"
        lines.append(("Reservation", text))
    else:
        lines.append(("Reservation", "none"))
    return labelled_lines(lines, wrap=wrap)


def leases_section(info: Explanation) -> Section:
    views = list(info.leases)
    open_views = [v for v in views if v.open]
    closed = [v for v in views if not v.open][:RECENT_CLOSED]
    hidden = len(views) - len(open_views) - len(closed)
    at = info.at
    title = "Leases" + (f" (open, then the {len(closed)} most recent; {hidden} older in -o json)" if hidden else "")
    return Section(
        title,
        open_views + closed,
        (
            Column("LEASE", lambda v: v.lease.metadata.name),
            Column("GROUP", lambda v: v.lease.spec.group),
            Column("ROLE", lambda v: v.lease.spec.slice.role),
            Column("GPUS", lambda v: v.lease.gpus),
            Column("CLASS", lambda v: v.cls),
            Column("PAID-BY", lambda v: "/".join(v.lease.payer) if v.lease.payer else "<unfunded>", wide=True),
            Column("NODES", lambda v: ",".join(sorted({s.rpartition("#")[0] or s for s in v.lease.spec.slice.slots})),
                   wide=True),
            Column("STARTED", lambda v: v.lease.spec.start, show=lambda v: relative(v.lease.spec.start, at)),
            Column("STATUS", lambda v: v.open, show=lambda v: _lease_status(v, at)),
        ),
    )


def _lease_status(view, at) -> str:
    status = view.lease.status
    if view.open:
        return "open" if not status.closed else f"open, closes {relative(status.ended, at)}"
    if not status.closed:
        return f"starts {relative(view.lease.spec.start, at)}"
    return f"closed {relative(status.ended, at)} ({status.closure_reason or 'no reason'})"


def preemptions_section(info: Explanation, draws: Mapping[tuple[str, str], RunDraw] | None = None) -> Section:
    at = info.at
    draws = draws or {}
    return Section(
        "Preemptions",
        info.preemptions,
        (
            Column("RESERVATION", lambda p: p.reservation),
            Column("SEED", lambda p: p.seed),
            Column("AT", lambda p: p.at, show=lambda p: relative(p.at, at)),
            Column("GPUS", lambda p: p.gpus),
            Column("HOW", lambda p: p.closure, wide=True),
            Column("DRAW", lambda p: _draw(draws.get((p.reservation, p.seed)), tickets=False)),
            Column("TICKETS", lambda p: _draw(draws.get((p.reservation, p.seed)), tickets=True), wide=True),
            Column("VERIFIED", lambda p: p.verified, show=_verified),
        ),
    )


def _draw(draw: RunDraw | None, *, tickets: bool) -> str | None:
    """The run's groups in the lottery: ``g1 1/4 taken`` (place 1 of 4), with -o wide their tickets."""
    if draw is None or not draw.tickets:
        return None
    size = draw.conflict_set_size
    if tickets:
        return ", ".join(f"g{t.group} {t.ticket[:16]}…" for t in draw.tickets)
    return ", ".join(f"g{t.group} {t.place}/{size}{' taken' if t.taken else ''}" for t in draw.tickets)


def _verified(p) -> str:
    if p.verified is None:
        return "no record"
    return "verified" if p.verified else "DIFFERS (seeds verify)"


def events_sections(info: Explanation) -> list[Section]:
    if info.events is None:
        return []
    at = info.at
    rows, columns = wrapped(
        list(info.events),
        (
            ("LAST SEEN", lambda e: _event_age(e, at)),
            ("TYPE", lambda e: e.get("type", "")),
            ("REASON", lambda e: e.get("reason", "")),
            ("COUNT", lambda e: e.get("count", 1)),
        ),
        "MESSAGE",
        lambda e: e.get("message", ""),
    )
    return [Section("Events", rows, columns)]


def _event_age(event: Mapping[str, Any], at) -> str:
    text = event.get("at") or ""
    if not text:
        return "<unknown>"
    try:
        return relative(parse_time(str(text)), at)
    except ValueError:
        return str(text)


__all__: Sequence[str] = ("explain_document",)
