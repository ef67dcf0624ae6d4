"""``explain RUN``: everything about one run at one instant — its plan (engine/plan.py), how its open leases are
funded and by which lenders, its reservation, its leases, and its preemption history with each recorded draw
checked as ``seeds verify`` checks it (engine/verify.py). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from ..model import GPULease, Reservation, Run, Snapshot
from ..timeutil import rfc3339
from .accounting import BORROWED, OWNED, SHARED, UNFUNDED, LeaseCharge
from .findings import Finding, sort_findings
from .lease_faults import read_at, run_lease_findings, sponsor_findings
from .plan import Plan, open_ledger, plan_run, reservation_of
from .reports import finding_entries
from .run_reports import (
    ExplainReport,
    FundingSplit,
    LeaseEntry,
    LenderEntry,
    PreemptionEntry,
    TicketEntry,
    reservation_entry,
)
from .verify import RunDraw, run_draws

PREEMPTING_CLOSURES = ("RandomPreempt", "ReclaimUnfunded")


@dataclass(frozen=True)
class LeaseView:
    """One of the run's leases, with its funding at ``at`` when it is open then."""

    lease: GPULease
    open: bool
    charge: LeaseCharge | None  # the ledger's funding of it (open leases only)

    @property
    def cls(self) -> str | None:
        return self.charge.worst_class if self.charge is not None else None

    @property
    def entry(self) -> LeaseEntry:
        lease = self.lease
        payer = lease.payer
        return LeaseEntry(
            name=lease.key,
            group=lease.spec.group,
            role=lease.spec.slice.role,
            gpus=lease.gpus,
            nodes=sorted({slot.rpartition("#")[0] or slot for slot in lease.spec.slice.slots}),
            paid_by="/".join(payer) if payer else None,
            start=rfc3339(lease.spec.start),
            open=self.open,
            class_=self.cls,
            closed=lease.status.closed,
            ended=rfc3339(lease.status.ended),
            closure_reason=lease.status.closure_reason,
        )


@dataclass(frozen=True)
class Preemption:
    """GPUs a reservation's activation took from the run, and the seed that anyone can replay."""

    reservation: str
    seed: str
    at: datetime | None
    gpus: int
    verified: bool | None  # `seeds verify` of that reservation; None when it has no recorded draw here
    closure: str | None = None  # RandomPreempt or ReclaimUnfunded, when the leases say


@dataclass(frozen=True)
class Explanation:
    run: Run
    at: datetime
    plan: Plan
    owned: int
    shared: int
    borrowed: int
    unfunded: int
    lenders: tuple[tuple[str, int], ...]  # (owner, GPUs) the run borrows from
    reservation: Reservation | None
    preemptions: tuple[Preemption, ...]
    leases: tuple[LeaseView, ...]  # open first, then the most recent
    events: tuple[dict, ...] | None = None  # live only: the run's recent core/v1 Events
    draws: tuple[RunDraw, ...] = ()  # the recorded draws this run was in: its tickets and places, verified
    findings: tuple[Finding, ...] = ()  # what is wrong with its leases and sponsors (engine/lease_faults.py)

    @property
    def report(self) -> ExplainReport:
        """The value ``-o json`` prints; each preemption with the run's tickets when its draw is recorded."""
        draws = {(d.reservation, d.seed): d for d in self.draws}
        preemptions = []
        for p in self.preemptions:
            draw = draws.get((p.reservation, p.seed))
            entry = PreemptionEntry(p.reservation, p.seed, rfc3339(p.at), p.gpus, p.verified)
            if draw is not None:
                entry = msgspec.structs.replace(
                    entry,
                    tickets=[TicketEntry(t.group, t.ticket, t.place, t.taken) for t in draw.tickets],
                    conflict_set_size=draw.conflict_set_size,
                    differences=list(draw.differences),
                )
            preemptions.append(entry)
        return ExplainReport(
            run=self.run.key,
            phase=self.run.status.phase,
            width=self.plan.width,
            funding=FundingSplit(self.owned, self.shared, self.borrowed, self.unfunded,
                                 [LenderEntry(owner, gpus) for owner, gpus in self.lenders]),
            plan=self.plan.report,
            reservation=reservation_entry(self.reservation),
            preemptions=preemptions,
            leases=[view.entry for view in self.leases],
            findings=finding_entries(list(self.findings)),
            events=None if self.events is None else [dict(e) for e in self.events],
        )


