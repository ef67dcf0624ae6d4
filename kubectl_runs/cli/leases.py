"""``kubectl runs leases audit``: GPU-hours per owner/envelope/flavor/run/node over a window, peaks, and the
findings that say whether the ledger was honest (API.md §5)."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from .options import LOADED, Command, GlobalOptions, global_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document

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
@click.option("--hours-only", is_flag=True,
              help="Only GPU-hours and leases per key: no peaks, no findings (not with --strict or --every). Over "
              "an archive this is one pass over a few columns: years of history in about a second.")
@global_options
@click.pass_context
def audit_command(ctx: click.Context, since: str | None, until: str | None, by: tuple[str, ...],
                  strict: bool, every: str | None, archives: tuple[str, ...], hours_only: bool) -> int:
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
      kubectl runs leases audit --archive /data/lease-archive --since 2023-01-01 --hours-only -o csv
    """
    return AuditOptions(since=since, until=until, by=by or ("owner",), strict=strict, every=every,
                        archives=archives, hours_only=hours_only).run(ctx)


@dataclass
class AuditOptions(Command):
    since: str | None = None
    until: str | None = None
    by: tuple[str, ...] = ("owner",)
    strict: bool = False
    every: str | None = None
    archives: tuple[str, ...] = ()
    hours_only: bool = False
    formats = REPORT_FORMATS
    clusters = "audit"  # also over several clusters (cli/clusters.py)
    findings: int = 0
    opened: list = field(default_factory=list)

    def complete(self, opts: GlobalOptions) -> None:
        super().complete(opts)
        # Every namespace is read and the report narrowed afterwards: an envelope in another namespace (a
        # lender) is then still known to the ledger, live as from a snapshot.
        self.namespace = opts.report_namespace()

    def validate(self) -> None:
        if len(set(self.by)) != len(self.by):
            raise UsageError(f"--by: each dimension at most once (got {', '.join(self.by)})")
        if self.hours_only and self.strict:
            raise UsageError("--hours-only leaves the findings out: it cannot be used with --strict")
        if self.hours_only and self.every is not None:
            raise UsageError("--hours-only is the whole window's GPU-hours: it cannot be used with --every")
        if self.archives:  # checked before anything is read: a damaged archive fails with nothing counted
            from ..archive import reader

            self.opened = [reader.open_archive(directory) for directory in self.archives]

    def load(self) -> Snapshot:
        # lean: a JSON snapshot's GPULeases keep only the name and namespace of their metadata, which is all the
        # audit reads of it; with --archive a live lease is matched to its archived row by its uid, read in full.
        return self.opts.load(None, lean=not self.archives)

    def evaluate(self, snapshot: Snapshot) -> Document:
        at = self.opts.evaluation_time(snapshot)
        end = _time(self.until, at, "--until") if self.until else at
        start = _time(self.since, at, "--since") if self.since else end - DEFAULT_SPAN
        if start >= end:
            raise UserError(f"--since ({rfc3339(start)}) must be before --until ({rfc3339(end)})")
        if self.every is not None:
            count = period_count(start, end, self.every)
            if count > MAX_PERIODS:
                raise UsageError(f"--every {self.every}: {rfc3339(start)} to {rfc3339(end)} is {count:,} periods, more "
                                 f"than the {MAX_PERIODS:,} a report may have: narrow --since/--until or use a longer "
                                 "period")
        # The engine builds lists, tuples and dicts for every lease in the window (hundreds of thousands over a
        # month of history), none of them in a reference cycle: the cyclic GC would only rescan them (about a
        # fifth of the engine's time on the 1M-lease history). The command pauses it while the report is built;
        # the pure engine leaves the process's GC alone.
        paused = gc.isenabled()
        gc.disable()
        try:
            if self.opened:
                return self._archived(snapshot, at, start, end)
            if self.every is not None:
                periods = audit_periods(snapshot, at, since=start, until=end, every=self.every, by=self.by,
                                        namespace=self.namespace, capacity=_recorded_capacity(self.opened),
                                        present=fleet_gpus(snapshot), read=self.opts.wall_clock)
                self.findings = len(periods.audit.findings)
                return periods_document(periods, self.namespace)
            report = audit(snapshot, at, since=start, until=end, by=self.by, namespace=self.namespace,
                           hours_only=self.hours_only, read=self.opts.wall_clock)
        finally:
            if paused:
                gc.enable()
        self.findings = len(report.findings)
        return audit_document(report, self.namespace)

    def _archived(self, snapshot: Snapshot, at: datetime, start: datetime, end: datetime) -> Document:
        """The audit with ``--archive``: rows, totals, peaks and periods in DuckDB (archive/audit.py)."""
        from ..archive import audit as archived

        if self.every is not None:
            periods = archived.audit_periods(snapshot, self.opened, at, since=start, until=end, every=self.every,
                                             by=self.by, namespace=self.namespace,
                                             capacity=_recorded_capacity(self.opened), present=fleet_gpus(snapshot),
                                             read=self.opts.wall_clock)
            self.findings = len(periods.audit.findings)
            return periods_document(periods, self.namespace)
        report = archived.audit(snapshot, self.opened, at, since=start, until=end, by=self.by,
                                namespace=self.namespace, hours_only=self.hours_only, read=self.opts.wall_clock)
        self.findings = len(report.findings)
        return audit_document(report, self.namespace)

    def exit_code(self) -> int:
        return int(ExitCode.FINDINGS) if self.strict and self.findings else int(ExitCode.OK)


