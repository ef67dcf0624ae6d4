"""``kubectl runs plan RUN``: why a run is not starting, and what would fix it (API.md §3 Plan, §5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..engine.plan import plan_run
from ..views.plan import plan_document
from .completion import complete_runs
from .options import RunCommand, global_options
from .watch_flags import watch_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document


@click.command("plan")
@click.argument("run_name", metavar="RUN", shell_complete=complete_runs)
@global_options
@watch_options
@click.pass_context
def plan(ctx: click.Context, run_name: str) -> int:
    """Why RUN is not starting, and what would fix it: the GPUs it needs, how many can be placed (free slots
    on schedulable nodes of its flavor, in whole groups per fabric domain) and funded (headroom of its own,
    its ancestors', its siblings' and its sponsors' envelopes), the deficits, the reasons, the remedies in the
    order the resolver applies them, and the earliest start that reported completion times and budget
    windows support.

    RUN is NAME or NAMESPACE/NAME; NAME is looked up in the namespace of -n, else of the kubeconfig context,
    else default; with -A in every namespace (it must be unique there).

    \b
    Examples:
      kubectl runs plan pretrain-32 -n rai-sys
      kubectl runs plan rai-sys/pretrain-32 -o json
      kubectl runs plan mi-sweep -n ai-platform --snapshot fleet.yaml --at 2025-11-20T12:00:00Z
    """
    return PlanOptions(run_name).run(ctx)


@dataclass
class PlanOptions(RunCommand):
    watch_until_running = True  # -w ends (exit 0) once the run is Running or finished

    def evaluate(self, snapshot: Snapshot) -> Document:
        # Every namespace is loaded: ancestors, siblings and sponsors live elsewhere.
        return plan_document(plan_run(snapshot, self.run_of(snapshot), self.opts.evaluation_time(snapshot)), self.fmt)
