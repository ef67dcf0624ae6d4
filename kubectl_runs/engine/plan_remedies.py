"""The last stage of a plan: what would fix its deficit (API.md §3 Remedies), in the order a plan lists them —
``ReclaimUnfunded``, ``DropSpare``, ``Shrink`` (the candidates of engine/remedies.py, only as many as the
capacity deficit takes), ``Borrow`` (the funding stage's lenders, only as much as the funding deficit takes),
``Wait`` (the forecast's earliest start, with the funding walk it found there) and ``Lottery``. Reads the earlier
stages' values; walks nothing again.
"""

from __future__ import annotations

from datetime import datetime

from ..model import Reservation, Run
from ..text import counted, when
from .codes import Confidence, RemedyKind
from .forecast import Forecast
from .funding import Funding
from .lottery import derive_seed
from .remedies import RemedyCandidates
from .run_reports import Remedy

RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, BORROW, WAIT, LOTTERY = RemedyKind
WINDOW_ALIGNED = Confidence.WINDOW_ALIGNED


def remedies(
    run: Run,
    reservation: Reservation | None,
    gentle: RemedyCandidates,
    money: Funding,
    outlook: Forecast,
    at: datetime,
    *,
    capacity_deficit: int,
    funding_deficit: int,
) -> list[Remedy]:
    """The remedies of a plan short by ``capacity_deficit`` / ``funding_deficit`` GPUs, in API.md order."""
    out: list[Remedy] = []
    left = capacity_deficit
    if left:
        for group in gentle.reclaim:
            if left <= 0:
                break
            out.append(Remedy(RECLAIM_UNFUNDED, group.run, group.gpus,
                              f"reclaim unfunded group {group.group} of {group.run} (frees {group.gpus})"))
            left -= group.gpus
        for drop in gentle.spares:
            if left <= 0:
                break
            out.append(Remedy(DROP_SPARE, drop.lease.key, drop.gpus,
                              f"drop spare {drop.lease.key} of {drop.run} (frees {drop.gpus})"))
            left -= drop.gpus
        for step in gentle.shrinks:
            if left <= 0:
                break
            out.append(Remedy(SHRINK, step.run, step.gpus,
                              f"shrink {step.run} from {step.from_gpus} to {step.to_gpus} (frees {step.gpus})"))
            left -= step.gpus
    wanted = funding_deficit
    for lender in money.lenders:
        if wanted <= 0:
            break
        give = min(lender.extra, wanted)
        lending = lender.envelope.lending
        cap = (
            f"lending allows {lending.max_concurrency}, {lender.room} free"
            if lending is not None and lending.max_concurrency is not None
            else f"lends without a cap, {lender.room} free"
        )
        out.append(Remedy(BORROW, lender.owner, give, f"borrow {give} from {lender.owner} ({cap}): {lender.change}"))
        wanted -= give
    start = outlook.earliest_start
    if start is not None and start > at:
        if outlook.confidence == WINDOW_ALIGNED and outlook.opened:
            opened = {c.key: c for c in outlook.opened}
            at_start = outlook.walk.sources if outlook.walk is not None else ()
            supplying = [s for s in at_start if s.key in opened and s.usable > 0]
            gives = sum(s.usable for s in supplying)
            if supplying:
                first = opened[supplying[0].key]
                more = f" (and {len(supplying) - 1} more)" if len(supplying) > 1 else ""
                out.append(Remedy(WAIT, first.owner, gives,
                                  f"wait until {when(start, at)}, when {first.label} of {first.owner}{more} "
                                  f"opens its window: {gives} GPUs of headroom"))
        else:
            released = outlook.releases
            gpus = sum(r.gpus for r in released)
            last = released[-1].run if released else run.key
            who = (
                f"{released[0].run} reports completion by then" if len(released) == 1
                else f"{len(released)} runs report completion by then (the last, {last})"
            )
            out.append(Remedy(WAIT, last, gpus, f"wait until {when(start, at)}: {who}, freeing {gpus}"))
    if left > 0 and gentle.conflict:
        pool = gentle.conflict_gpus
        gpus = min(left, pool)
        target = reservation.key if reservation is not None else run.key
        by = (f"when reservation {reservation.key} activates ({when(reservation.spec.earliest_start, at)}, seed "
              f"{derive_seed(reservation.key, reservation.spec.earliest_start)})" if reservation is not None
              else "when a reservation for it activates")
        out.append(Remedy(LOTTERY, target, gpus,
                          f"{by}, a seeded lottery over {counted(len(gentle.conflict), 'group')} in scope frees the remaining "
                          f"{gpus} (unfunded first, then borrowed, shared, owned)"))
    return out
