"""``kubectl runs queues usage``: Kueue's quota, use and headroom per ClusterQueue, flavor and GPU resource,
from Kueue's own objects (kubectl_runs.kueue; docs/kueue.md). ``explain workload|kaiwojob`` is in cli/explain.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..render import REPORT_FORMATS
from ..views.queues import usage_document
from .options import Command, global_options
from .watch_flags import watch_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document


@click.group("queues")
@global_options
def queues() -> None:
    """Kueue: quota, usage and headroom of ClusterQueues and Cohorts."""


@queues.command("usage")
@click.option("--cohort", metavar="COHORT", help="Keep the ClusterQueues in this Cohort (and its child Cohorts).")
@click.option("--flavor", metavar="FLAVOR", help="Keep the rows of this ResourceFlavor.")
@global_options
@watch_options
@click.pass_context
def usage(ctx: click.Context, cohort: str | None, flavor: str | None) -> int:
    """Per ClusterQueue, flavor and GPU resource (nvidia.com/gpu, amd.com/gpu): nominal quota, borrowing and
    lending limits, GPUs reserved and admitted, pending demand, the headroom within the queue and what its
    Cohort can lend now, and the GPUs of the nodes the flavor's nodeLabels select; per Cohort its pooled quota;
    findings (quota no node backs, a LocalQueue whose ClusterQueue is missing, a flavor selecting no node, a
    borrowing limit the Cohort can never reach). ClusterQueues are cluster-scoped: -n does not narrow them.

    \b
    Examples:
      kubectl runs queues usage
      kubectl runs queues usage --cohort research --flavor h100 -o wide
      kubectl runs queues usage --snapshot fleet.json -o json
    """
    return QueuesUsageOptions(cohort=cohort, flavor=flavor).run(ctx)


@dataclass
class QueuesUsageOptions(Command):
    cohort: str | None = None
    flavor: str | None = None
    formats = REPORT_FORMATS
    clusters = "queues"  # also over several clusters (cli/clusters.py)
    queues = True

    def load(self) -> Snapshot:
        # lean: a JSON snapshot's Workloads are read as WorkloadHead, their pod sets decoded when read (pending)
        return self.opts.load(None, queues=True, lean=True)

    def evaluate(self, snapshot: Snapshot) -> Document:
        from ..kueue.model import PodSetsError
        from ..kueue.usage import queues_usage

        try:
            report = queues_usage(snapshot, cohort=self.cohort, flavor=self.flavor)
        except PodSetsError as exc:
            # The pod sets a lean load left undecoded are bad: the full load names the file, the object and the
            # field path (as every other command says it); it cannot pass, but if the files changed meanwhile...
            self.opts.load(None, queues=True)
            raise UserError(str(exc)) from None
        return usage_document(report)
