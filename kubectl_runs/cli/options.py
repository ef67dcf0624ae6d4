"""Flags every command shares, defined once (kubectl's global flags), accepted before or after the command
words: ``kubectl runs -o json budgets usage`` and ``kubectl runs budgets usage -o json`` are the same."""

from __future__ import annotations

import functools
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import ExitCode, UsageError, UserError
from ..formats import option_help
from ..timeutil import (
    MAX_DURATION_SECONDS,
    MAX_DURATION_TEXT,
    TIMEOUT_UNITS,
    duration_seconds,
    now_utc,
    parse_time,
)

if TYPE_CHECKING:  # the model, renderer and sources are imported where used: --help and version skip them
    from ..model import Run, Snapshot
    from ..render import Document
    from ..sources import Source

MAX_CHUNK_SIZE = 1_000_000  # objects per list request (--chunk-size): past it one page is the whole list anyway


T = TypeVar("T")

LOADED: list[Snapshot] = []  # the snapshot of the command that ran last (see GlobalOptions.load)


@dataclass
class GlobalOptions:
    kubeconfig: str | None = None
    context: str | None = None
    contexts: list[str] = field(default_factory=list)  # every --context given (several: cli/clusters.py)
    all_contexts: bool = False
    namespace: str | None = None
    all_namespaces: bool = False
    snapshots: list[str] = field(default_factory=list)
    at: str | None = None
    output: str | None = None
    no_headers: bool = False
    request_timeout: str | None = None
    chunk_size: int | None = None
    wall_clock: datetime = field(default_factory=now_utc)  # the one read of the clock (DESIGN.md)
    watch: bool = False  # -w/--watch and its flags (cli/watch_flags.py; the watch itself: cli/watching.py)
    watch_events: bool = False
    watch_timeout: str | None = None

    @staticmethod
    def of(ctx: click.Context) -> GlobalOptions:
        return ctx.find_root().ensure_object(GlobalOptions)

    # --- complete ---------------------------------------------------------------------------------------

    def object_namespace(self) -> str:
        """Commands on one object look in ``-n``, else the kubeconfig context's namespace, else default."""
        from ..sources import default_namespace
        from ..sources.names import label_problem, shown

        if self.namespace:
            return self.namespace
        namespace = default_namespace(self.kubeconfig, self.context)
        problem = label_problem(namespace)
        if problem:  # it would go into request paths: refused as the API server would (a file to fix, exit 1)
            raise UserError(f"the namespace {shown(namespace)} of the kubeconfig context is not a valid namespace: "
                            f"{problem} (fix the context, or give -n)")
        return namespace

    def object_ref(self, kind: str, name: str) -> tuple[str | None, str]:
        """The namespace and name of the one object a command is about (``plan RUN``, ``explain RUN``,
        ``seeds verify RESERVATION``): ``NAMESPACE/NAME``, else ``NAME`` in ``-n``, else in the kubeconfig
        context's namespace, else ``default``. With ``-A`` and a bare ``NAME`` the namespace is None: every
        namespace is searched (``find``). A ``NAMESPACE/`` that contradicts ``-n`` is a usage error."""
        from ..sources.names import label_problem, shown, subdomain_problem

        namespace, slash, short = name.rpartition("/")
        if slash and (not namespace or not short or "/" in namespace):
            raise UsageError(f"{kind} {name!r}: write NAME or NAMESPACE/NAME")
        problem = subdomain_problem(short)
        if problem:
            raise UsageError(f"{kind} name {shown(short)} is not a valid name: {problem}")
        if not slash:
            if self.all_namespaces:
                return None, name
            return self.object_namespace(), name
        problem = label_problem(namespace)
        if problem:
            raise UsageError(f"{kind} {shown(name)}: {shown(namespace)} is not a valid namespace: {problem}")
        if self.namespace and self.namespace != namespace:
            raise UsageError(f"{kind} {name} is in namespace {namespace}, but -n says {self.namespace}: "
                             "give one of them")
        self.namespace = namespace  # exactly -n NAMESPACE: also the namespace read when RBAC refuses the rest
        return namespace, short

    def find(self, kind: str, name: str, by_key: Mapping[str, T]) -> T:
        """The object ``name`` (as ``object_ref`` reads it) among ``by_key`` (``namespace/name`` -> object).
        Not found: say in which other namespaces an object of that name is. With ``-A`` and a bare name: the
        one object of that name in any namespace, or an error listing them when there are several."""
        namespace, short = self.object_ref(kind, name)
        if namespace is not None:
            found = by_key.get(f"{namespace}/{short}")
            if found is not None:
                return found
        elsewhere = sorted(k.rpartition("/")[0] for k in by_key if k.rpartition("/")[2] == short)
        if namespace is None:  # -A: search every namespace
            if len(elsewhere) == 1:
                return by_key[f"{elsewhere[0]}/{short}"]
            if not elsewhere:
                raise UserError(f"{kind} {short} not found in any namespace")
            raise UserError(f"{len(elsewhere)} {kind}s are named {short}: "
                            f"{', '.join(f'{ns}/{short}' for ns in elsewhere)} (name one as NAMESPACE/NAME)")
        if not elsewhere:
            raise UserError(f"{kind} {namespace}/{short} not found")
        if len(elsewhere) == 1:
            raise UserError(f"{kind} {namespace}/{short} not found; a {kind} of that name is in {elsewhere[0]} "
                            f"(use -n {elsewhere[0]})")
        raise UserError(f"{kind} {namespace}/{short} not found; {kind}s of that name are in "
                        f"{', '.join(elsewhere)} (use -n NAMESPACE or NAMESPACE/NAME)")

    def report_namespace(self) -> str | None:
        """Reports over many objects cover every namespace unless ``-n`` narrows them (``-A`` wins)."""
        return None if self.all_namespaces else self.namespace

    def source(self, namespace: str | None, *, queues: bool = False, lean: bool = False, pods: bool = False
               ) -> Source:
        """What to read; ``queues``: live, Nodes and the Kueue and Kaiwo kinds (snapshots hold what they hold);
        ``lean``: snapshot files' Workloads as ``WorkloadHead`` (`queues usage`) and GPULeases as ``GPULeaseHead``
        (`leases audit`) where that is fast; ``pods``: live, every kind and Pods (`pending`)."""
        from ..sources import Source

        if self.several_clusters():
            raise UsageError("this command reads one cluster: give one --context (several contexts and "
                             "--all-contexts are for budgets usage, leases audit, queues usage and pending)")
        return Source(
            snapshots=tuple(self.snapshots),
            kubeconfig=self.kubeconfig,
            context=self.context,
            request_timeout=self.timeout_seconds(),
            namespace=namespace,
            chunk_size=self.chunk_size,
            fallback_namespace=None if self.snapshots else self.object_namespace(),
            queues=queues,
            pods=pods,
            lean=lean,
        )

    def several_clusters(self) -> bool:
        """More than one context asked for (the reports then read each cluster: cli/clusters.py)."""
        return self.all_contexts or len(self.contexts) > 1

    def timeout_seconds(self) -> float | None:
        """``--request-timeout`` as kubectl reads it: ``0`` = no limit, ``30`` or ``30s``, ``2m``, ``1h``. None when
        the flag is not given: the live source then applies its default connect and read timeouts."""
        if self.request_timeout is None:
            return None
        seconds = duration_seconds(self.request_timeout.strip(), TIMEOUT_UNITS, bare=True)
        if seconds is None:
            raise UserError(
                f"--request-timeout: {self.request_timeout!r} is not a duration (examples: 0, 30s, 2m)"
            )
        if seconds > MAX_DURATION_SECONDS:  # (inf too: 1e400s)
            shown = self.request_timeout if len(self.request_timeout) <= 40 else self.request_timeout[:39] + "…"
            raise UsageError(f"--request-timeout: {shown!r} is out of range: use 0 (no limit) up to "
                             f"{MAX_DURATION_TEXT}")
        return seconds

    def load(self, namespace: str | None, stdin: Any = None, *, queues: bool = False, lean: bool = False,
             pods: bool = False) -> Snapshot:
        from ..sources import load

        snapshot = load(self.source(namespace, queues=queues, lean=lean, pods=pods), stdin)
        self.announce(snapshot)
        # Keep the last snapshot alive past the command: freeing millions of records costs a few tenths of a
        # second that a CLI need not spend, since the process exits right after (entrypoint: os._exit).
        LOADED[:] = [snapshot]
        return snapshot

    @staticmethod
    def announce(snapshot: Snapshot) -> None:
        """The snapshot's notes (objects ignored or read once), one line each on stderr."""
        for note in snapshot.notes:
            click.echo(f"note: {note}", err=True)

    def evaluation_time(self, snapshot: Snapshot | None = None) -> datetime:
        """``--at``, else the snapshot's stamp, else the wall clock read at start-up (API.md §2)."""
        if self.at:
            return _parse_at(self.at)
        if snapshot is not None and snapshot.taken_at is not None:
            return snapshot.taken_at
        return self.wall_clock

    # --- validate & print -------------------------------------------------------------------------------

    def output_format(self, allowed: Sequence[str]) -> str:
        from ..render import TABLE, check_format

        return check_format(self.output or TABLE, allowed)

    def print(self, doc: Document, fmt: str) -> None:
        from ..render import render

        render(doc, fmt, sys.stdout, sys.stderr, no_headers=self.no_headers)


