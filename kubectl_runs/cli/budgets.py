"""``kubectl runs budgets usage``: per envelope used, headroom, classes, GPU-hours; aggregates; findings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..engine.usage import budget_usage
from ..render import REPORT_FORMATS
from ..views.usage import usage_document
from .options import Command, GlobalOptions, global_options
from .watch_flags import watch_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document


@click.group("budgets")
@global_options
def budgets() -> None:
    """Budgets: how much of each envelope is used and left."""


@budgets.command("usage")
@click.option("--owner", metavar="PATH", help="Keep this owner and its descendants (e.g. org:ai:rai).")
@click.option("--flavor", metavar="FLAVOR", help="Keep envelopes of this GPU flavor (e.g. H100-80GB).")
@global_options
@watch_options
@click.pass_context
def usage(ctx: click.Context, owner: str | None, flavor: str | None) -> int:
    """Every envelope at one instant: GPUs used by class (owned, shared, borrowed), headroom, unfunded and
    spare GPUs, GPU-hours consumed in its window, aggregate caps, and findings.

    \b
    Examples:
      kubectl runs budgets usage
      kubectl runs budgets usage --owner org:ai:rai --flavor H100-80GB -o wide
      kubectl runs budgets usage --snapshot fleet.json --at 2025-11-20T12:00:00Z -o csv
    """
    return UsageOptions(owner=owner, flavor=flavor).run(ctx)


@dataclass
class UsageOptions(Command):
    owner: str | None = None
    flavor: str | None = None
    formats = REPORT_FORMATS
    clusters = "budgets"  # also over several clusters (cli/clusters.py)

    def complete(self, opts: GlobalOptions) -> None:
        super().complete(opts)
        self.namespace = opts.report_namespace()

    def evaluate(self, snapshot: Snapshot) -> Document:
        # Every namespace is loaded: a lease in one namespace may be charged to an envelope in another, so -n
        # narrows the rows after the ledger, never the arithmetic.
        at = self.opts.evaluation_time(snapshot)
        report = budget_usage(snapshot, at, owner=self.owner, flavor=self.flavor, namespace=self.namespace)
        return usage_document(report, self.namespace)
