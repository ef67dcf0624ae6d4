"""The view of ``leases audit --every``: one row per key with its GPU-hours across the periods as a sparkline,
the periods with the fleet's utilization, the findings; CSV is flat, one row per period and key."""

from __future__ import annotations

from ..engine.audit_periods import PeriodsReport
from ..engine.reports import plain
from ..render import Column, Document, Section
from ..text import counted
from . import findings_section, gpu_hours

BARS = "▁▂▃▄▅▆▇█"
NONE = "·"  # a period in which the key used nothing


def sparkline(values: list[float]) -> str:
    """One character per period, scaled to the largest value: ``·`` for nothing, ``▁`` … ``█`` for the rest."""
    top = max(values, default=0.0)
    if top <= 0:
        return NONE * len(values)
    return "".join(NONE if v <= 0 else BARS[min(len(BARS) - 1, int(v / top * len(BARS) - 1e-9))] for v in values)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def periods_document(result: PeriodsReport, namespace: str | None) -> Document:
    whole = result.audit
    report = result.report
    by = whole.by
    per_key = [{row.key: row.gpu_seconds for row in period.rows} for period in result.periods]
    trend = {row.key: sparkline([seen.get(row.key, 0.0) for seen in per_key]) for row in whole.rows}
    total = whole.total_gpu_hours
    columns = [Column(dim.upper(), _key_part(position)) for position, dim in enumerate(by)]
    columns += [
        Column("GPU-HOURS", lambda r: round(r.gpu_hours, 4), show=lambda r: gpu_hours(r.gpu_hours)),
        Column("SHARE", lambda r: round(r.gpu_hours / total, 4) if total else 0.0,
               show=lambda r: f"{r.gpu_hours / total:.1%}" if total else "-"),
        Column(f"BY-{result.every.upper()}", lambda r: trend[r.key]),
        Column("LEASES", lambda r: r.leases, show=lambda r: f"{r.leases:,}", wide=True),
        Column("PEAK-GPUS", lambda r: r.peak_gpus, show=lambda r: f"{r.peak_gpus:,}"),
    ]
    period_columns = (
        Column("PERIOD", lambda p: p.period),
        Column("GPU-HOURS", lambda p: p.gpu_hours, show=lambda p: gpu_hours(p.gpu_hours)),
        Column("LEASES", lambda p: p.leases, show=lambda p: f"{p.leases:,}"),
        Column("CAPACITY-GPU-HOURS", lambda p: p.capacity_gpu_hours, show=lambda p: gpu_hours(p.capacity_gpu_hours)),
        Column("UTILIZATION", lambda p: p.utilization, show=lambda p: _percent(p.utilization)),
    )
    flat_columns = [Column("PERIOD", lambda r: r.period)]
    flat_columns += [Column(dim.upper(), _field(dim)) for dim in by]
    flat_columns += [
        Column("GPU-HOURS", lambda r: r.gpu_hours),
        Column("LEASES", lambda r: r.leases),
        Column("PEAK-GPUS", lambda r: r.peak_gpus),
        Column("SHARE", lambda r: r.share),
        Column("UTILIZATION", lambda r: r.utilization),
    ]
    span = f"{whole.since:%Y-%m-%d %H:%M}Z to {whole.until:%Y-%m-%d %H:%M}Z"
    summary = [
        f"Leases {span} by {result.every} ({counted(len(result.periods), 'period')}): "
        f"{counted(whole.total_leases, 'lease')}, {gpu_hours(total)} GPU-hours"
        + (f", {counted(len(whole.findings), 'finding')}" if whole.findings else ", no findings")
    ]
    where = f" in {namespace} namespace" if namespace else ""
    doc = Document(
        data=plain(report),
        rows=whole.rows,
        columns=columns,
        summary=summary if whole.rows or whole.findings else (),
        sections=(Section("Periods", report.periods if whole.rows else [], period_columns),
                  findings_section(whole.findings)),
        empty=f"No leases found{where} between {span}.",
        flat=Section("", report.rows, flat_columns),
    )
    doc.notes.extend(whole.notes)
    return doc


def _key_part(position: int):
    return lambda row: row.key[position]


def _field(name: str):
    return lambda row: getattr(row, name)
