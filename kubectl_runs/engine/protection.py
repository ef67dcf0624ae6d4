"""Who a lottery may not take right now (API.md §4, round 3; docs/reconciler.md "No thrash").

A preemption is only defensible when it is rare and when it helps. Three windows take a Run out of a lottery's
conflict set before the draw, so that an oversubscribed fleet does not preempt on a timer:

- ``AdmittedByActivation`` — a Run that started through an activation (it holds leases minted at or after the
  activation of one of its Reservations) is protected for ``min_run_time`` from its first such lease: what an
  activation gave, the next activation does not take back at once.
- ``RecentVictim`` — a Run that lost a group to a lottery (a lease closed ``RandomPreempt``) is protected for
  ``victim_protection`` from that closure: no Run is a lottery victim twice within the window.
- ``FinishingSoon`` — a Run whose reported completion (``status.eta.estimatedCompletion``) lies within
  ``eta_grace`` of the instant, before or after it, frees its GPUs by itself: it is not a victim.

Every fact comes from the snapshot (leases, Reservations, Runs), so ``plan`` shows the same protections the
reconciler applies, and the Reservation records the ones that decided its draw (``status.activation.protected``)
for ``seeds verify``. Pure: ``at`` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..model import ProtectedEntry, Snapshot
from ..timeutil import rfc3339

ADMITTED_BY_ACTIVATION, RECENT_VICTIM, FINISHING_SOON = "AdmittedByActivation", "RecentVictim", "FinishingSoon"
PROTECTION_REASONS = (ADMITTED_BY_ACTIVATION, RECENT_VICTIM, FINISHING_SOON)


@dataclass(frozen=True)
class Windows:
    """The protection windows (``kubectl runs reconcile --min-run-time / --victim-protection / --eta-grace``)."""

    min_run_time: timedelta = timedelta(hours=1)
    victim_protection: timedelta = timedelta(hours=6)
    eta_grace: timedelta = timedelta(minutes=15)

    def __post_init__(self) -> None:
        for name in ("min_run_time", "victim_protection", "eta_grace"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} must not be negative")


Protection = ProtectedEntry  # run, reason, until, detail: what the record keeps (status.activation.protected)


def protections(snapshot: Snapshot, at: datetime, windows: Windows) -> dict[str, Protection]:
    """Every Run protected at ``at``, by ``namespace/name``; when several windows hold, the one that lasts
    longest (then the first in PROTECTION_REASONS)."""
    found: dict[str, list[Protection]] = {}

    def add(p: Protection) -> None:
        if p.until > at:
            found.setdefault(p.run, []).append(p)

    activated: dict[str, list[datetime]] = {}
    for reservation in snapshot.reservations:
        activation = reservation.status.activation
        if activation is not None and activation.at is not None and reservation.status.state == "Activated":
            activated.setdefault(reservation.spec.run_ref.key, []).append(activation.decided_at or activation.at)
    first_after: dict[tuple[str, datetime], datetime] = {}  # (run, activation) -> its first lease at or after it
    for lease in snapshot.leases:  # order-free: ties are broken by reason and detail below
        status = lease.status
        if status.closed and status.closure_reason == "RandomPreempt" and status.ended is not None:
            if status.ended <= at:
                add(Protection(run=lease.run_key, reason=RECENT_VICTIM,
                               until=status.ended + windows.victim_protection,
                               detail=f"lost {lease.key} to a lottery at {rfc3339(status.ended)}"))
        elif lease.run_key in activated and lease.open_at(at):
            for when in activated[lease.run_key]:
                if lease.spec.start >= when:
                    key = (lease.run_key, when)
                    first_after[key] = min(first_after.get(key, lease.spec.start), lease.spec.start)
    for (run_key, _when), start in first_after.items():  # from its first such lease: growth does not renew it
        add(Protection(run=run_key, reason=ADMITTED_BY_ACTIVATION, until=start + windows.min_run_time,
                       detail=f"started through an activation at {rfc3339(start)}"))
    for run in snapshot.runs:
        eta = run.status.eta.estimated_completion if run.status.eta is not None else None
        if eta is not None and not run.finished and abs(eta - at) <= windows.eta_grace:
            add(Protection(run=run.key, reason=FINISHING_SOON, until=eta + windows.eta_grace,
                           detail=f"reports its completion at {rfc3339(eta)}"))
    # AdmittedByActivation first (it keeps a Run out of every remedy, the others out of the lottery), then the
    # one that lasts longest; ties by reason and detail, so the record does not depend on the snapshot's order
    rank = {reason: i for i, reason in enumerate(PROTECTION_REASONS)}
    return {run: min(ps, key=lambda p: (p.reason != ADMITTED_BY_ACTIVATION, -p.until.timestamp(), rank[p.reason],
                                        p.detail))
            for run, ps in sorted(found.items())}




def recent_victims(snapshot: Snapshot, at: datetime, window: timedelta) -> set[str]:
    """Runs that lost a lease to a lottery within ``window`` before ``at`` (``namespace/name``)."""
    return {
        lease.run_key
        for lease in snapshot.leases
        if lease.status.closed and lease.status.closure_reason == "RandomPreempt" and lease.status.ended is not None
        and at - window < lease.status.ended <= at
    }
