"""``kubectl runs leases audit``: GPU-hours per owner/envelope/flavor/run/node over a window, peaks, and the
findings that say whether the ledger was honest (API.md §5)."""

from __future__ import annotations

import gc
from datetime import datetime, timedelta
from pathlib import Path

import click

from ..engine.audit import DIMENSIONS, audit
from ..engine.audit_periods import audit_periods
from ..engine.capacity import fleet_gpus
from ..errors import ExitCode, UsageError, UserError
from ..render import REPORT_FORMATS
from ..timeutil import parse_time, rfc3339
from ..views.archive import archive_document, verify_document
from ..views.audit import audit_document
from ..views.periods import periods_document
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
@click.option("--every", type=click.Choice(("day", "week", "month")), metavar="PERIOD",
              help="One row per period (day, week or month, UTC) and key, leases clipped to each period, with each "
              "key's share and the fleet's utilization; the table draws each key's GPU-hours across the periods.")
@click.option("--archive", "archives", multiple=True, metavar="DIR",
              help="Also audit the leases of this lease archive (leases archive --to DIR); repeatable. A lease "
              "both live and archived counts once.")
@global_options
@click.pass_context
def audit_command(ctx: click.Context, since: str | None, until: str | None, by: tuple[str, ...],
                  strict: bool, every: str | None, archives: tuple[str, ...]) -> int:
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
      kubectl runs leases audit --archive /data/lease-archive --since 2025-01-01 --until 2026-01-01
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(REPORT_FORMATS)
    dimensions = by or ("owner",)
    if len(set(dimensions)) != len(dimensions):
        raise UsageError(f"--by: each dimension at most once (got {', '.join(dimensions)})")
    namespace = opts.report_namespace()
    opened = []
    if archives:  # checked before anything is read: a damaged archive fails with nothing counted
        from ..archive import reader

        opened = [reader.open_archive(directory) for directory in archives]
    # Read every namespace and narrow the report afterwards: an envelope in another namespace (a lender) is then
    # still known to the ledger, live as from a snapshot.
    snapshot = opts.load(None)
    at = opts.evaluation_time(snapshot)
    end = _time(until, at, "--until") if until else at
    start = _time(since, at, "--since") if since else end - DEFAULT_SPAN
    if start >= end:
        raise UserError(f"--since ({rfc3339(start)}) must be before --until ({rfc3339(end)})")
    # The engine builds lists, tuples and dicts for every lease in the window (hundreds of thousands over a month
    # of history), none of them in a reference cycle: the cyclic GC would only rescan them (about a fifth of the
    # engine's time on the 1M-lease history). The command pauses it while the report is built; the pure engine
    # leaves the process's GC alone.
    paused = gc.isenabled()
    gc.disable()
    try:
        if opened:
            snapshot = reader.with_archived(snapshot, opened, start, min(end, at))
        if every is not None:
            periods = audit_periods(snapshot, at, since=start, until=end, every=every, by=dimensions,
                                    namespace=namespace, capacity=_recorded_capacity(opened),
                                    present=fleet_gpus(snapshot))
            report = periods.audit
        else:
            report = audit(snapshot, at, since=start, until=end, by=dimensions, namespace=namespace)
    finally:
        if paused:
            gc.enable()
    opts.print(periods_document(periods, namespace) if every is not None else audit_document(report, namespace), fmt)
    if strict and report.findings:
        return int(ExitCode.FINDINGS)
    return int(ExitCode.OK)


def _recorded_capacity(archives: list) -> list[tuple[datetime, dict[str, int]]]:
    """The fleet's GPUs per flavor as each archive run recorded them (docs/archive.md: capacity)."""
    return [(run.archived_at, run.gpus) for archive in archives for run in archive.manifest.runs]


def _time(text: str, at: datetime, flag: str) -> datetime:
    try:
        return parse_time(text, now=at, flag=flag)
    except ValueError as exc:
        raise UserError(str(exc)) from None


