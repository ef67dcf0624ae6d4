"""Fundable GPUs: which envelopes could pay for a run's new GPUs, in what order, and how many (API.md §3 Plan).

The walk follows the family order — the run's own envelopes, then its parent's and further ancestors' (nearest
first), then its siblings', then, when ``spec.funding.allowBorrow``, the envelopes of its ``sponsors`` (in the
order listed) — and counts only envelopes of the run's flavor whose window contains the instant and whose
selector matches at least one candidate node. Each envelope gives its headroom, limited by:

- the aggregate caps of its Budget (what one envelope gives is no longer there for the cap's other members);
- for borrowing (a sponsor outside the family): its lending ACL (``lending.allow`` and a ``to`` pattern that
  matches the run's owner, else nothing), its ``lending.maxConcurrency`` room, and the run's
  ``maxBorrowGPUs`` less what the run already borrows.

A sponsor that is family of the run (a descendant, say) is charged as *shared*, so it needs no ACL and does
not count as borrowing; one already visited as family is not counted twice.

``funding`` reads the headroom of the ledger at ``at``; ``releases.state_at`` gives the same inputs at a later
instant after some runs have given GPUs back (for forecasts). GPUs throughout. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..model import Envelope, Node, Run
from .accounting import EnvelopeKey, EnvelopeUsage, Ledger
from .codes import Relation
from .owners import any_pattern_matches, is_ancestor, is_family, parent, segments

OWN, ANCESTOR, SIBLING, SPONSOR = Relation
RELATIONS = tuple(Relation)

CapKey = tuple[str, str, str]  # (namespace, budget, aggregate cap name)


@dataclass(frozen=True)
class Candidate:
    """An envelope that may fund the run, whatever its window: of the run's flavor, selecting a candidate
    node, and own, ancestor, sibling or sponsor."""

    key: EnvelopeKey
    owner: str
    relation: str
    envelope: Envelope
    borrows: bool  # lent across the family: ACL, lending.maxConcurrency and maxBorrowGPUs apply
    admitted: bool  # the lending ACL admits the run's owner (always True when not borrowing)
    caps: tuple[CapKey, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.key[0]}/{self.key[1]} envelope {self.key[2]}"


@dataclass(frozen=True)
class EnvelopeState:
    """What one envelope can give at one instant."""

    open: bool  # its window contains the instant
    headroom: int  # GPUs it can still fund (0 when closed)
    lend_room: int | None  # GPUs it may still lend (lending.maxConcurrency − borrowed); None = no cap


@dataclass(frozen=True)
class FundingState:
    envelopes: Mapping[EnvelopeKey, EnvelopeState]
    caps: Mapping[CapKey, int]  # headroom of each aggregate cap


@dataclass(frozen=True)
class FundingSource:
    """One envelope counted in the walk (API.md §5 plan ``funding.sources[]``)."""

    key: EnvelopeKey
    owner: str
    relation: str
    headroom: int
    usable: int  # what the walk takes from it, after caps, lending and maxBorrowGPUs

@dataclass(frozen=True)
class Walk:
    fundable: int
    sources: tuple[FundingSource, ...]
    borrow_cut: int  # GPUs sponsors could have lent beyond maxBorrowGPUs


@dataclass(frozen=True)
class Lender:
    """An envelope outside the family that would lend the run more than the walk counts from it: what a
    ``Borrow`` remedy proposes, and the change to the run's spec it takes."""

    key: EnvelopeKey
    owner: str
    envelope: Envelope
    room: int  # GPUs it could lend now: its headroom within lending.maxConcurrency and its caps
    counted: int  # GPUs the walk already takes from it
    change: str  # what to change in the run's spec.funding

    @property
    def extra(self) -> int:
        return self.room - self.counted


