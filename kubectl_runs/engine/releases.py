"""What runs that report their completion give back (API.md §3 Forecast): ``Release`` is one run's reported
completion (``status.eta``) and the GPUs it frees in a scope, ``releases`` lists those of a scope soonest first,
and ``GivenBack`` counts what the releases give back by a later instant and walks the funding there
(``state_at``: every envelope's room then). engine/forecast.py asks it at each instant. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ..model import Snapshot
from .accounting import BORROWED, EnvelopeKey, LeaseCharge, Ledger, relation
from .funding import CLOSED, Candidate, CapKey, EnvelopeState, FundingState, Walk, walk
from .remedies import Freed, ScopeNodes

# --- reported completions ------------------------------------------------------------------------------------


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


# --- the funding room at a later instant ----------------------------------------------------------------------


@dataclass
class EnvelopeGivenBack:
    """GPUs given back to one envelope by leases that close (reported ETAs)."""

    funded: int = 0  # funded slots (owned + shared + borrowed) of leases charged to it
    borrowed: int = 0  # of which borrowed
    charged: int = 0  # every slot charged to it (funded or not)
    charged_borrowed: int = 0  # slots charged by owners outside its family


@dataclass
class GivenBack:
    """What the releases counted so far give back, per envelope of ``book`` (the ledger at the forecast's start)."""

    book: Ledger
    by_envelope: dict[EnvelopeKey, EnvelopeGivenBack] = field(default_factory=dict)

    def add(self, release: Release) -> None:
        """Count every open lease of ``release``'s run as given back."""
        for charge in release.charges:
            self._add(charge)

    def walk_at(self, when: datetime, candidates: Iterable[Candidate], *, borrow_left: int | None) -> Walk:
        """The funding walk at ``when`` (later than the ledger's instant) with what is given back by then."""
        return walk(candidates, state_at(self.book, when, self), borrow_left=borrow_left)

    def _add(self, charge: LeaseCharge) -> None:
        if charge.envelope is None:
            return
        usage = self.book.envelopes.get(charge.envelope)
        envelope_owner = usage.owner if usage is not None else None
        rel = self.by_envelope.setdefault(charge.envelope, EnvelopeGivenBack())
        gpus = charge.lease.gpus
        rel.funded += charge.funded
        rel.borrowed += charge.borrowed
        rel.charged += gpus
        if envelope_owner is not None and relation(charge.lease.spec.owner, envelope_owner) == BORROWED:
            rel.charged_borrowed += gpus


def state_at(book: Ledger, when: datetime, given_back: GivenBack) -> FundingState:
    """Every envelope's room at ``when`` (later than the ledger's instant) once ``given_back`` is given back:
    an envelope open now keeps its funded GPUs less the released ones; one whose window opens by ``when``
    funds the leases charged to it that are still open (they are unfunded until it opens); one whose window
    has closed gives nothing. Aggregate caps are recomputed from their members."""
    used: dict[EnvelopeKey, int] = {}
    envelopes: dict[EnvelopeKey, EnvelopeState] = {}
    empty = EnvelopeGivenBack()
    for key, usage in book.envelopes.items():
        envelope = usage.envelope
        rel = given_back.by_envelope.get(key, empty)
        if not envelope.window_contains(when):
            envelopes[key] = CLOSED
            used[key] = 0
            continue
        if usage.window_active:
            in_use = max(0, usage.used - rel.funded)
            borrowed = max(0, usage.borrowed - rel.borrowed)
        else:
            charged = sum(c.lease.gpus for c in usage.charges) - rel.charged
            charged_borrowed = sum(
                c.lease.gpus for c in usage.charges if relation(c.lease.spec.owner, usage.owner) == BORROWED
            ) - rel.charged_borrowed
            in_use = min(envelope.concurrency, max(0, charged))
            borrowed = max(0, charged_borrowed)
        used[key] = in_use
        lending = envelope.lending
        if lending is None or not lending.allow:
            lend_room: int | None = 0
        elif lending.max_concurrency is None:
            lend_room = None
        else:
            lend_room = max(0, lending.max_concurrency - borrowed)
        envelopes[key] = EnvelopeState(open=True, headroom=max(0, envelope.concurrency - in_use), lend_room=lend_room)
    caps: dict[CapKey, int] = {}
    for aggregate in book.aggregates:
        ns, name = aggregate.budget.metadata.namespace, aggregate.budget.metadata.name
        in_use = sum(used.get((ns, name, member), 0) for member in aggregate.envelopes)
        caps[(ns, name, aggregate.name)] = max(0, aggregate.max_concurrency - in_use)
    return FundingState(envelopes=envelopes, caps=caps)
