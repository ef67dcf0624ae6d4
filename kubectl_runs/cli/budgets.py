"""``kubectl runs budgets usage``: per envelope used, headroom, classes, GPU-hours; aggregates; findings."""

from __future__ import annotations

import click

from ..engine.usage import budget_usage
from ..render import REPORT_FORMATS
from ..views.usage import usage_document
from .options import GlobalOptions, global_options


@click.group("budgets")
@global_options
def budgets() -> None:
    """Budgets: how much of each envelope is used and left."""


@budgets.command("usage")
@click.option("--owner", metavar="PATH", help="Keep this owner and its descendants (e.g. org:ai:rai).")
@click.option("--flavor", metavar="FLAVOR", help="Keep envelopes of this GPU flavor (e.g. H100-80GB).")
@global_options
@click.pass_context
def usage(ctx: click.Context, owner: str | None, flavor: str | None) -> None:
    """Every envelope at one instant: GPUs used by class (owned, shared, borrowed), headroom, unfunded and
    spare GPUs, GPU-hours consumed in its window, aggregate caps, and findings.

    \b
    Examples:
      kubectl runs budgets usage
      kubectl runs budgets usage --owner org:ai:rai --flavor H100-80GB -o wide
      kubectl runs budgets usage --snapshot fleet.json --at 2025-11-20T12:00:00Z -o csv
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(REPORT_FORMATS)
    namespace = opts.report_namespace()
    # Load every namespace: a lease in one namespace may be charged to an envelope in another, so -n narrows
    # the rows after the ledger, never the arithmetic.
    snapshot = opts.load(None)
    at = opts.evaluation_time(snapshot)
    report = budget_usage(snapshot, at, owner=owner, flavor=flavor, namespace=namespace)
    opts.print(usage_document(report, namespace), fmt)