def explain_run(
    snapshot: Snapshot, run: Run, at: datetime, *, events: Sequence[Mapping[str, Any]] | None = None,
    read: datetime | None = None,
) -> Explanation:
    """Everything about ``run`` at ``at``: its plan, how its open leases are funded (and by which lenders), its
    reservation, its preemption history (from its leases closed by RandomPreempt/ReclaimUnfunded with
    ``status.preemption`` and from ``status.preemptions``, each checked like ``seeds verify``), its leases, and
    — when given (live) — its recent Events; and the findings about its leases (the slots of the open ones, the
    times of all: engine/lease_faults.py) and its sponsors. ``read``: the wall clock when the objects were read,
    for a snapshot without a stamp (``FutureStart``)."""
    leases, book = open_ledger(snapshot, at)
    result = plan_run(snapshot, run, at, leases=leases, book=book)
    mine = snapshot.leases_by_run.get(run.key, [])
    charges = {lease.key: book.charges.get(lease.key) for lease in mine}
    split = {cls: 0 for cls in (OWNED, SHARED, BORROWED, UNFUNDED)}
    lenders: dict[str, int] = {}
    for charge in charges.values():
        if charge is None:
            continue
        for cls in split:
            split[cls] += getattr(charge, cls)
        if charge.borrowed and charge.lender:
            lenders[charge.lender] = lenders.get(charge.lender, 0) + charge.borrowed
    views = sorted(
        (LeaseView(lease, charges[lease.key] is not None, charges[lease.key]) for lease in mine),
        key=lambda v: (not v.open, -v.lease.spec.start.timestamp(), v.lease.key),
    )
    draws = tuple(run_draws(snapshot, run.key))
    open_keys = {key: charge for key, charge in charges.items() if charge is not None}
    found = run_lease_findings(snapshot, mine, open_keys, read_at(snapshot, at, read))
    found += sponsor_findings(snapshot, run)
    return Explanation(
        run=run,
        at=at,
        plan=result,
        owned=split[OWNED],
        shared=split[SHARED],
        borrowed=split[BORROWED],
        unfunded=split[UNFUNDED],
        lenders=tuple(sorted(lenders.items())),
        reservation=reservation_of(snapshot, run),
        preemptions=tuple(preemptions_of(run, mine, draws)),
        leases=tuple(views),
        events=None if events is None else tuple(events),
        draws=draws,
        findings=tuple(sort_findings(found)),
    )


def preemptions_of(run: Run, mine: Sequence[GPULease], draws: Sequence[RunDraw]) -> list[Preemption]:
    found: dict[tuple[str, str], dict] = {}
    for lease in mine:
        status = lease.status
        if not status.closed or status.closure_reason not in PREEMPTING_CLOSURES or status.preemption is None:
            continue
        key = (status.preemption.reservation, status.preemption.seed)
        entry = found.setdefault(key, {"at": None, "gpus": 0, "closure": status.closure_reason})
        entry["gpus"] += lease.gpus
        if status.ended is not None and (entry["at"] is None or status.ended > entry["at"]):
            entry["at"] = status.ended
    for record in run.status.preemptions:
        key = (record.reservation, record.seed)
        if key not in found:
            found[key] = {"at": record.at, "gpus": record.gpus, "closure": None}
        elif found[key]["at"] is None:
            found[key]["at"] = record.at
    if not found:
        return []
    verdicts = {(d.reservation, d.seed): d.verified for d in draws}
    out = [
        Preemption(reservation=r, seed=s, at=e["at"], gpus=e["gpus"], verified=verdicts.get((r, s)),
                   closure=e["closure"])
        for (r, s), e in found.items()
    ]
    return sorted(out, key=lambda p: (p.at is None, p.at or datetime.min, p.reservation, p.seed))
