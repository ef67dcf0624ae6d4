"""The view of ``leases audit``: GPU-hours per key over the window, shares, averages, peaks; findings."""

from __future__ import annotations

from ..engine.audit import AuditReport, AuditRow
from ..engine.reports import plain
from ..render import Column, Document
from ..text import counted
from ..timeutil import rfc3339
from . import findings_section, gpu_hours


def audit_document(report: AuditReport, namespace: str | None) -> Document:
    total = report.total_gpu_hours
    span_hours = max((min(report.until, report.at) - report.since).total_seconds() / 3600.0, 0.0)
    if report.hours_only:
        found = " (peaks and findings not computed: --hours-only)"
    else:
        found = f", {counted(len(report.findings), 'finding')}" if report.findings else ", no findings"
    summary = [
        f"Leases {report.since:%Y-%m-%d %H:%M}Z to {report.until:%Y-%m-%d %H:%M}Z: {counted(report.total_leases, 'lease')}, "
        f"{gpu_hours(total)} GPU-hours{found}"
    ]
    columns = [Column(dim.upper(), _key_part(position)) for position, dim in enumerate(report.by)]
    columns += [
        Column("GPU-HOURS", lambda r: round(r.gpu_hours, 4), show=lambda r: gpu_hours(r.gpu_hours)),
        Column("SHARE", lambda r: round(_share(r, total), 4), show=lambda r: f"{_share(r, total):.1%}", wide=True),
        Column("AVG-GPUS", lambda r: round(_average(r, span_hours), 2), show=lambda r: f"{_average(r, span_hours):,.1f}",
               wide=True),
        Column("LEASES", lambda r: r.leases, show=lambda r: f"{r.leases:,}"),
    ]
    if not report.hours_only:
        columns.append(Column("PEAK-GPUS", lambda r: r.peak_gpus, show=lambda r: f"{r.peak_gpus:,}"))
    where = f" in {namespace} namespace" if namespace else ""
    doc = Document(
        data=plain(report.report),
        rows=report.rows,
        columns=columns,
        summary=summary if report.rows or report.findings else (),
        sections=() if report.hours_only else (findings_section(report.findings),),
        empty=f"No leases found{where} between {rfc3339(report.since)} and {rfc3339(report.until)}.",
    )
    doc.notes.extend(report.notes)
    return doc


def _key_part(position: int):
    return lambda row: row.key[position]


def _share(row: AuditRow, total: float) -> float:
    return row.gpu_hours / total if total else 0.0


def _average(row: AuditRow, span_hours: float) -> float:
    """GPUs held on average over the window."""
    return row.gpu_hours / span_hours if span_hours else 0.0
