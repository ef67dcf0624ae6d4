"""The view of ``budgets usage``: one row per envelope, the aggregate caps, the findings."""

from __future__ import annotations

from ..engine.reports import plain
from ..engine.usage import BudgetUsage
from ..render import Column, Document, Section
from ..text import counted
from . import findings_section, gpu_hours, relative


def usage_document(report: BudgetUsage, namespace: str | None) -> Document:
    at = report.at
    rows = report.envelopes
    used = sum(e.used for e in rows)
    concurrency = sum(e.envelope.concurrency for e in rows if e.window_active)
    summary = [  # two short lines, so that the summary fits 100 columns like the table
        f"Budgets at {at:%Y-%m-%d %H:%M}Z: {counted(len(rows), 'envelope')}"
        + (f", {counted(len(report.findings), 'finding')}" if report.findings else ""),
        f"GPUs in open windows: {used:,} of {concurrency:,} used, {sum(e.headroom for e in rows):,} headroom; "
        f"{sum(e.unfunded for e in rows):,} unfunded",
    ]
    columns = (
        Column("NAMESPACE", lambda e: e.key[0]),
        Column("BUDGET", lambda e: e.key[1]),
        Column("OWNER", lambda e: e.owner, wide=True),
        Column("ENVELOPE", lambda e: e.key[2]),
        Column("FLAVOR", lambda e: e.envelope.flavor),
        Column("WINDOW", lambda e: e.window_active, show=lambda e: _window(e, at), wide=True),
        Column("CONCURRENCY", lambda e: e.envelope.concurrency, wide=True),
        Column("USED", lambda e: e.used, show=lambda e: f"{e.used}/{e.envelope.concurrency}", align="right"),
        Column("HEADROOM", lambda e: e.headroom),
        Column("OWNED", lambda e: e.owned, wide=True),
        Column("SHARED", lambda e: e.shared, wide=True),
        Column("BORROWED", lambda e: e.borrowed, wide=True),
        Column("UNFUNDED", lambda e: e.unfunded),
        Column("SPARE", lambda e: e.spare, wide=True),
        Column("GPU-HOURS", lambda e: round(e.consumed_gpu_hours, 4), show=lambda e: gpu_hours(e.consumed_gpu_hours)),
        Column("MAX-GPU-HOURS", lambda e: e.envelope.max_gpu_hours, show=lambda e: gpu_hours(e.envelope.max_gpu_hours),
               wide=True),
        Column("HOURS-LEFT", lambda e: _round(e.gpu_hours_headroom), show=lambda e: gpu_hours(e.gpu_hours_headroom)),
    )
    aggregates = Section(
        "Aggregate caps",
        report.aggregates,
        (
            Column("NAMESPACE", lambda a: a.budget.metadata.namespace),
            Column("BUDGET", lambda a: a.budget.metadata.name),
            Column("CAP", lambda a: a.name),
            Column("ENVELOPES", lambda a: ",".join(a.envelopes)),
            Column("USED", lambda a: a.used, show=lambda a: f"{a.used}/{a.max_concurrency}", align="right"),
            Column("HEADROOM", lambda a: a.headroom),
        ),
    )
    findings = findings_section(report.findings)
    where = f" in {namespace} namespace" if namespace else ""
    return Document(
        data=plain(report.report),
        rows=rows,
        columns=columns,
        summary=summary if rows else (),
        sections=(aggregates, findings),
        empty=f"No budgets found{where}.",
    )


def _window(usage, at) -> str:
    envelope = usage.envelope
    if usage.window_active:
        return f"ends {relative(envelope.end, at)}"
    if envelope.start > at:
        return f"opens {relative(envelope.start, at)}"
    return f"closed {relative(envelope.end, at)}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
