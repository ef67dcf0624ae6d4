"""The root command: ``kubectl runs …`` (also ``kubectl-runs …``), and the one error boundary.

Subcommands are imported only when they run, so ``kubectl runs --help`` stays fast and never imports the
kubernetes client.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from .. import __version__
from ..errors import ExitCode, UserError
from .options import global_options

PROG = "kubectl runs"

# click >= 8.2 raises this (a UsageError, exit 2) for a group given no arguments; older clicks print the help.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())

# name -> (module, attribute, one-line help); the help is here so that --help needs no import.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "budgets": ("kubectl_runs.cli.budgets", "budgets", "Budgets: how much of each envelope is used and left."),
    "completion": ("kubectl_runs.cli.completion", "completion", "Print a shell completion script (bash, zsh, fish, kubectl)."),
    "explain": ("kubectl_runs.cli.explain", "explain", "Everything about one run: width, funding, plan, leases, preemptions."),
    "leases": ("kubectl_runs.cli.leases", "leases", "Leases: who used which GPUs, and was the ledger honest."),
    "pending": ("kubectl_runs.cli.pending", "pending", "Every pending GPU consumer (Runs, Workloads, pods), one reason each."),
    "plan": ("kubectl_runs.cli.plan", "plan", "Why a run is not starting, and what would fix it."),
    "queues": ("kubectl_runs.cli.queues", "queues", "Kueue: ClusterQueue quota, usage and headroom per flavor."),
    "reconcile": ("kubectl_runs.cli.reconcile", "reconcile", "The companion reconciler: write plans and usage into status."),
    "seeds": ("kubectl_runs.cli.seeds", "seeds", "Preemption seeds: replay and verify recorded lotteries."),
    "snapshot": ("kubectl_runs.cli.snapshot", "snapshot", "Save the objects kubectl-runs reads, for offline use."),
    "version": ("kubectl_runs.cli.version", "version", "Print the version, commit, Python and platform."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, attribute, _ = COMMANDS[cmd_name]
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand:  # click suggests from the loaded commands: none here yet
            raise click.exceptions.NoSuchCommand(str(args[0]), possibilities=self.list_commands(ctx),
                                                 ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@global_options
def cli() -> None:
    """kubectl-runs: why a GPU run is not starting and what would fix it, how much of each budget is left,
    and who used which GPUs.

    \b
    Examples:
      kubectl runs budgets usage                       # every envelope, used and left, now
      kubectl runs budgets usage --snapshot fleet.json --at 2025-11-20T12:00:00Z -o json
    """


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and turn every failure into one line on stderr and an exit code (API.md §5)."""
    args = sys.argv[1:] if argv is None else argv
    if sys.stdout is None:  # started with stdout closed (`>&-`): the result would be lost without a word
        click.echo("error: standard output is closed: there is nowhere to print the result", err=True)
        return int(ExitCode.FAILED)
    try:
        return _main(args)
    except BrokenPipeError:  # while printing help or an error's companion line
        _silence_stdout()
        return int(ExitCode.FAILED)
    except OSError as exc:
        return _write_failed(exc)


def _close_options(name: str, candidates) -> list[str]:
    """Click compares option names with their dashes, so ``--watch`` looked like ``--at``: compare the words."""
    import difflib

    word = name.lstrip("-")
    return [c for c in candidates if difflib.SequenceMatcher(None, word, c.lstrip("-")).ratio() >= 0.6]


def _main(args: list[str]) -> int:
    try:
        result = cli.main(args=args, prog_name=PROG, standalone_mode=False, complete_var="_KUBECTL_RUNS_COMPLETE")
    except click.exceptions.Exit as done:
        return done.exit_code
    except _NO_ARGS_IS_HELP as exc:
        # A command group with nothing after it (`kubectl runs`, `kubectl runs budgets`): its help, on stdout,
        # exit 0, as kubectl does for `kubectl config`.
        click.echo(exc.ctx.get_help())
        return int(ExitCode.OK)
    except click.UsageError as exc:
        if isinstance(exc, click.exceptions.NoSuchOption):
            exc.possibilities = _close_options(exc.option_name, exc.possibilities or ())
        # kubectl's shape: the problem on one line, then where to read about the command.
        message = exc.format_message().replace("\n", " ")
        click.echo(f"error: {message[:1].lower()}{message[1:]}", err=True)
        path = exc.ctx.command_path if exc.ctx is not None else PROG
        click.echo(f"See '{path} --help' for usage.", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 130
    except UserError as exc:
        click.echo(f"error: {exc.message}", err=True)
        if exc.code == ExitCode.USAGE:  # raised outside a command's context (usage_errors converts the rest)
            click.echo(f"See '{PROG} --help' for usage.", err=True)
        return int(exc.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return int(ExitCode.FAILED)
    except OSError as exc:  # files are read with their own errors: what is left is writing the output
        return _write_failed(exc)
    except Exception as exc:  # a traceback reaching a user is a bug; say so in one line
        if os.environ.get("KUBECTL_RUNS_DEBUG"):
            raise
        click.echo(
            f"error: internal error: {type(exc).__name__}: {exc} "
            f"(kubectl-runs {__version__}; set KUBECTL_RUNS_DEBUG=1 for the traceback)",
            err=True,
        )
        return int(ExitCode.FAILED)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except OSError as exc:  # /dev/full, a full disk, a quota: the output did not get out
        return _write_failed(exc)
    return int(result) if isinstance(result, int) else int(ExitCode.OK)


def _write_failed(exc: OSError) -> int:
    """One line for an output that could not be written (``> /dev/full``, a full disk), exit code 1."""
    reason = exc.strerror or str(exc)
    where = exc.filename if exc.filename else "standard output"
    click.echo(f"error: cannot write to {where}: {reason}", err=True)
    _silence_stdout()
    return int(ExitCode.FAILED)


def _silence_stdout() -> None:
    """After a closed pipe (``| head``) or a failed write, point stdout at /dev/null so that the interpreter's
    final flush is quiet."""
    if sys.stdout is None:
        return
    try:
        fileno = sys.stdout.fileno()
    except (OSError, ValueError):  # not a real file (tests capture it)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)


def entrypoint() -> None:
    """The console script: run, flush, and leave without tearing the interpreter down (the snapshot of a big
    fleet is millions of objects; freeing them one by one would only delay the exit)."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except OSError:
            _silence_stdout()
    os._exit(code)
