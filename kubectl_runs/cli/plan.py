"""``kubectl runs plan RUN``: why a run is not starting, and what would fix it (API.md §3 Plan, §5)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click

from ..engine.forecast import REPORTED, UNKNOWN, WINDOW_ALIGNED
from ..engine.plan import Plan, plan_run
from ..engine.reports import plain
from ..errors import UserError
from ..model import Run, Snapshot
from ..render import OBJECT_FORMATS, TABLE, TABLE_WIDTH, Column, Document, Section
from .completion import complete_runs
from .options import GlobalOptions, global_options


@click.command("plan")
@click.argument("run_name", metavar="RUN", shell_complete=complete_runs)
@global_options
@click.pass_context
def plan(ctx: click.Context, run_name: str) -> None:
    """Why RUN is not starting, and what would fix it: the GPUs it needs, how many can be placed (free slots
    on schedulable nodes of its flavor, in whole groups per fabric domain) and funded (headroom of its own,
    its ancestors', its siblings' and its sponsors' envelopes), the deficits, the reasons, the remedies in the
    order the resolver applies them, and the earliest start that reported completion times and budget
    windows support.

    RUN is NAME or NAMESPACE/NAME; NAME is looked up in the namespace of -n, else of the kubeconfig context,
    else default; with -A in every namespace (it must be unique there).

    \b
    Examples:
      kubectl runs plan pretrain-32 -n rai-sys
      kubectl runs plan rai-sys/pretrain-32 -o json
      kubectl runs plan mi-sweep -n ai-platform --snapshot fleet.yaml --at 2025-11-20T12:00:00Z
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(OBJECT_FORMATS)
    opts.object_ref("run", run_name)  # a malformed name fails before anything is loaded
    snapshot = opts.load(None)  # every namespace: ancestors, siblings and sponsors live elsewhere
    run = opts.find("run", run_name, snapshot.runs_by_key)
    at = opts.evaluation_time(snapshot)
    result = plan_run(snapshot, run, at)
    opts.print(plan_document(result, fmt), fmt)


def find_run(snapshot: Snapshot, namespace: str, name: str) -> Run:
    run = snapshot.runs_by_key.get(f"{namespace}/{name}")
    if run is None:
        raise UserError(f"run {namespace}/{name} not found")
    return run


# --- the document -----------------------------------------------------------------------------------------------


def plan_document(result: Plan, fmt: str) -> Document:
    wrap = fmt == TABLE
    lines = [result.headline(), *forecast_lines(result)]
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
            groups = -(-result.planned_width // group)
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
    by_relation: dict[str, int] = {}
    for source in result.funding.sources:
        by_relation[source.relation] = by_relation.get(source.relation, 0) + source.usable
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
    exact = f"{start:%Y-%m-%d %H:%M} UTC (in {span(start - result.at)})"
    if outlook.confidence == WINDOW_ALIGNED:
        return [f"Earliest start: {exact}, when a budget window opens."]
    if outlook.confidence == REPORTED:
        return [f"Earliest start: {exact}, by reported completion times."]
    return [f"Earliest start: {exact} ({outlook.confidence})."]


def span(delta: Any) -> str:
    import humanize

    return humanize.precisedelta(delta, minimum_unit="minutes", format="%0.0f")


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


def when_text(then: datetime | None, at: datetime) -> str:
    if then is None:
        return "-"
    if then >= at:
        return f"{then:%Y-%m-%d %H:%M} UTC (in {span(then - at)})"
    return f"{then:%Y-%m-%d %H:%M} UTC ({span(at - then)} ago)"
