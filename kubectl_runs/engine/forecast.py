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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .accounting import Ledger
from .codes import Confidence
from .funding import Candidate, Funding, Walk
from .packing import place
from .releases import GivenBack, Release

REPORTED, WINDOW_ALIGNED, UNKNOWN = Confidence
CONFIDENCES = tuple(Confidence)


@dataclass(frozen=True)
class Forecast:
    earliest_start: datetime | None
    confidence: str
    releases: tuple[Release, ...] = ()  # the reported completions counted up to earliestStart
    opened: tuple[Candidate, ...] = ()  # window-aligned: the envelopes whose windows opened by earliestStart
    walk: Walk | None = None  # the funding walk at earliestStart, when it is later than the plan's instant


def forecast(
    *,
    at: datetime,
    need: int,
    money: Funding,
    book: Ledger,
    free: Mapping[str, int],
    unit: int | None,
    spread: bool,
    remedies_by_run: Mapping[str, Mapping[str, int]],
    reported: Sequence[Release],
) -> Forecast:
    """The earliest instant >= ``at`` at which the run fits and is funded, with the funding walk there.

    ``money``: the funding stage at ``at`` (its candidates, in walk order, and what the run may still borrow);
    ``book``: the ledger at ``at``; ``free``: free GPUs per domain on candidate nodes now; ``unit``/``spread``:
    the run's placement rule (packing.place); ``remedies_by_run``: schedulable GPUs per domain each run's gentle
    remedies would free; ``reported``: releases (``releases``). Funding is walked only at an instant where the
    run fits, once the releases reported by then are given back."""
    if need <= 0:
        return Forecast(at, REPORTED)
    fundable_now = money.fundable
    per_domain = dict(free)
    for freed in remedies_by_run.values():
        for domain, gpus in freed.items():
            per_domain[domain] = per_domain.get(domain, 0) + gpus
    if fundable_now >= need and place(per_domain, unit, spread)[0] >= need:
        return Forecast(at, REPORTED)
    later = sorted((c for c in money.candidates if c.admitted and c.envelope.start > at),
                   key=lambda c: (c.envelope.start, c.key))
    window_starts = {c.envelope.start for c in later}
    instants = sorted({r.at for r in reported} | set(window_starts))
    given_back = GivenBack(book)
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
            given_back.add(release)
        if place(per_domain, unit, spread)[0] < need:
            continue
        found = given_back.walk_at(when, money.candidates, borrow_left=money.borrow_left)
        if found.fundable >= need:
            counted = tuple(reported[:taken])
            if when in window_starts and fund_before < need:
                opened = tuple(c for c in later if c.envelope.start <= when)
                return Forecast(when, WINDOW_ALIGNED, counted, opened, found)
            return Forecast(when, REPORTED, counted, walk=found)
        fund_before = found.fundable
    return Forecast(None, UNKNOWN)
