"""``kubectl runs seeds verify [RESERVATION]``: replay recorded preemption lotteries (API.md §4)."""

from __future__ import annotations

import click

from ..engine.lottery import is_activated
from ..engine.verify import verify, verify_all
from ..errors import ExitCode, UserError
from ..render import OBJECT_FORMATS
from ..views.verify import verify_document
from .completion import complete_reservations
from .options import GlobalOptions, global_options


@click.group("seeds")
@global_options
def seeds() -> None:
    """Preemption seeds: replay and check the lotteries of activated Reservations."""


@seeds.command("verify")
@click.argument("reservation", required=False, metavar="[RESERVATION]", shell_complete=complete_reservations)
@global_options
@click.pass_context
def verify_command(ctx: click.Context, reservation: str | None) -> int:
    """Recompute the seed, the tickets and the victims of each activated Reservation from what it recorded
    (status.activation) and compare them with its recorded actions and with the victim leases'
    closureReason and status.preemption. Prints "verified", or each difference and exits 1.

    RESERVATION is NAME or NAMESPACE/NAME; NAME is looked up in the namespace of -n, else of the kubeconfig
    context, else default; with -A in every namespace (it must be unique there). Without RESERVATION: every
    activated Reservation in the namespaces the report covers (all unless -n).

    \b
    Examples:
      kubectl runs seeds verify -A
      kubectl runs seeds verify rai-sys/pretrain-32-r1 -o json
      kubectl runs seeds verify --snapshot fleet.yaml
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(OBJECT_FORMATS)
    # Victim leases live in any namespace, so everything readable is loaded and the reservations are
    # narrowed here rather than by the source.
    if reservation is not None:
        opts.object_ref("reservation", reservation)  # a malformed name fails before anything is loaded
        snapshot = opts.load(None)
        found = opts.find("reservation", reservation, snapshot.reservations_by_key)
        namespace = found.metadata.namespace
        if not is_activated(found):
            state = found.status.state or "Pending"
            raise UserError(f"reservation {found.key} is not activated (state {state}): it has no draw to verify")
        checks = [verify(found, snapshot.leases_by_key)]
        where = namespace
    else:
        where = opts.report_namespace()
        snapshot = opts.load(None)
        checks = verify_all(snapshot, where)
    at = opts.evaluation_time(snapshot)
    opts.print(verify_document(checks, at, where), fmt)
    return ExitCode.FAILED if any(not c.verified for c in checks) else ExitCode.OK
