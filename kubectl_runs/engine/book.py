"""The ledger of the open leases, kept up to date as leases open and close: what the ledger keeper's pass plans
with after each lease it mints or closes (engine/evaluation.py ``Evaluation.advance``), without a pass over
every open lease per write.

``OpenBook(snapshot, at, leases)`` computes what ``evaluation.open_book(snapshot, leases, at)`` computes — the
same envelopes' usage, charges, aggregate caps and findings — keeping it by envelope and by Budget. ``change``
takes leases that opened and leases that closed: a lease's charge depends on the leases before it in its
envelope's funding order and on its Budget's aggregate caps, so every envelope of the Budgets a change touches
is funded again from its open leases (``accounting._fund``, ``accounting.apply_budget_caps``, the very steps
of ``accounting.ledger``), and nothing else moves — but leases that only open, after every lease of their
envelope in funding order, in a Budget without aggregate caps (a lease minted at the instant), are funded where
the envelope's walk ended: the charges before them cannot move. One difference, by design: ``charges`` keeps a lease's
place when it is funded again and puts a new lease last, where ``ledger`` groups them by envelope; nothing
that plans reads it in order (it is looked up, summed or sorted). Pure: ``at`` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from ..model import Budget, Envelope, GPULease, Snapshot
from .accounting import (
    EnvelopeKey,
    EnvelopeUsage,
    Ledger,
    _charge_unfunded,
    _fund,
    _funding_order,
    apply_budget_caps,
    unbound_findings,
    unknown_envelope,
)
from .findings import Finding
from .owners import namespace_owners

BudgetKey = tuple[str, str]  # (namespace, name)


def payer_key(lease: GPULease) -> EnvelopeKey | None:
    """The envelope the lease names (``spec.paidBy``; its namespace defaults to the run's), or None."""
    paid = lease.spec.paid_by
    if paid is None:
        return None
    return (paid.namespace or lease.spec.run_ref.namespace, paid.budget, paid.envelope)


class OpenBook:
    """A ``Ledger`` of the open ``leases`` at ``at`` (``ledger``), and the index that keeps it up to date."""

    def __init__(self, snapshot: Snapshot, at: datetime, leases: Sequence[GPULease]):
        self.at = at
        self.envelopes_by_key = snapshot.envelopes_by_key
        self.budgets: tuple[Budget, ...] = snapshot.budgets
        owners = namespace_owners(snapshot)
        self.by_envelope: dict[EnvelopeKey, dict[str, GPULease]] = {key: {} for key in self.envelopes_by_key}
        self.unknown: dict[str, Finding] = {}  # lease -> its UnknownEnvelope finding
        self.envelope_findings: dict[EnvelopeKey, list[Finding]] = {}
        self.cap_findings: dict[int, list[Finding]] = {}  # by the Budget's place in the snapshot
        self.aggregates: dict[int, list] = {}
        self.unbound = unbound_findings(owners)
        self.ledger = Ledger(at=at, owners=owners, envelopes={}, aggregates=[], charges={}, findings=[])
        self._last: dict[EnvelopeKey, tuple | None] = {}  # each envelope's last lease in funding order
        self._capped: set[BudgetKey] = {(b.metadata.namespace, b.metadata.name) for b in self.budgets
                                         if b.spec.aggregate_caps}
        self._open(leases)
        for key in self.envelopes_by_key:
            self._fund(key)
        for index in range(len(self.budgets)):
            self._caps(index)
        self._assemble()

    def change(self, opened: Iterable[GPULease] = (), closed: Iterable[GPULease] = ()) -> set[EnvelopeKey]:
        """``closed`` are open no longer, ``opened`` are (leases open at ``at``; a lease changed in place is in
        both). Returns the envelopes funded again: every lease charged to one of them may have a new charge.

        Leases that only open, in a Budget without aggregate caps, after every lease of their envelope in
        funding order (what minting does: a new lease starts at the instant) are funded where the walk ended:
        the walk is in that order, so the charges before them stay as they are and the envelope is not funded
        again (nor returned)."""
        charges = self.ledger.charges
        touched: set[BudgetKey] = set()
        for lease in closed:
            charges.pop(lease.key, None)
            self.unknown.pop(lease.key, None)
            key = payer_key(lease)
            if key in self.by_envelope:
                self.by_envelope[key].pop(lease.key, None)
                touched.add(key[:2])
        closing = set(touched)
        opened = list(opened)
        self._open(opened)
        appended: dict[EnvelopeKey, list[GPULease]] = {}
        for lease in opened:
            key = payer_key(lease)
            if key in self.by_envelope and lease.spec.start <= self.at:
                appended.setdefault(key, []).append(lease)
                touched.add(key[:2])
        # a Budget is funded again whole unless every envelope of it that a lease opened in can go on from its end
        whole = closing | self._capped
        for key, leases in appended.items():
            last = self._last.get(key)
            if last is not None and min(map(_funding_order, leases)) <= last:
                whole.add(key[:2])
        for key, leases in appended.items():
            if key[:2] not in whole:
                self._extend(key, leases)
        refunded = {key for key in self.envelopes_by_key if key[:2] in touched and key[:2] in whole}
        for key in self.envelopes_by_key:  # in the ledger's order
            if key in refunded:
                self._fund(key)
        for index, budget in enumerate(self.budgets):
            if (budget.metadata.namespace, budget.metadata.name) in touched:
                self._caps(index)
        self._assemble()
        return refunded

    # --- the steps of accounting.ledger, by envelope and by Budget ----------------------------------------------

    def _open(self, leases: Iterable[GPULease]) -> None:
        charges = self.ledger.charges
        for lease in leases:
            if lease.spec.start > self.at:
                continue
            key = payer_key(lease)
            if key is None:
                _charge_unfunded(lease, charges, None)
            elif key not in self.by_envelope:
                _charge_unfunded(lease, charges, None)
                self.unknown[lease.key] = unknown_envelope(lease, key)
            else:
                self.by_envelope[key][lease.key] = lease

    def _fund(self, key: EnvelopeKey) -> None:
        budget, envelope = self.envelopes_by_key[key]
        usage = EnvelopeUsage(budget=budget, envelope=envelope, window_active=envelope.window_contains(self.at))
        leases = list(self.by_envelope[key].values())
        usage.consumed_seconds = self._consumed(envelope, leases, 0.0)
        found: list[Finding] = []
        leases.sort(key=_funding_order)
        _fund(usage, leases, self.ledger.owners, self.ledger.charges, found)
        self.ledger.envelopes[key] = usage
        self.envelope_findings[key] = found
        self._last[key] = _funding_order(leases[-1]) if leases else None

    def _extend(self, key: EnvelopeKey, leases: list[GPULease]) -> None:
        """Fund ``leases`` (in ``by_envelope`` already, after every other lease of the envelope in funding
        order) where the envelope's walk ended: what ``_fund`` of the whole envelope would give them."""
        usage = self.ledger.envelopes[key]
        usage.consumed_seconds = self._consumed(usage.envelope, leases, usage.consumed_seconds)  # dict order
        ordered = sorted(leases, key=_funding_order)
        _fund(usage, ordered, self.ledger.owners, self.ledger.charges, self.envelope_findings[key])
        self._last[key] = _funding_order(ordered[-1])

    def _consumed(self, envelope: Envelope, leases: Iterable[GPULease], consumed: float) -> float:
        """``consumed`` plus the GPU-seconds ``leases`` used in the envelope's window, as ledger sums them (an
        open lease counts up to at), one lease after the other."""
        at = self.at
        lo_window, hi_window = envelope.start, min(envelope.end, at)
        for lease in leases:
            status = lease.status
            end = status.ended if status.closed and status.ended is not None and status.ended < at else at
            lo = lease.spec.start if lease.spec.start > lo_window else lo_window
            hi = end if end < hi_window else hi_window
            if hi > lo:
                consumed += (hi - lo).total_seconds() * len(lease.spec.slice.slots)
        return consumed

    def _caps(self, index: int) -> None:
        found: list[Finding] = []
        self.aggregates[index] = apply_budget_caps(self.budgets[index], self.ledger.envelopes, found)
        self.cap_findings[index] = found

    def _assemble(self) -> None:
        """The ledger's lists in the ledger's order: UnknownEnvelope (lease order), each envelope's, each
        Budget's caps', the unbound namespaces'."""
        book = self.ledger
        book.aggregates = [a for index in range(len(self.budgets)) for a in self.aggregates[index]]
        findings = list(self.unknown.values())
        for key in book.envelopes:
            findings += self.envelope_findings[key]
        for index in range(len(self.budgets)):
            findings += self.cap_findings[index]
        book.findings = findings + self.unbound