class Command(ABC):
    """A command's options as an object, run as kubectl runs its commands: ``complete`` fills in what the flags
    leave open from the global options (output format, namespace), ``validate`` refuses what cannot work before
    anything is loaded, and ``run`` is the one path every report takes — load the snapshot, ``evaluate`` it (the
    engine, then the report's view), render the Document in the format asked for, and exit with ``exit_code``.
    """

    formats: tuple[str, ...] = ("table", "wide", "json", "yaml")  # the output formats it can print
    clusters: str | None = None  # a report over several clusters (--context repeated, --all-contexts): cli/clusters.py
    queues = False  # live: read the Kueue and Kaiwo kinds (and Nodes) too
    pods = False  # live: read Pods and every kind (`pending`, `explain pod`); what `-w` watches
    opts: GlobalOptions
    fmt: str

    def complete(self, opts: GlobalOptions) -> None:
        self.opts = opts
        self.fmt = opts.output_format(self.formats)

    def validate(self) -> None:  # noqa: B027 - most commands have nothing to refuse
        """Refuse a bad combination of flags or a malformed name (usage errors, exit 2) before loading."""

    @abstractmethod
    def evaluate(self, snapshot: Snapshot) -> Document:
        """The engine (pure), then the report's view: the Document to print."""

    def exit_code(self) -> int:
        return int(ExitCode.OK)

    def run(self, ctx: click.Context) -> int:
        self.complete(GlobalOptions.of(ctx))
        watching = self.opts.watch or self.opts.watch_events or self.opts.watch_timeout is not None
        if watching and self.opts.several_clusters():
            raise UsageError("-w/--watch follows one cluster: give one --context (or none)")
        if self.clusters and (self.opts.several_clusters() or len(self.opts.snapshots) > 1):
            from .clusters import run_clusters  # only then: one cluster starts as it always did

            code = run_clusters(self)
            if code is not None:
                return code
        self.validate()
        if watching:
            from .watching import watch  # only with -w: start-up and --help never import the watch

            return watch(self)
        self.opts.print(self.evaluate(self.load()), self.fmt)
        return self.exit_code()

    def load(self) -> Snapshot:
        # every namespace: a report narrows its rows, never the arithmetic
        return self.opts.load(None, queues=self.queues)


