"""The full ledger of each batch (``accounting.ledger(snapshot, at)``: what a Budget's status and every plan
read), without funding again the envelopes that did not change since the previous batch.

``accounting.ledger`` is one pass over every lease (GPU-seconds consumed, the open leases of each envelope)
then the funding of each envelope's open leases in funding order (``accounting._fund``): at 10,000 runs /
200,000 leases the funding is most of a batch's cost, yet between two batches a few envelopes change. An
envelope's funding is a function of its Budget and envelope, whether its window holds ``at``, the namespaces
whose Budgets name several owners, and its open leases in funding order — nothing else. ``Books.ledger`` makes
the same pass over the leases (so the consumed GPU-seconds are summed in the same order, to the same float),
and for each envelope whose inputs are those of the previous batch (the same objects) it takes the previous
charges and figures instead of funding again. Budgets with aggregate caps (which change their members' charges
after funding) are always funded again. The result equals ``accounting.ledger`` field for field
(tests/unit/test_incremental_view.py). Pure apart from its memory of the previous ledger; one thread at a
time (the reconciler's worker)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from ..engine.accounting import (
    EnvelopeKey,
    EnvelopeUsage,
    LeaseCharge,
    Ledger,
    _apply_caps,
    _charge_unfunded,
    _fund,
    _funding_order,
    unbound_findings,
    unknown_envelope,
)
from ..engine.findings import Finding
from ..engine.owners import namespace_owners
from ..model import GPULease, Snapshot


@dataclasses.dataclass(frozen=True)
class _Funded:
    """One envelope's funding: its inputs (compared by identity) and what ``_fund`` made of them."""

    budget: object
    window_active: bool
    unbound: tuple
    leases: list[GPULease]  # open, in snapshot order
    usage: EnvelopeUsage  # consumed_seconds aside
    found: list[Finding]


class Books:
    """``ledger(snapshot, at)``, remembering each envelope's funding for the next call."""

    def __init__(self) -> None:
        self._funded: dict[EnvelopeKey, _Funded] = {}
        self.refunded = 0  # envelopes funded by the last call (the rest were taken as they were)

    def ledger(self, snapshot: Snapshot, at: datetime) -> Ledger:
        owners = namespace_owners(snapshot)
        unbound = tuple(sorted(owners.unbound.items()))
        capped = {(b.metadata.namespace, b.metadata.name) for b in snapshot.budgets if b.spec.aggregate_caps}
        usages: dict[EnvelopeKey, EnvelopeUsage] = {}
        clip: dict[EnvelopeKey, list] = {}
        for key, (budget, envelope) in snapshot.envelopes_by_key.items():
            usage = EnvelopeUsage(budget=budget, envelope=envelope, window_active=envelope.window_contains(at))
            usages[key] = usage
            clip[key] = [envelope.start, min(envelope.end, at), [], 0.0]

        charges: dict[str, LeaseCharge] = {}
        found: list[Finding] = []
        for lease in snapshot.leases:  # accounting.ledger's loop, step for step
            spec = lease.spec
            start = spec.start
            if start > at:
                continue
            status = lease.status
            if status.closed:
                ended = status.ended or start
                is_open = at < ended
                end = ended if ended < at else at
            else:
                is_open = True
                end = at
            paid = spec.paid_by
            if paid is None:
                if is_open:
                    _charge_unfunded(lease, charges, None)
                continue
            key = (paid.namespace or spec.run_ref.namespace, paid.budget, paid.envelope)
            window = clip.get(key)
            if window is None:
                if is_open:
                    _charge_unfunded(lease, charges, None)
                    found.append(unknown_envelope(lease, key))
                continue
            lo = start if start > window[0] else window[0]
            hi = end if end < window[1] else window[1]
            if hi > lo:
                window[3] += (hi - lo).total_seconds() * len(spec.slice.slots)
            if is_open:
                window[2].append(lease)

        remembered: dict[EnvelopeKey, _Funded] = {}
        refunded = 0
        for key, usage in usages.items():
            open_leases = clip[key][2]  # in snapshot order: the same objects in the same order sort the same
            before = self._funded.get(key)
            if (before is not None and before.budget is usage.budget and before.window_active == usage.window_active
                    and before.unbound == unbound and _same(before.leases, open_leases)):
                usage = usages[key] = dataclasses.replace(before.usage)  # its charges, as they were
                for charge in usage.charges:
                    charges[charge.lease.key] = charge
                found += before.found
                if key[:2] not in capped:
                    remembered[key] = before
                continue
            refunded += 1
            mine: list[Finding] = []
            _fund(usage, sorted(open_leases, key=_funding_order), owners, charges, mine)
            found += mine
            if key[:2] not in capped:  # caps change the charges after funding: never kept
                remembered[key] = _Funded(usage.budget, usage.window_active, unbound, open_leases,
                                          dataclasses.replace(usage), mine)
        for key, usage in usages.items():
            usage.consumed_seconds = clip[key][3]
        aggregates = _apply_caps(snapshot, usages, found)
        found += unbound_findings(owners)
        self._funded = remembered
        self.refunded = refunded
        return Ledger(at=at, owners=owners, envelopes=usages, aggregates=aggregates, charges=charges, findings=found)


def _same(a: list[GPULease], b: list[GPULease]) -> bool:
    """The same lease objects in the same order (a changed lease is a new object)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
