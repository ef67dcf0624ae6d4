"""``kubectl runs leases audit``: GPU-hours per owner/envelope/flavor/run/node over a window, peaks, and the
findings that say whether the ledger was honest (API.md §5)."""

from __future__ import annotations

from datetime import datetime, timedelta

import click

from ..engine.audit import DIMENSIONS, AuditReport, AuditRow, audit
from ..engine.reports import plain
from ..errors import ExitCode, UsageError, UserError
from ..render import REPORT_FORMATS, Column, Document, findings_section, gpu_hours
from ..text import counted
from ..timeutil import parse_time, rfc3339
from .options import GlobalOptions, global_options

DEFAULT_SPAN = timedelta(days=30)

@click.group("leases")
@global_options
def leases() -> None:
    """Leases: who used which GPUs, and was the ledger honest."""


@leases.command("audit")
@click.option("--since", metavar="TIME",
              help="Start of the window: RFC 3339, a date, or a duration back from --at (7d, 24h). "
              "Default: --until minus 30 days.")
@click.option("--until", metavar="TIME",
              help="End of the window (excluded), same forms. Default: the evaluation time (--at).")
@click.option("--by", "by", multiple=True, type=click.Choice(DIMENSIONS), metavar="DIMENSION",
              help="Break GPU-hours down by owner (default), envelope, flavor, run or node; repeat the flag "
              "for a two-level breakdown (--by owner --by flavor).")
@click.option("--strict", is_flag=True, help="Exit with code 3 when there is any finding.")
@global_options
@click.pass_context
def audit_command(ctx: click.Context, since: str | None, until: str | None, by: tuple[str, ...],
                  strict: bool) -> int:
    """Who used which GPUs over a window, and was the ledger honest.

    GPU-hours, leases and the peak of GPUs held at one instant, per key, over [--since, --until); and the
    findings: DoubleBooked (one slot in two open leases at once), UnknownNode, UnknownRun, UnknownEnvelope,
    ACLViolation, Overdraft, UnboundNamespace.

    \b
    Examples:
      kubectl runs leases audit                                   # the last 30 days, by owner
      kubectl runs leases audit --since 7d --by envelope --by flavor -o wide
      kubectl runs leases audit --since 2025-11-01 --until 2025-12-01 --by run -o csv > november.csv
      kubectl runs leases audit --strict                          # exit code 3 on any finding
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(REPORT_FORMATS)
    dimensions = by or ("owner",)
    if len(set(dimensions)) != len(dimensions):
        raise UsageError(f"--by: each dimension at most once (got {', '.join(dimensions)})")
    namespace = opts.report_namespace()
    # Read every namespace and narrow the report afterwards: an envelope in another namespace (a lender) is then
    # still known to the ledger, live as from a snapshot.
    snapshot = opts.load(None)
    at = opts.evaluation_time(snapshot)
    end = _time(until, at, "--until") if until else at
    start = _time(since, at, "--since") if since else end - DEFAULT_SPAN
    if start >= end:
        raise UserError(f"--since ({rfc3339(start)}) must be before --until ({rfc3339(end)})")
    report = audit(snapshot, at, since=start, until=end, by=dimensions, namespace=namespace)
    opts.print(audit_document(report, namespace), fmt)
    if strict and report.findings:
        return int(ExitCode.FINDINGS)
    return int(ExitCode.OK)


def _time(text: str, at: datetime, flag: str) -> datetime:
    try:
        return parse_time(text, now=at, flag=flag)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def audit_document(report: AuditReport, namespace: str | None) -> Document:
    total = report.total_gpu_hours
    span_hours = max((min(report.until, report.at) - report.since).total_seconds() / 3600.0, 0.0)
    summary = [
        f"Leases {report.since:%Y-%m-%d %H:%M}Z to {report.until:%Y-%m-%d %H:%M}Z: {counted(report.total_leases, 'lease')}, "
        f"{gpu_hours(total)} GPU-hours"
        + (f", {counted(len(report.findings), 'finding')}" if report.findings else ", no findings")
    ]
    columns = [Column(dim.upper(), _key_part(position)) for position, dim in enumerate(report.by)]
    columns += [
        Column("GPU-HOURS", lambda r: round(r.gpu_hours, 4), show=lambda r: gpu_hours(r.gpu_hours)),
        Column("SHARE", lambda r: round(_share(r, total), 4), show=lambda r: f"{_share(r, total):.1%}", wide=True),
        Column("AVG-GPUS", lambda r: round(_average(r, span_hours), 2), show=lambda r: f"{_average(r, span_hours):,.1f}",
               wide=True),
        Column("LEASES", lambda r: r.leases, show=lambda r: f"{r.leases:,}"),
        Column("PEAK-GPUS", lambda r: r.peak_gpus, show=lambda r: f"{r.peak_gpus:,}"),
    ]
    where = f" in {namespace} namespace" if namespace else ""
    doc = Document(
        data=plain(report.report),
        rows=report.rows,
        columns=columns,
        summary=summary if report.rows or report.findings else (),
        sections=(findings_section(report.findings),),
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