@dataclass(frozen=True)
class Funding:
    """The funding half of a plan at one instant."""

    owner: str | None  # the owner of the run's namespace (None: no Budget, or unbound)
    unbound_owners: tuple[str, ...]  # the owners an unbound namespace's Budgets name
    flavor: str
    allow_borrow: bool
    borrow_left: int | None  # maxBorrowGPUs less what the run already borrows; None = no limit
    candidates: tuple[Candidate, ...]  # every window; sponsors only when allowBorrow
    unselected: tuple[EnvelopeKey, ...]  # family/sponsor envelopes of the flavor selecting no candidate node
    walk: Walk
    lenders: tuple[Lender, ...] = ()

    @property
    def fundable(self) -> int:
        return self.walk.fundable

    @property
    def sources(self) -> tuple[FundingSource, ...]:
        return self.walk.sources

    @property
    def unbound(self) -> bool:
        return bool(self.unbound_owners)

    def usable_by_relation(self) -> dict[str, int]:
        """GPUs the walk takes per relation, in walk order (own, ancestor, sibling, sponsor; those it visited)."""
        out: dict[str, int] = {}
        for source in self.walk.sources:
            out[source.relation] = out.get(source.relation, 0) + source.usable
        return out

    @property
    def denied(self) -> tuple[Candidate, ...]:
        """Sponsor envelopes whose lending ACL refuses the run's owner."""
        return tuple(c for c in self.candidates if c.borrows and not c.admitted)

    def open_candidates(self, states: FundingState) -> list[Candidate]:
        return [c for c in self.candidates if states.envelopes.get(c.key, CLOSED).open]



CLOSED = EnvelopeState(open=False, headroom=0, lend_room=0)  # a window that is not open: gives nothing


# --- which envelopes ---------------------------------------------------------------------------------------


def family_relation(run_owner: str, envelope_owner: str) -> tuple[str, int] | None:
    """(relation, rank within it) of an envelope owner in the run owner's funding order: own, ancestor (the
    parent is 1, its parent 2, …), sibling (same parent); None when none of these (descendants are family for
    charging, but not in the funding order of API.md §3 Plan)."""
    if envelope_owner == run_owner:
        return OWN, 0
    if is_ancestor(envelope_owner, run_owner):
        return ANCESTOR, len(segments(run_owner)) - len(segments(envelope_owner))
    parent_of_run = parent(run_owner)
    if parent_of_run is not None and parent(envelope_owner) == parent_of_run:
        return SIBLING, 0
    return None


class _Selectors:
    """Whether an envelope's selector matches any of a set of nodes, cached by the selector's keys (a few
    distinct label combinations stand for thousands of nodes)."""

    def __init__(self, nodes: Sequence[Node]):
        self.nodes = nodes
        self.projections: dict[tuple[str, ...], set[tuple[str | None, ...]]] = {}

    def any_selected(self, envelope: Envelope) -> bool:
        if not envelope.selector:
            return bool(self.nodes)
        keys = tuple(sorted(envelope.selector))
        seen = self.projections.get(keys)
        if seen is None:
            seen = {tuple(n.metadata.labels.get(k) for k in keys) for n in self.nodes}
            self.projections[keys] = seen
        for values in seen:
            if all(
                have is not None and (envelope.selector[k] == "*" or envelope.selector[k] == have)
                for k, have in zip(keys, values, strict=True)
            ):
                return True
        return False


def _caps_of(usage: EnvelopeUsage) -> tuple[CapKey, ...]:
    budget = usage.budget
    return tuple(
        (budget.metadata.namespace, budget.metadata.name, cap.name)
        for cap in budget.spec.aggregate_caps
        if usage.envelope.name in cap.envelopes
    )


def _admits(envelope: Envelope, owner: str) -> bool:
    lending = envelope.lending
    return lending is not None and lending.allow and any_pattern_matches(lending.to, owner)


def state_now(book: Ledger) -> FundingState:
    """Every envelope's and aggregate cap's room at the ledger's instant."""
    envelopes = {
        key: EnvelopeState(open=u.window_active, headroom=u.headroom, lend_room=u.borrowed_room)
        for key, u in book.envelopes.items()
    }
    caps = {(a.budget.metadata.namespace, a.budget.metadata.name, a.name): a.headroom for a in book.aggregates}
    return FundingState(envelopes=envelopes, caps=caps)


def run_borrowed(book: Ledger, run_key: str) -> int:
    """GPUs the run's open leases borrow at the ledger's instant."""
    return sum(c.borrowed for c in book.charges.values() if c.lease.run_key == run_key)


@dataclass(frozen=True)
class FundingInputs:
    """What the funding walk of every run of one flavor on one set of candidate nodes reads, whoever the run:
    the flavor's envelopes (in the ledger's order), every envelope's room now, and the selector matcher of the
    candidate nodes. ``funding_inputs`` computes it; a batch of plans computes it once (engine/evaluation.py)."""

    flavor: str
    envelopes: tuple[tuple[EnvelopeKey, EnvelopeUsage], ...]
    state: FundingState
    selectors: _Selectors
    orders: dict = field(default_factory=dict, compare=False)  # (owner, sponsors, allowBorrow) -> _Order


