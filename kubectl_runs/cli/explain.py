"""``kubectl runs explain RUN``: everything about one run on one screen (API.md §5)."""

from __future__ import annotations

import click

from ..engine.explain import explain_run
from ..render import OBJECT_FORMATS
from ..views.explain import explain_document
from .completion import complete_runs
from .options import GlobalOptions, global_options


@click.command("explain")
@click.argument("run_name", metavar="RUN", shell_complete=complete_runs)
@global_options
@click.pass_context
def explain(ctx: click.Context, run_name: str) -> None:
    """Everything about RUN on one screen: its phase and width, how its GPUs are funded (owned, shared,
    borrowed, unfunded, and from which lenders), its plan (as `kubectl runs plan`), its reservation, its
    leases, and its preemption history — each preempting reservation with its seed, checked as
    `kubectl runs seeds verify` does. Against a cluster it also shows the run's recent Events.

    RUN is NAME or NAMESPACE/NAME; NAME is looked up in the namespace of -n, else of the kubeconfig context,
    else default; with -A in every namespace (it must be unique there).

    \b
    Examples:
      kubectl runs explain pretrain-32 -n rai-sys
      kubectl runs explain lab-scratch-8 -n shared-lab -o yaml
      kubectl runs explain pretrain-32 -n rai-sys --snapshot fleet.yaml --at 2025-11-20T12:00:00Z
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(OBJECT_FORMATS)
    opts.object_ref("run", run_name)  # a malformed name fails before anything is loaded
    snapshot = opts.load(None)
    run = opts.find("run", run_name, snapshot.runs_by_key)
    namespace = run.metadata.namespace
    at = opts.evaluation_time(snapshot)
    events = None
    if not opts.snapshots:  # live: the run's Events too (a snapshot has none)
        from ..sources.cluster import recent_events

        events = recent_events(opts.source(namespace), namespace, "Run", run.metadata.name)
    info = explain_run(snapshot, run, at, events=events)
    opts.print(explain_document(info, fmt), fmt)