MAX_PERIODS = 10_000  # --every: rows per key (27 years of days, 190 of weeks, 833 of months)


def period_count(since: datetime, until: datetime, every: str) -> int:
    """How many calendar periods (UTC) meet ``[since, until)``: as many as engine/audit_periods.boundaries makes,
    counted without making them."""
    since, until = since.astimezone(UTC), until.astimezone(UTC)
    if every == "month":
        months = (until.year - since.year) * 12 + until.month - since.month
        return months + (until > until.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    first = since.replace(hour=0, minute=0, second=0, microsecond=0)
    length = timedelta(days=1)
    if every == "week":
        first -= timedelta(days=first.weekday())
        length = timedelta(days=7)
    return -((first - until) // length)  # ceil


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
    if verify is not None:
        return ArchiveVerifyOptions(verify, before=before, prune=prune, to=to).run(ctx)
    return ArchiveOptions(to, before=before, prune=prune).run(ctx)


@dataclass
class ArchiveOptions(Command):
    """``leases archive --to DIR [--before TIME] [--prune]``."""

    to: str | None
    before: str | None = None
    prune: bool = False
    formats = REPORT_FORMATS

    def validate(self) -> None:
        if self.to is None:
            raise UsageError("give exactly one of --to DIR (write) and --verify DIR (check)")
        if self.prune and self.opts.snapshots:
            raise UsageError("--prune deletes leases from the cluster: it cannot be used with --snapshot")

    def run(self, ctx: click.Context) -> int:
        """From one JSON snapshot file, DuckDB reads the leases from the file while the loader checks them
        (archive/snapshot_rows.py); from the cluster, or from other files, they are loaded as by every command."""
        self.complete(GlobalOptions.of(ctx))
        self.validate()
        if len(self.opts.snapshots) != 1:
            return super().run(ctx)
        from ..archive import snapshot_rows

        read = snapshot_rows.read(self.opts.snapshots[0])
        if read is None:
            return super().run(ctx)
        try:
            snapshot = read.snapshot.in_namespace(self.opts.report_namespace())
            self.opts.announce(snapshot)
            LOADED[:] = [snapshot]  # freed when the process exits, as GlobalOptions.load keeps it
            document = self.evaluate(snapshot) if read.con is None else self._archive_rows(read, snapshot)
        finally:
            read.close()
        self.opts.print(document, self.fmt)
        return self.exit_code()

    def load(self) -> Snapshot:
        return self.opts.load(self.opts.report_namespace())

    def _archive_rows(self, read, snapshot: Snapshot) -> Document:
        """``evaluate`` for leases DuckDB holds already (``read.con``): the same archive, the same report."""
        from ..archive import store, summary

        at, limit, gpus = self._when(snapshot)
        open_, later = read.stage(self.opts.report_namespace(), limit)
        result = store.archive_staged(Path(self.to), read.con, open_=open_, later=later, archived_at=at,
                                      before=limit, gpus=gpus, cluster=self._cluster())
        return archive_document(summary.archive_report(result, 0, []), renamed_manifest=result.migrated)

    def _cluster(self) -> str:
        """The cluster the archived rows record (schema version 2): the context read, or the one the snapshot
        recorded (``snapshot save``); '' when it is not known."""
        from ..sources.contexts import current_context, recorded_cluster

        if self.opts.snapshots:
            return next((c for c in (recorded_cluster(p)[0] for p in self.opts.snapshots) if c), "")
        return self.opts.context or current_context(self.opts.kubeconfig) or ""

    def _when(self, snapshot: Snapshot) -> tuple[datetime, datetime | None, dict[str, int]]:
        """The archive run's time, its --before (None: every closed lease) and the fleet's GPUs per flavor."""
        at = self.opts.evaluation_time(snapshot)
        limit = _time(self.before, at, "--before") if self.before else None
        return at, limit, fleet_gpus(snapshot)

    def evaluate(self, snapshot: Snapshot) -> Document:
        from ..archive import store, summary

        at, limit, gpus = self._when(snapshot)
        paused = gc.isenabled()
        gc.disable()
        try:
            result = store.archive(Path(self.to), snapshot.leases, archived_at=at, before=limit, gpus=gpus,
                                   cluster=self._cluster())
        finally:
            if paused:
                gc.enable()
        pruned, left = 0, []
        if self.prune:
            pruned, left = _prune(self.opts, result.directory, snapshot.leases, limit)
        return archive_document(summary.archive_report(result, pruned, left), renamed_manifest=result.migrated)


@dataclass
class ArchiveVerifyOptions(Command):
    """``leases archive --verify DIR``: reads the archive only (no cluster, no snapshot)."""

    directory: str
    before: str | None = None
    prune: bool = False
    to: str | None = None
    formats = REPORT_FORMATS
    problems: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.to is not None:
            raise UsageError("give exactly one of --to DIR (write) and --verify DIR (check)")
        if self.before is not None or self.prune:
            raise UsageError(f"{'--before' if self.before is not None else '--prune'} goes with --to, not --verify")

    def load(self) -> Any:
        return None

    def evaluate(self, _snapshot: Any) -> Document:
        from ..archive import reader, summary

        report = summary.verify_report(reader.verify(self.directory))
        self.problems = list(report.problems)
        return verify_document(report)

    def exit_code(self) -> int:
        if not self.problems:
            return int(ExitCode.OK)
        more = len(self.problems) - 1
        click.echo(f"error: {self.problems[0]}" + (f" (and {more} more problems)" if more else ""), err=True)
        return int(ExitCode.FAILED)


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
