"""When could a run start: the earliest instant at which it fits and is funded (API.md §3 Forecast).

Only facts go in. GPUs come back when a run holding them in scope reports its completion
(``status.eta.estimatedCompletion``, written by the workload or an operator); funding comes back with the same
releases and when a closed envelope window of the run's family (or sponsors) opens. At activation the
reservation's resolver also reclaims unfunded groups, drops spares and shrinks elastic runs (engine/remedies.py),
so the GPUs those would free count as well, as long as their run has not already been counted as released.

``earliestStart`` is the first of those instants — now, a reported completion, or a window start — at which
the placeable GPUs and the fundable GPUs both cover the need. Its confidence is ``reported`` when reported
completions (or the present state) get it there, ``window-aligned`` when a window opening is what makes it
fundable, and ``unknown`` when nothing reported gets it there: then there is no ``earliestStart`` at all,
never a made-up one. An ETA that has already passed is stale and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..model import Snapshot
from .accounting import LeaseCharge, Ledger
from .codes import Confidence
from .funding import Candidate, Releases
from .packing import place
from .remedies import Freed, ScopeNodes

REPORTED, WINDOW_ALIGNED, UNKNOWN = Confidence
CONFIDENCES = tuple(Confidence)


@dataclass(frozen=True)
class Release:
    """A run that reports when it will complete, and what it then gives back."""

    run: str
    at: datetime  # its status.eta.estimatedCompletion
    source: str  # who reported it (status.eta.source)
    gpus: int  # GPUs it holds in scope
    freed: Freed  # of which on schedulable nodes of the scope, by domain
    charges: tuple[LeaseCharge, ...]  # every open lease of the run (for the funding it gives back)


def releases(
    snapshot: Snapshot, book: Ledger, nodes: ScopeNodes, at: datetime, *, exclude_run: str | None = None
) -> list[Release]:
    """Runs holding GPUs in scope whose reported completion is after ``at``, soonest first."""
    by_run: dict[str, list[LeaseCharge]] = {}
    for charge in book.charges.values():
        run_key = charge.lease.run_key
        if run_key != exclude_run:
            by_run.setdefault(run_key, []).append(charge)
    out = []
    runs = snapshot.runs_by_key
    for run_key, charges in by_run.items():
        run = runs.get(run_key)
        eta = run.status.eta if run is not None else None
        if eta is None or eta.estimated_completion is None or eta.estimated_completion <= at:
            continue
        in_scope = [c.lease for c in charges if nodes.in_scope(c.lease)]
        if not in_scope:
            continue
        out.append(
            Release(
                run=run_key,
                at=eta.estimated_completion,
                source=eta.source,
                gpus=sum(lease.gpus for lease in in_scope),
                freed=nodes.freed(in_scope),
                charges=tuple(charges),
            )
        )
    return sorted(out, key=lambda r: (r.at, r.run))


@dataclass(frozen=True)
class Forecast:
    earliest_start: datetime | None
    confidence: str
    releases: tuple[Release, ...] = ()  # the reported completions counted up to earliestStart
    opened: tuple[Candidate, ...] = ()  # window-aligned: the envelopes whose windows opened by earliestStart


FundableAt = Callable[[datetime, Releases], int]


def forecast(
    *,
    at: datetime,
    need: int,
    fundable_now: int,
    free: Mapping[str, int],
    unit: int | None,
    spread: bool,
    remedies_by_run: Mapping[str, Mapping[str, int]],
    reported: Sequence[Release],
    windows: Sequence[Candidate],
    fundable_at: FundableAt,
    envelope_owner: Callable[[tuple[str, str, str]], str | None],
) -> Forecast:
    """The earliest instant >= ``at`` at which the run fits and is funded.

    ``free``: free GPUs per domain on candidate nodes now; ``unit``/``spread``: the run's placement rule
    (packing.place); ``remedies_by_run``: schedulable GPUs per domain each run's gentle remedies would free;
    ``reported``: releases (``releases``); ``windows``: candidate envelopes whose window opens after ``at``;
    ``fundable_at(t, released)``: fundable GPUs at ``t`` once ``released`` are given back;
    ``envelope_owner``: the owner of an envelope key (to class released slots)."""
    if need <= 0:
        return Forecast(at, REPORTED)
    per_domain = dict(free)
    for freed in remedies_by_run.values():
        for domain, gpus in freed.items():
            per_domain[domain] = per_domain.get(domain, 0) + gpus
    if fundable_now >= need and place(per_domain, unit, spread)[0] >= need:
        return Forecast(at, REPORTED)
    later = sorted((c for c in windows if c.envelope.start > at), key=lambda c: (c.envelope.start, c.key))
    window_starts = {c.envelope.start for c in later}
    instants = sorted({r.at for r in reported} | set(window_starts))
    given_back = Releases()
    fund_before = fundable_now
    taken = 0
    for when in instants:
        while taken < len(reported) and reported[taken].at <= when:
            release = reported[taken]
            taken += 1
            for domain, gpus in release.freed:  # its GPUs come back; its remedies are no longer needed
                per_domain[domain] = per_domain.get(domain, 0) + gpus
            for domain, gpus in remedies_by_run.get(release.run, {}).items():
                per_domain[domain] -= gpus
            for charge in release.charges:
                given_back.add(charge, envelope_owner(charge.envelope) if charge.envelope else None)
        if place(per_domain, unit, spread)[0] < need:
            continue
        fund = fundable_at(when, given_back)
        if fund >= need:
            counted = tuple(reported[:taken])
            if when in window_starts and fund_before < need:
                opened = tuple(c for c in later if c.envelope.start <= when)
                return Forecast(when, WINDOW_ALIGNED, counted, opened)
            return Forecast(when, REPORTED, counted)
        fund_before = fund
    return Forecast(None, UNKNOWN)
