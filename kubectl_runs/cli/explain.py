"""``kubectl runs explain RUN``: everything about one run on one screen (API.md §5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..engine.explain import explain_run
from ..views.explain import explain_document
from .completion import complete_runs
from .options import Command, global_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document


@click.command("explain")
@click.argument("run_name", metavar="RUN", shell_complete=complete_runs)
@global_options
@click.pass_context
def explain(ctx: click.Context, run_name: str) -> int:
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
    return ExplainOptions(run_name).run(ctx)


@dataclass
class ExplainOptions(Command):
    run_name: str

    def validate(self) -> None:
        self.opts.object_ref("run", self.run_name)  # a malformed name fails before anything is loaded

    def evaluate(self, snapshot: Snapshot) -> Document:
        opts = self.opts
        run = opts.find("run", self.run_name, snapshot.runs_by_key)
        namespace = run.metadata.namespace
        at = opts.evaluation_time(snapshot)
        events = None
        if not opts.snapshots:  # live: the run's Events too (a snapshot has none)
            from ..sources.cluster import recent_events

            events = recent_events(opts.source(namespace), namespace, "Run", run.metadata.name)
        return explain_document(explain_run(snapshot, run, at, events=events), self.fmt)