@dataclass
class RunCommand(Command):
    """A command about one Run (``plan``, ``explain``): RUN is NAME or NAMESPACE/NAME, checked before anything
    is loaded, found (with a hint when it is in another namespace) once the snapshot is."""

    run_name: str

    def validate(self) -> None:
        if self.run_name.count("/") == 2 and all(self.run_name.split("/")):  # CONTEXT/NAMESPACE/NAME
            from .clusters import split_context

            self.run_name = split_context(self.opts, self.run_name)
        self.opts.object_ref("run", self.run_name)  # a malformed name fails before anything is loaded

    def run_of(self, snapshot: Snapshot) -> Run:
        return self.opts.find("run", self.run_name, snapshot.runs_by_key)


def _parse_at(text: str) -> datetime:
    """A bad ``--at`` is a bad flag *value*: like kubectl's "error: invalid argument", exit 1, one line."""
    try:
        return parse_time(text, flag="--at")
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _store_at(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Check ``--at`` as it is parsed, so a bad value fails before anything is loaded."""
    if value is not None:
        _parse_at(value)
    _store("at")(ctx, param, value)


def _store_namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``-n`` is checked as it is parsed (a DNS-1123 label, as the API server checks it): it goes into request
    paths, and ``-n ../../../api/v1`` must not name another resource."""
    if value is not None:
        from ..sources.names import label_problem, shown

        problem = label_problem(value)
        if problem:
            raise click.UsageError(f"-n/--namespace {shown(value)} is not a valid namespace: {problem}", ctx=ctx)
    _store("namespace")(ctx, param, value)


def _store_contexts(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    """``--context`` may be repeated: one context is today's ``context``; several are read one cluster each."""
    if not value:
        return
    opts = GlobalOptions.of(ctx)
    opts.contexts = list(dict.fromkeys([*opts.contexts, *value]))
    opts.context = opts.contexts[0] if len(opts.contexts) == 1 else None


def _complete_formats(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    from ..formats import FORMATS

    return [name for name in FORMATS if name.startswith(incomplete)]


def _store(name: str, *, append: bool = False) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value is False or value == ():
            return
        opts = GlobalOptions.of(ctx)
        if append:
            getattr(opts, name).extend(value)
        else:
            setattr(opts, name, value)

    return callback


_GLOBAL_OPTIONS = (
    click.option("--kubeconfig", metavar="PATH", type=click.Path(readable=False), callback=_store("kubeconfig"), expose_value=False,
                 help="Path to the kubeconfig file to use (default: $KUBECONFIG, else ~/.kube/config)."),
    click.option("--context", metavar="NAME", multiple=True, callback=_store_contexts, expose_value=False,
                 help="The kubeconfig context to use; repeat it for a report over several clusters."),
    click.option("--all-contexts", is_flag=True, default=None, callback=_store("all_contexts"), expose_value=False,
                 help="A report over every context of the kubeconfig, one cluster each."),
    click.option("-n", "--namespace", metavar="NS", callback=_store_namespace, expose_value=False,
                 help="The namespace: of the object for plan/explain/seeds verify (or write NAMESPACE/NAME); "
                 "narrows reports."),
    click.option("-A", "--all-namespaces", is_flag=True, default=None, callback=_store("all_namespaces"),
                 expose_value=False, help="Every namespace you may read: the default for reports; plan/explain/"
                 "seeds verify look for the one object of that name in any namespace."),
    click.option("--snapshot", "snapshots", metavar="PATH", multiple=True, type=click.Path(allow_dash=True, readable=False), callback=_store("snapshots", append=True),
                 expose_value=False, help="Read objects from a snapshot file or directory instead of a cluster "
                 "(repeatable; - is stdin)."),
    click.option("--at", metavar="TIME", callback=_store_at, expose_value=False,
                 help="Evaluate at this instant (RFC 3339); default: the snapshot's time, else now."),
    # Not a click.Choice: each command allows its own formats, and check_format refuses the others in kubectl's
    # words ("unable to match a printer … allowed formats are: …"), in one line.
    click.option("-o", "--output", metavar="FORMAT", shell_complete=_complete_formats, callback=_store("output"),
                 expose_value=False, help=option_help()),
    click.option("--no-headers", is_flag=True, default=None, callback=_store("no_headers"), expose_value=False,
                 help="Print tables and CSV without the header row."),
    click.option("--request-timeout", metavar="DURATION", callback=_store("request_timeout"), expose_value=False,
                 help="How long to wait for one request to the API server (0 = no limit; 30s, 2m)."),
    click.option("--chunk-size", type=click.IntRange(min=1, max=MAX_CHUNK_SIZE), metavar="N",
                 callback=_store("chunk_size"),
                 expose_value=False, help="Objects per list request to the API server (default 500)."),
)


def usage_errors(command: Callable) -> Callable:
    """A usage error a command finds itself (``-o csv`` where it prints no table, ``--by`` twice) reaches
    ``main`` as click's own, with the command's context: the error line and then ``See '… --help'``."""

    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UserError as exc:
            if exc.code != ExitCode.USAGE:
                raise
            raise click.UsageError(exc.message, ctx=click.get_current_context(silent=True)) from None

    return checked


def global_options(command: Callable) -> Callable:
    """Give a command (or group) every global flag (and usage errors in kubectl's shape)."""
    command = usage_errors(command)
    for option in reversed(_GLOBAL_OPTIONS):
        command = option(command)
    return command
