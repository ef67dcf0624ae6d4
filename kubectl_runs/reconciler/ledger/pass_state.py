"""The one state of a ledger pass: the snapshot it started from, the instant, the options, the writes so far and
the view they make (``Objects``), the Evaluation every plan of that view shares, and what the activations of
this instant decided (their victims, the Run being served). Every stage is a function of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ...engine.evaluation import Evaluation
from ...engine.plan import open_ledger
from ...model import Reservation, Snapshot
from ..actions import AnyWrite, PatchStatus
from .options import LedgerOptions
from .writes import Objects


@dataclass
class PassState:
    origin: Snapshot
    at: datetime
    options: LedgerOptions
    writes: list[AnyWrite] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.objects = Objects(self.origin)
        self._book: tuple | None = None
        self.waiting: tuple | None = None  # (view, keys of runs with a Pending Reservation)
        self.victims: dict[str, set[str]] = {}  # run -> slots it lost to an activation at this instant
        self.serving: str | None = None  # the run an activation is admitting right now

    @property
    def snap(self) -> Snapshot:
        """The view: the snapshot with every write of the pass so far applied."""
        return self.objects.snapshot

    def evaluation(self) -> Evaluation:
        """What every plan of the current view shares (engine/evaluation.py: the open leases, their ledger, free
        capacity, funding inputs), computed once per view: planning every live run stays one pass over the
        leases, not one per run."""
        snap = self.snap
        if self._book is None or self._book[0] is not snap:
            leases, book = open_ledger(snap, self.at)
            self._book = (snap, Evaluation(snap, self.at, leases=leases, book=book))
        return self._book[1]

    def emit(self, write: AnyWrite) -> None:
        self.writes.append(write)
        self.objects.apply(write)

    def settle(self, reservation: Reservation, state: str, reason: str, message: str) -> None:
        """Write ``state`` and ``reason`` into the Reservation's status."""
        self.emit(PatchStatus(
            kind="Reservation", namespace=reservation.namespace, name=reservation.name,
            status={"state": state, "reason": reason},
            cause=f"{state.lower()} {reservation.key}: {message}",
        ))
