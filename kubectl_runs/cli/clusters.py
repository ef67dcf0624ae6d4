"""A report over several clusters: ``--context`` repeated, ``--all-contexts``, or ``--snapshot`` files saved from
different clusters (docs/commands.md, "Several clusters").

Imported only when such a report is asked for (cli/options.py ``Command.run``): one cluster starts, reads and
prints exactly as before. Each cluster is read in its own thread, with its own connection and the request
limits of ``--request-timeout`` (else the default connect, read and whole-request limits); the reports are then
evaluated one cluster at a time, each with its own arithmetic (budgets, envelopes and leases never mix across
clusters), and merged by views/clusters.py. A cluster that cannot be read is one ``error:`` line on stderr and a
headline, the others are still printed, and the exit code is 4 (a partial answer; docs/exit-codes.md).
"""

from __future__ import annotations

import copy
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from ..errors import ExitCode, UsageError, UserError
from ..sources.contexts import Target, live_targets, snapshot_targets
from ..views import clusters as views
from .options import GlobalOptions

if TYPE_CHECKING:
    from ..model import Snapshot
    from .options import Command

MAX_THREADS = 8  # clusters read at once (each mostly waits on its API server)

TOTALS = {"budgets": views.budgets_total, "audit": views.audit_total, "queues": views.queues_total,
          "pending": views.pending_total}

KEPT: list[Any] = []  # every cluster's snapshot, alive until the process exits (as options.LOADED keeps one)


@dataclass
class ClusterOptions(GlobalOptions):
    """The global options of one cluster of the report: its context (or its snapshot files); its notes are kept
    to be said with the cluster's name, in cluster order, rather than printed from a reading thread."""

    said: list[str] = field(default_factory=list)

    def announce(self, snapshot: Snapshot) -> None:  # type: ignore[override]
        self.said.extend(snapshot.notes)


def targets(opts: GlobalOptions) -> list[Target] | None:
    """The clusters to read; None when the snapshot files given are of one cluster (read as one, as before)."""
    if opts.snapshots:
        if opts.several_clusters():
            raise UsageError("--snapshot is read instead of a cluster: it cannot be used with several --context "
                             "or --all-contexts (snapshots saved from several clusters are reported per cluster "
                             "by themselves)")
        return snapshot_targets(list(opts.snapshots))
    return live_targets(opts.kubeconfig, list(opts.contexts), opts.all_contexts)


def options_of(opts: GlobalOptions, target: Target) -> ClusterOptions:
    values = {f.name: getattr(opts, f.name) for f in dataclasses.fields(GlobalOptions)}
    values.update(context=None if target.snapshots else target.context, contexts=[], all_contexts=False,
                  snapshots=list(target.snapshots))
    return ClusterOptions(**values)


@dataclass
class _Read:
    target: Target
    command: Any = None
    snapshot: Any = None
    error: str | None = None


def _load(command: Command, target: Target) -> _Read:
    one = copy.copy(command)
    one.opts = options_of(command.opts, target)
    if getattr(one, "opened", None):  # leases audit --archive: only the rows archived from this cluster
        one.opened = [dataclasses.replace(archive, cluster=target.context) for archive in one.opened]
    try:
        return _Read(target, one, one.load())
    except UsageError:
        raise
    except UserError as exc:
        return _Read(target, one, error=exc.message)


def read_all(command: Command, chosen: list[Target]) -> list[_Read]:
    """Every cluster's snapshot, read in parallel; the answers in the order the clusters were asked for.
    Snapshot files are read one after the other: decoding is all the work (under the GIL), and msgspec must not
    build a type's decoding information in one thread while another decodes with it (it crashes)."""
    if any(target.snapshots for target in chosen):
        return [_load(command, target) for target in chosen]
    from ..sources.cluster import warm_decoders

    warm_decoders()
    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(chosen)),
                            thread_name_prefix="kubectl-runs-cluster") as pool:
        return list(pool.map(lambda target: _load(command, target), chosen))


def run_clusters(command: Command) -> int | None:
    """Read, evaluate, merge and print the report over several clusters; its exit code. None: one cluster after
    all (snapshot files that record one cluster, or none), which the caller runs as always."""
    chosen = targets(command.opts)
    if chosen is None:
        return None
    command.validate()
    _say_unattributed(getattr(command, "opened", None) or [])
    results: list[views.ClusterResult] = []
    codes: list[int] = []
    for read in read_all(command, chosen):
        target = read.target
        for note in read.command.opts.said:
            click.echo(f"note: context {target.context}: {note}", err=True)
        if read.error is None:
            KEPT.append(read.snapshot)
            try:
                document = read.command.evaluate(read.snapshot)
            except UsageError:
                raise
            except UserError as exc:
                read.error = exc.message
            else:
                results.append(views.ClusterResult(target.context, target.server, document))
                codes.append(read.command.exit_code())
                continue
        results.append(views.ClusterResult(target.context, target.server, error=read.error))
    command.opts.print(views.merge(results, TOTALS.get(command.clusters)), command.fmt)
    failed = [r for r in results if r.document is None]
    for result in failed:
        click.echo(f"error: context {result.context}: {result.error}", err=True)
    if failed:
        return int(ExitCode.FAILED if len(failed) == len(results) else ExitCode.PARTIAL)
    return max(codes, default=int(ExitCode.OK))


def _say_unattributed(archives: list) -> None:
    """Archived rows that record no cluster cannot be given to one: said, never dropped without a word."""
    from ..archive.reader import unattributed

    for archive in archives:
        count = unattributed(archive)
        if count:
            click.echo(f"note: --archive {archive.directory}: {count:,} archived leases record no cluster (archived "
                       "before schema version 2, or from a source whose context was not known): they are not counted "
                       "in a report over several clusters; audit them with one --context", err=True)


def split_context(opts: GlobalOptions, name: str) -> str:
    """``CONTEXT/NAMESPACE/NAME`` (plan, explain): the context becomes ``--context``; NAMESPACE/NAME is returned."""
    context, _, rest = name.partition("/")
    if not context:
        raise UsageError(f"run {name!r}: write NAME, NAMESPACE/NAME or CONTEXT/NAMESPACE/NAME")
    if opts.snapshots:
        raise UsageError(f"run {name}: CONTEXT/NAMESPACE/NAME names a cluster; it cannot be used with --snapshot")
    if opts.all_contexts or (opts.contexts and opts.contexts != [context]):
        given = "--all-contexts" if opts.all_contexts else f"--context {', '.join(opts.contexts)}"
        raise UsageError(f"run {name} is in context {context}, but {given} says otherwise: give one of them")
    opts.context, opts.contexts = context, [context]
    return rest
