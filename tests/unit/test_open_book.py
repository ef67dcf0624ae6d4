"""engine/book.py ``OpenBook``: a ledger kept up to date by ``change`` is the ledger of the leases open after it.

Leases that open after every lease of their envelope in funding order are funded where the envelope's walk
ended (what minting does); the tests below compare that with a book built at once from the same leases, and
also hold the cases where a Budget must be funded again whole (an earlier lease, a close, an aggregate cap)."""

from __future__ import annotations

from builders import at, budget, envelope, lease, snapshot

from kubectl_runs.engine.book import OpenBook

NOW = at(hours=50)


def _ledger(book: OpenBook) -> dict:
    ledger = book.ledger
    return {
        "envelopes": {k: (u.window_active, u.owned, u.shared, u.borrowed, u.unfunded, u.spare, u.consumed_seconds,
                          [c.lease.key for c in u.charges]) for k, u in ledger.envelopes.items()},
        "charges": {k: (c.envelope, c.lender, c.owned, c.shared, c.borrowed, c.unfunded)
                    for k, c in ledger.charges.items()},
        "aggregates": [(a.name, a.used) for a in ledger.aggregates],
        "findings": [(f.kind, f.lease, f.detail, f.envelope) for f in ledger.findings],
    }


def _budgets(caps: bool = False):
    return [
        budget("b", "team", envelopes=[envelope("west", concurrency=6), envelope("east", concurrency=4)],
               aggregate_caps=[{"name": "all", "envelopes": ["west", "east"], "maxConcurrency": 7}] if caps else None),
        budget("o", "other", owner="org:other", envelopes=[envelope("west", concurrency=3)]),
    ]


def _leases():
    """Leases of two Budgets, in funding order (start, namespace, name) within each envelope; some start before
    the instant (GPU-seconds consumed), some overdraw their envelope."""
    return [
        lease("a1", gpus=2, node_name="n1", start=at(hours=1)),
        lease("a2", gpus=3, node_name="n2", start=at(hours=2), paid_by=("b", "east")),
        lease("o1", "other", owner="org:other", gpus=2, node_name="n3", start=at(hours=3), paid_by=("o", "west")),
        lease("a3", gpus=3, node_name="n4", start=at(hours=10)),
        lease("a4", gpus=2, node_name="n5", start=at(hours=20), paid_by=("b", "east")),
        lease("o2", "other", owner="org:other", gpus=2, node_name="n6", start=at(hours=30), paid_by=("o", "west")),
        lease("a5", gpus=2, node_name="n7", start=at(hours=40)),
    ]


def _book(leases, caps: bool = False) -> OpenBook:
    snap = snapshot(*_budgets(caps), *leases)
    return OpenBook(snap, NOW, snap.leases)


def _grown(first, then, caps: bool = False, closed=()) -> tuple[OpenBook, set]:
    snap = snapshot(*_budgets(caps), *first)
    book = OpenBook(snap, NOW, snap.leases)
    refunded = book.change(opened=then, closed=closed)
    return book, refunded


def test_leases_opened_after_their_envelope_are_funded_where_its_walk_ended():
    leases = _leases()
    for cut in range(len(leases)):
        book, refunded = _grown(leases[:cut], leases[cut:])
        assert _ledger(book) == _ledger(_book(leases)), cut
        assert not refunded, cut  # nothing before them moved: no envelope funded again


def test_one_lease_at_a_time_gives_the_same_ledger():
    leases = _leases()
    snap = snapshot(*_budgets(), leases[0])
    book = OpenBook(snap, NOW, snap.leases)
    for x in leases[1:]:
        book.change(opened=[x])
    assert _ledger(book) == _ledger(_book(leases))


def test_a_lease_earlier_in_funding_order_funds_its_budget_again():
    leases = _leases()
    early = lease("a0", gpus=4, node_name="n9", start=at(hours=0.5))  # before a1: a1.. may lose their funding
    book, refunded = _grown(leases, [early])
    assert _ledger(book) == _ledger(_book([early, *leases]))
    assert refunded == {("team", "b", "west"), ("team", "b", "east")}


def test_a_budget_with_an_aggregate_cap_is_funded_again_whole():
    leases = _leases()
    book, refunded = _grown(leases[:-1], leases[-1:], caps=True)
    assert _ledger(book) == _ledger(_book(leases, caps=True))
    assert ("team", "b", "east") in refunded  # the cap spans both envelopes


def test_a_close_and_an_open_in_one_budget_fund_it_again():
    leases = _leases()
    book, refunded = _grown(leases[:-1], leases[-1:], closed=[leases[0]])
    assert _ledger(book) == _ledger(_book(leases[1:]))
    assert ("team", "b", "west") in refunded


def test_a_lease_before_one_just_funded_at_the_end_funds_its_budget_again():
    leases = _leases()
    book, refunded = _grown(leases[:-1], leases[-1:])  # a5 (40 h) funded at the end of west's walk
    assert not refunded
    between = lease("a45", gpus=2, node_name="n8", start=at(hours=35))  # before a5 now
    refunded = book.change(opened=[between])
    assert _ledger(book) == _ledger(_book([*leases[:-1], between, leases[-1]]))
    assert ("team", "b", "west") in refunded