def funding_inputs(book: Ledger, flavor: str, nodes: Sequence[Node], state: FundingState | None = None) -> FundingInputs:
    """The funding inputs of ``flavor`` on candidate ``nodes`` at the ledger's instant (``state``: the ledger's
    ``state_now``, when already computed)."""
    return FundingInputs(
        flavor=flavor,
        envelopes=tuple((key, usage) for key, usage in book.envelopes.items() if usage.envelope.flavor == flavor),
        state=state_now(book) if state is None else state,
        selectors=_Selectors(nodes),
    )


def funding(
    book: Ledger,
    run: Run,
    nodes: Sequence[Node],
    *,
    borrowed_now: int | None = None,
    inputs: FundingInputs | None = None,
) -> Funding:
    """The funding walk for ``run`` at the ledger's instant. ``nodes`` are the candidate nodes (an envelope
    counts only if its selector matches one of them). ``borrowed_now``: GPUs the run already borrows
    (computed from the ledger when not given). ``inputs``: ``funding_inputs(book, run's flavor, nodes)`` when
    already computed (the same values: only the work is shared)."""
    flavor = run.spec.resources.gpu_type
    spec_funding = run.spec.funding
    allow_borrow = bool(spec_funding and spec_funding.allow_borrow)
    sponsors = tuple(spec_funding.sponsors) if spec_funding else ()
    namespace = run.metadata.namespace
    unbound = book.owners.unbound.get(namespace, ())
    owner = None if unbound else book.owners.owner_of(namespace)
    max_borrow = spec_funding.max_borrow_gpus if spec_funding else None
    if max_borrow is not None:
        already = run_borrowed(book, run.key) if borrowed_now is None else borrowed_now
        borrow_left: int | None = max(0, max_borrow - already)
    else:
        borrow_left = None
    if owner is None:
        empty = Walk(fundable=0, sources=(), borrow_cut=0)
        return Funding(
            owner=None, unbound_owners=tuple(unbound), flavor=flavor, allow_borrow=allow_borrow,
            borrow_left=borrow_left, candidates=(), unselected=(), walk=empty,
        )

    if inputs is None or inputs.flavor != flavor:
        inputs = funding_inputs(book, flavor, nodes)
    order = inputs.orders.get((owner, sponsors, allow_borrow))
    if order is None:  # the same for every run of this owner, sponsors and allowBorrow
        order = inputs.orders[(owner, sponsors, allow_borrow)] = _order(owner, inputs, sponsors, allow_borrow)
    candidates = order.candidates
    state = inputs.state
    result = walk(candidates, state, borrow_left=borrow_left)
    lenders = _lenders(order.pool, state, result, sponsors=sponsors, allow_borrow=allow_borrow, max_borrow=max_borrow)
    return Funding(
        owner=owner, unbound_owners=(), flavor=flavor, allow_borrow=allow_borrow, borrow_left=borrow_left,
        candidates=candidates, unselected=order.unselected, walk=result, lenders=lenders,
    )


@dataclass(frozen=True)
class _Order:
    """The walk's candidates in order, the envelopes selecting no candidate node, the possible lenders."""

    candidates: tuple[Candidate, ...]
    unselected: tuple[EnvelopeKey, ...]
    pool: tuple[tuple[tuple, EnvelopeKey, str, Envelope, tuple[CapKey, ...]], ...]


def _order(owner: str, inputs: FundingInputs, sponsors: tuple[str, ...], allow_borrow: bool) -> _Order:
    selectors = inputs.selectors
    ranked: list[tuple[tuple, Candidate]] = []
    unselected: list[EnvelopeKey] = []
    others: list[tuple[EnvelopeKey, EnvelopeUsage]] = []  # outside the order: possible lenders
    for key, usage in inputs.envelopes:
        envelope = usage.envelope
        env_owner = usage.owner
        place = family_relation(owner, env_owner)
        if place is not None:
            rel, rank = place
            order = (RELATIONS.index(rel), rank, env_owner, key)
            candidate = Candidate(key, env_owner, rel, envelope, borrows=False, admitted=True, caps=_caps_of(usage))
        elif env_owner in sponsors and allow_borrow:
            borrows = not is_family(owner, env_owner)
            admitted = not borrows or _admits(envelope, owner)
            order = (RELATIONS.index(SPONSOR), sponsors.index(env_owner), env_owner, key)
            candidate = Candidate(key, env_owner, SPONSOR, envelope, borrows=borrows, admitted=admitted,
                                  caps=_caps_of(usage))
        else:
            others.append((key, usage))
            continue
        if not selectors.any_selected(envelope):
            unselected.append(key)
            continue
        ranked.append((order, candidate))
    candidates = tuple(c for _, c in sorted(ranked, key=lambda pair: pair[0]))
    return _Order(candidates, tuple(sorted(unselected)), _lender_pool(owner, candidates, others, selectors, sponsors))


