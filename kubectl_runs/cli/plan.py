"""``kubectl runs plan RUN``: why a run is not starting, and what would fix it (API.md §3 Plan, §5)."""

from __future__ import annotations

import click

from ..engine.plan import plan_run
from ..errors import UserError
from ..model import Run, Snapshot
from ..render import OBJECT_FORMATS
from ..views.plan import plan_document
from .completion import complete_runs
from .options import GlobalOptions, global_options


@click.command("plan")
@click.argument("run_name", metavar="RUN", shell_complete=complete_runs)
@global_options
@click.pass_context
def plan(ctx: click.Context, run_name: str) -> None:
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
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(OBJECT_FORMATS)
    opts.object_ref("run", run_name)  # a malformed name fails before anything is loaded
    snapshot = opts.load(None)  # every namespace: ancestors, siblings and sponsors live elsewhere
    run = opts.find("run", run_name, snapshot.runs_by_key)
    at = opts.evaluation_time(snapshot)
    result = plan_run(snapshot, run, at)
    opts.print(plan_document(result, fmt), fmt)


def find_run(snapshot: Snapshot, namespace: str, name: str) -> Run:
    run = snapshot.runs_by_key.get(f"{namespace}/{name}")
    if run is None:
        raise UserError(f"run {namespace}/{name} not found")
    return run
