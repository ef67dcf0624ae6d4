"""One report over several clusters: each cluster's Document, merged (pure; cli/clusters.py reads the clusters).

Nothing is computed across clusters: each cluster's report is its own arithmetic, as it would be printed alone.
The merge only puts them side by side — a CLUSTER column first in every table, one headline per cluster, and a
total line that says it is a plain sum of the clusters' figures. A cluster that could not be read is named in
the headlines (and in ``errors`` of the JSON), never left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..render import Column, Document, Section
from ..text import counted


@dataclass(frozen=True)
class ClusterResult:
    """One cluster's answer: its Document, or the one-line reason it could not be read."""

    context: str
    server: str | None
    document: Document | None = None
    error: str | None = None


@dataclass(frozen=True)
class Tagged:
    """A row of one cluster's table, with that cluster's columns (their closures hold its own figures)."""

    context: str
    row: Any
    columns: tuple[Column, ...]


def clusters_data(results: Sequence[ClusterResult]) -> dict:
    """The JSON document: ``clusters: [{context, server, report}]`` and ``errors: [{context, message}]``."""
    return {
        "clusters": [{"context": r.context, "server": r.server, "report": r.document.data}
                     for r in results if r.document is not None],
        "errors": [{"context": r.context, "message": r.error} for r in results if r.document is None],
    }


def _tagged_columns(columns: Sequence[Column]) -> list[Column]:
    """CLUSTER, then each column of the report, reading the row's own cluster's column."""
    out = [Column("CLUSTER", lambda t: t.context)]
    for index, column in enumerate(columns):
        out.append(Column(
            column.header,
            value=lambda t, i=index: t.columns[i].value(t.row),
            show=lambda t, i=index: (t.columns[i].show or t.columns[i].value)(t.row),
            wide=column.wide, align=column.align, prose=column.prose,
        ))
    return out


def _tag(context: str, rows: Sequence[Any], columns: Sequence[Column]) -> list[Tagged]:
    frozen = tuple(columns)
    return [Tagged(context, row, frozen) for row in rows]


def _check_same(first: Sequence[Column], other: Sequence[Column], what: str) -> None:
    if [c.header for c in first] != [c.header for c in other]:  # the same command and flags: never differs
        raise ValueError(f"{what}: the clusters' tables have different columns")


def merge(results: Sequence[ClusterResult], total: Callable[[list[Any]], str] | None = None) -> Document:
    """The Document of a report over several clusters, in the order the clusters were asked for."""
    read = [r for r in results if r.document is not None]
    docs = [r.document for r in read]
    data = clusters_data(results)
    if not docs:
        return Document(data=data)
    first = docs[0]
    rows: list[Tagged] = []
    for result in read:
        _check_same(first.columns, result.document.columns, "rows")
        rows += _tag(result.context, result.document.rows, result.document.columns)
    sections = _merged_sections(read)
    flat = None
    if any(d.flat is not None for d in docs):
        flat_of = [(r, r.document.flat or Section("", r.document.rows, r.document.columns)) for r in read]
        flat_rows = [t for r, f in flat_of for t in _tag(r.context, f.rows, f.columns)]
        flat = Section("", flat_rows, _tagged_columns(flat_of[0][1].columns))
    notes = [f"context {r.context}: {note}" for r in read for note in r.document.notes]
    return Document(
        data=data,
        rows=rows,
        columns=_tagged_columns(first.columns) if first.columns else (),
        summary=headlines(results, total),
        sections=sections,
        empty=_empty(docs),
        notes=notes,
        flat=flat,
    )


def _merged_sections(read: Sequence[ClusterResult]) -> list[Section]:
    """Each titled section once, its rows from every cluster (in cluster order) behind a CLUSTER column."""
    order: list[str] = []
    parts: dict[str, list[tuple[str, Section]]] = {}
    for result in read:
        for section in result.document.sections:
            if section.title not in parts:
                order.append(section.title)
                parts[section.title] = []
            parts[section.title].append((result.context, section))
    out = []
    for title in order:
        pieces = parts[title]
        rows = [t for context, section in pieces for t in _tag(context, section.rows, section.columns)]
        out.append(Section(title, rows, _tagged_columns(pieces[0][1].columns)))
    return out