def walk(candidates: Iterable[Candidate], state: FundingState, *, borrow_left: int | None) -> Walk:
    """Take headroom from ``candidates`` in order (open windows only), within aggregate caps, lending rooms
    and ``borrow_left`` (GPUs the run may still borrow; None = no limit)."""
    cap_room = dict(state.caps)
    sources: list[FundingSource] = []
    fundable = cut = 0
    for candidate in candidates:
        env = state.envelopes.get(candidate.key, CLOSED)
        if not env.open or (candidate.borrows and not candidate.admitted):
            continue
        usable = env.headroom
        if candidate.borrows and env.lend_room is not None:
            usable = min(usable, env.lend_room)
        for cap in candidate.caps:
            usable = min(usable, cap_room.get(cap, usable))
        usable = max(0, usable)
        if candidate.borrows and borrow_left is not None:
            if usable > borrow_left:
                cut += usable - borrow_left
                usable = borrow_left
            borrow_left -= usable
        for cap in candidate.caps:
            if cap in cap_room:
                cap_room[cap] -= usable
        sources.append(FundingSource(candidate.key, candidate.owner, candidate.relation, env.headroom, usable))
        fundable += usable
    return Walk(fundable=fundable, sources=tuple(sources), borrow_cut=cut)


def _lender_pool(
    owner: str,
    candidates: tuple[Candidate, ...],
    others: list[tuple[EnvelopeKey, EnvelopeUsage]],
    selectors: _Selectors,
    sponsors: tuple[str, ...],
) -> tuple[tuple[tuple, EnvelopeKey, str, Envelope, tuple[CapKey, ...]], ...]:
    """Envelopes outside the family that select a candidate node and lend to the run's owner: sponsors first
    (in the order listed), then any other lender."""
    pool: list[tuple[tuple, EnvelopeKey, str, Envelope, tuple[CapKey, ...]]] = []
    for c in candidates:
        if c.relation == SPONSOR and c.borrows and c.admitted:
            pool.append(((0, sponsors.index(c.owner), c.key), c.key, c.owner, c.envelope, c.caps))
    for key, usage in others:
        envelope = usage.envelope
        if is_family(owner, usage.owner) or not _admits(envelope, owner) or not selectors.any_selected(envelope):
            continue
        rank = (0, sponsors.index(usage.owner), key) if usage.owner in sponsors else (1, 0, key)
        pool.append((rank, key, usage.owner, envelope, _caps_of(usage)))
    return tuple(sorted(pool, key=lambda p: p[0]))


def _lenders(
    pool: tuple[tuple[tuple, EnvelopeKey, str, Envelope, tuple[CapKey, ...]], ...],
    state: FundingState,
    result: Walk,
    *,
    sponsors: tuple[str, ...],
    allow_borrow: bool,
    max_borrow: int | None,
) -> tuple[Lender, ...]:
    """Of the ``pool``, the envelopes open now that could give more than the walk takes."""
    counted = {s.key: s.usable for s in result.sources}
    lenders = []
    for _, key, env_owner, envelope, caps in pool:
        env = state.envelopes.get(key, CLOSED)
        if not env.open:
            continue
        room = env.headroom if env.lend_room is None else min(env.headroom, env.lend_room)
        for cap in caps:
            room = min(room, state.caps.get(cap, room))
        room = max(0, room)
        taken = counted.get(key, 0)
        if room <= taken:
            continue
        if env_owner not in sponsors:
            change = f"add {env_owner} to spec.funding.sponsors" + ("" if allow_borrow else " and set allowBorrow")
        elif not allow_borrow:
            change = "set spec.funding.allowBorrow: true"
        elif max_borrow is not None:
            change = f"raise spec.funding.maxBorrowGPUs from {max_borrow} to {max_borrow + room - taken}"
        else:  # nothing in the run's spec holds it back (the walk already takes all it can lend)
            continue
        lenders.append(Lender(key=key, owner=env_owner, envelope=envelope, room=room, counted=taken, change=change))
    return tuple(lenders)
