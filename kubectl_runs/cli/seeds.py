"""``kubectl runs seeds verify [RESERVATION]``: replay recorded preemption lotteries (API.md §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..engine.lottery import is_activated
from ..engine.verify import verify, verify_all
from ..errors import ExitCode, UserError
from ..views.verify import verify_document
from .completion import complete_reservations
from .options import Command, GlobalOptions, global_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document


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
    return VerifyOptions(reservation).run(ctx)


@dataclass
class VerifyOptions(Command):
    reservation: str | None = None
    differ: bool = False

    def complete(self, opts: GlobalOptions) -> None:
        super().complete(opts)
        # Victim leases live in any namespace, so everything readable is loaded and the reservations are
        # narrowed here rather than by the source.
        self.namespace = None if self.reservation is not None else opts.report_namespace()

    def validate(self) -> None:
        if self.reservation is not None:
            self.opts.object_ref("reservation", self.reservation)  # a malformed name fails before loading

    def evaluate(self, snapshot: Snapshot) -> Document:
        where = self.namespace
        if self.reservation is not None:
            found = self.opts.find("reservation", self.reservation, snapshot.reservations_by_key)
            where = found.metadata.namespace
            if not is_activated(found):
                state = found.status.state or "Pending"
                raise UserError(f"reservation {found.key} is not activated (state {state}): it has no draw to verify")
            checks = [verify(found, snapshot.leases_by_key)]
        else:
            checks = verify_all(snapshot, where)
        at = self.opts.evaluation_time(snapshot)
        self.differ = any(not c.verified for c in checks)
        return verify_document(checks, at, where)

    def exit_code(self) -> int:
        return int(ExitCode.FAILED) if self.differ else int(ExitCode.OK)