def _empty(docs: Sequence[Document]) -> str | None:
    said = next((d.empty for d in docs if d.empty), None)
    if said is None:
        return None
    return f"{said.rstrip('.')} in any of the {len(docs)} clusters read."


def headlines(results: Sequence[ClusterResult], total: Callable[[list[Any]], str] | None) -> list[str]:
    """One headline per cluster (its own summary lines, the first after its name), then the total."""
    lines: list[str] = []
    for result in results:
        where = f"{result.context} ({result.server})" if result.server else result.context
        if result.document is None:
            lines.append(f"Cluster {where}: not read: {result.error}")
            continue
        summary = list(result.document.summary) or [result.document.empty or "nothing to report"]
        lines.append(f"Cluster {where}: {summary[0]}")
        lines += [f"  {line}" for line in summary[1:]]
    read = [r.document.data for r in results if r.document is not None]
    failed = sum(r.document is None for r in results)
    if total is not None and read:
        unread = f"; {counted(failed, 'cluster')} not read" if failed else ""
        lines.append(f"Total of {counted(len(read), 'cluster')} (sums of the figures above; each cluster's "
                     f"arithmetic is its own{unread}):")
        lines.append(f"  {total(read)}")
    return lines


# --- the total line of each report: sums of each cluster's JSON figures -------------------------------------


def _sum(items: Sequence[dict], key: str) -> int | float:
    return sum(item.get(key) or 0 for item in items)


def budgets_total(reports: list[dict]) -> str:
    envelopes = [e for r in reports for e in r.get("envelopes") or []]
    findings = sum(len(r.get("findings") or []) for r in reports)
    active = [e for e in envelopes if e.get("windowActive")]
    return (f"{counted(len(envelopes), 'envelope')}" + (f", {counted(findings, 'finding')}" if findings else "")
            + f"; GPUs in open windows: {_sum(envelopes, 'usedGPUs'):,} of {_sum(active, 'concurrency'):,} used, "
            f"{_sum(envelopes, 'headroomGPUs'):,} headroom; {_sum(envelopes, 'unfundedGPUs'):,} unfunded")


def audit_total(reports: list[dict]) -> str:
    totals = [r.get("totals") or {} for r in reports]
    findings = sum(len(r.get("findings") or []) for r in reports)
    hours = sum(t.get("gpuHours") or 0 for t in totals)
    return (f"{counted(sum(t.get('leases') or 0 for t in totals), 'lease')}, {hours:,.1f} GPU-hours"
            + (f", {counted(findings, 'finding')}" if findings else ""))


def queues_total(reports: list[dict]) -> str:
    rows = [q for r in reports for q in r.get("clusterQueues") or []]
    queues = sum(len({q.get("clusterQueue") for q in r.get("clusterQueues") or []}) for r in reports)
    return (f"{counted(queues, 'queue')}, {counted(len(rows), 'flavor row')}; GPUs: {_sum(rows, 'reserved'):,} "
            f"reserved of {_sum(rows, 'nominalQuota'):,} nominal; {_sum(rows, 'pending'):,} pending; "
            f"{_sum(rows, 'available'):,} available now")


def pending_total(reports: list[dict]) -> str:
    gpus = [r.get("gpus") or {} for r in reports]
    rows = [row for r in reports for row in r.get("rows") or []]
    return (f"GPUs: {_sum(gpus, 'total'):,} in all; {_sum(gpus, 'heldByLeases'):,} held by leases, "
            f"{_sum(gpus, 'heldByPodsOutsideLeases'):,} by pods outside leases; {_sum(gpus, 'free'):,} free; "
            f"pending: {counted(len(rows), 'consumer')} asking {_sum(rows, 'gpus'):,} GPUs")
