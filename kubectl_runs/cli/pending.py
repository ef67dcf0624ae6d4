"""``kubectl runs pending``: every pending GPU consumer in one list — Runs and plain pods (one row per workload) —
with one reason each and the fleet's GPUs in a headline (kubectl_runs.pods.pending; docs/commands.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..render import REPORT_FORMATS
from .options import Command, global_options
from .watch_flags import watch_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document


@click.command("pending")
@click.option("--flavor", metavar="FLAVOR", help="Keep the Runs of this GPU flavor and the pods that may use its nodes.")
@global_options
@watch_options
@click.pass_context
def pending(ctx: click.Context, flavor: str | None) -> int:
    """Every pending GPU consumer, whatever admits it: Runs (jobtree), Kueue's pending Workloads, and pods that
    request nvidia.com/gpu or amd.com/gpu, one row per workload (Deployment, Job, RayCluster, … with its pending pod count). Each row says
    the GPUs asked, since when, who admits it (jobtree, kube-scheduler, Kueue, or another scheduler) and one
    reason code; the headline gives the fleet's GPUs (total, held by leases, held by pods outside leases, free,
    free in blocks large enough for the pending pods) and the rows per reason. Every namespace unless -n.

    \b
    Examples:
      kubectl runs pending
      kubectl runs pending -n research -o wide
      kubectl runs pending --flavor H100 -o json
      kubectl runs pending --snapshot fleet.json
    """
    return PendingOptions(flavor=flavor).run(ctx)


@dataclass
class PendingOptions(Command):
    flavor: str | None = None
    formats = REPORT_FORMATS
    clusters = "pending"  # also over several clusters (cli/clusters.py)

    pods = True

    def load(self) -> Snapshot:
        return self.opts.load(None, pods=True)

    def evaluate(self, snapshot: Snapshot) -> Document:
        from ..pods.pending import pending_report
        from ..views.pending import pending_document

        at = self.opts.evaluation_time(snapshot)
        report = pending_report(snapshot, at, namespace=self.opts.report_namespace(), flavor=self.flavor)
        return pending_document(report)