@leases.command("archive")
@click.option("--to", "to", metavar="DIR",
              help="Write the closed leases into the archive at DIR (created when missing): Parquet files by month "
              "of start, with a manifest. Leases already there are not written again.")
@click.option("--before", metavar="TIME",
              help="Only leases that ended before TIME: RFC 3339, a date, or a duration back from --at (30d).")
@click.option("--prune", is_flag=True,
              help="Then delete from the cluster the closed leases the archive holds (each re-read from the archive "
              "and compared first; never an open lease). Needs delete on gpuleases (deploy/overlays/lease-archive).")
@click.option("--verify", "verify", metavar="DIR",
              help="Check the archive at DIR: every file the manifest lists, its size, checksum, schema version, "
              "row count and time range. Exit code 1 when anything differs.")
@global_options
@click.pass_context
def archive_command(ctx: click.Context, to: str | None, before: str | None, prune: bool,
                    verify: str | None) -> int:
    """Keep closed leases in a columnar archive (Parquet) that audits read with --archive.

    Reads leases from the cluster or --snapshot; only closed leases are archived, each once (keyed by
    namespace, name and uid). A run that is killed leaves the archive as it was. See docs/archive.md.

    \b
    Examples:
      kubectl runs leases archive --to /data/lease-archive
      kubectl runs leases archive --to /data/lease-archive --before 30d --snapshot fleet.json
      kubectl runs leases archive --verify /data/lease-archive
      kubectl runs leases audit --archive /data/lease-archive --since 2025-01-01 --until 2026-01-01
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(REPORT_FORMATS)
    if (to is None) == (verify is None):
        raise UsageError("give exactly one of --to DIR (write) and --verify DIR (check)")
    if verify is not None:
        if before is not None or prune:
            raise UsageError(f"{'--before' if before is not None else '--prune'} goes with --to, not --verify")
        return _verify(opts, verify, fmt)
    if prune and opts.snapshots:
        raise UsageError("--prune deletes leases from the cluster: it cannot be used with --snapshot")
    from ..archive import store, summary

    snapshot = opts.load(opts.report_namespace())
    at = opts.evaluation_time(snapshot)
    limit = _time(before, at, "--before") if before else None
    gpus = fleet_gpus(snapshot)
    paused = gc.isenabled()
    gc.disable()
    try:
        result = store.archive(Path(to), snapshot.leases, archived_at=at, before=limit, gpus=gpus)
    finally:
        if paused:
            gc.enable()
    pruned, left = 0, []
    if prune:
        pruned, left = _prune(opts, result.directory, snapshot.leases, limit)
    opts.print(archive_document(summary.archive_report(result, pruned, left)), fmt)
    return int(ExitCode.OK)


def _prune(opts: GlobalOptions, directory: Path, leases, before: datetime | None) -> tuple[int, list[str]]:
    """Delete the closed leases (ended before ``before``) that the archive, re-read now, holds unchanged."""
    from ..archive import prune, reader, store
    from ..sources.cluster import delete_leases

    candidates = [x for x in leases if x.status.closed
                  and (before is None or (x.status.ended or x.spec.start) < before)]
    victims = prune.prunable(reader.open_archive(directory), candidates)
    deleted, gone, changed = delete_leases(opts.source(opts.report_namespace()), victims,
                                           after_each=lambda: store.crash_point("deleted"))
    return deleted, gone + changed


def _verify(opts: GlobalOptions, directory: str, fmt: str) -> int:
    from ..archive import reader, summary

    report = summary.verify_report(reader.verify(directory))
    opts.print(verify_document(report), fmt)
    if report.problems:
        more = len(report.problems) - 1
        click.echo(f"error: {report.problems[0]}" + (f" (and {more} more problems)" if more else ""), err=True)
        return int(ExitCode.FAILED)
    return int(ExitCode.OK)
