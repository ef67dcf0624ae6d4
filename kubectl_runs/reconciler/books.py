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
from typing import Any

from ..engine.accounting import (
    EnvelopeKey,
    EnvelopeUsage,
    LeaseCharge,
    Ledger,
    _apply_caps,
    _fund,
    _funding_order,
    envelope_windows,
    unbound_findings,
    walk_leases,
)
from ..engine.findings import Finding
from ..engine.owners import namespace_owners
from ..model import GPULease, Run, Snapshot
from .instants import scope_horizon

# engine/evaluation.py's Evaluation values that are functions of the nodes, the open leases and their charges only
CARRIED = ("_open", "_leases_by_run", "_charges_by_run", "_free", "_slots", "_capacity", "_node_lists", "_scope_nodes",
           "_groups", "_held")
# the values that also read the Runs holding those leases and the clock: a scope's lottery candidates (with the
# protected Runs left out) and its releases (reported completions)
SCOPED = ("_lottery", "_releases")


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
        self.changed = 0  # of those, the envelopes whose inputs changed (the others: a capped Budget's)
        self._open: list[GPULease] = []  # the leases open at the last call's instant, in snapshot order
        self.same_open = False  # the last call's open leases were the previous call's (the same objects)
        self.last: Any = None  # the last Evaluation served (status.Evaluation), for ``carry``
        self.carried = 0  # Evaluations that took the previous one's lease-derived values
        self._quiet: tuple | None = None  # what moving the last ledger to a later instant needs (``_moved``)
        self.moved = 0  # ledgers that were the previous one moved to a later instant
        # what the carried SCOPED values were computed from: (first instant after which they may change by
        # themselves, the Runs that held open leases then, by key), None until the next carry computes it
        self._scoped_basis: tuple[datetime | None, dict[str, Run | None]] | None = None
        self.scoped = 0  # Evaluations that took the previous one's SCOPED values too

    def carry(self, evaluation: Any) -> None:
        """Give ``evaluation`` (a status.Evaluation whose book this has just made) the values the previous
        Evaluation computed from the nodes, the open leases and their charges alone — the open leases, each run's
        leases and charges, free GPUs per node, capacities, scope nodes and lease groups, Active GPUs held — when
        those are the very same: the same Node, GPULease and Budget tuples, the same leases open, no envelope's
        funding inputs changed. A batch after which only Runs or Reservations changed (our own status writes coming back,
        a Run created or edited) then computes none of them again. What reads the clock or the Runs
        (releases, protections, lottery candidates, funding inputs, plans) is never carried."""
        before, self.last = self.last, evaluation
        evaluation._open = self._open  # open_leases(snapshot, at): the ledger's pass found them
        basis, self._scoped_basis = self._scoped_basis, None
        if before is None or before is evaluation or not self.same_open or self.changed:
            return
        now, then = evaluation.snapshot, before.snapshot
        if now.nodes is not then.nodes or now.leases is not then.leases or now.budgets is not then.budgets:
            return
        for name in CARRIED:
            value = getattr(before, name)
            setattr(evaluation, name, dict(value) if isinstance(value, dict) else value)
        self.carried += 1
        if now.reservations is not then.reservations or not (before._lottery or before._releases):
            return
        if basis is None:  # before computed them: from its snapshot, at its instant
            basis = (scope_horizon(then, before.at), {key: then.runs_by_key.get(key) for key in lease_holders(before)})
        horizon, holders = basis
        if (horizon is not None and evaluation.at >= horizon) or not same_holders(holders, now, evaluation):
            return
        for name in SCOPED:
            setattr(evaluation, name, dict(getattr(before, name)))
        self._scoped_basis = basis
        self.scoped += 1

    def ledger(self, snapshot: Snapshot, at: datetime) -> Ledger:
        quiet = self._moved(snapshot, at)
        if quiet is not None:
            return quiet
        owners = namespace_owners(snapshot)
        unbound = tuple(sorted(owners.unbound.items()))
        capped = {(b.metadata.namespace, b.metadata.name) for b in snapshot.budgets if b.spec.aggregate_caps}
        usages, clip = envelope_windows(snapshot, at)
        charges: dict[str, LeaseCharge] = {}
        found: list[Finding] = []
        walk = walk_leases(snapshot.leases, at, clip, charges, found)  # accounting.ledger's loop, the same code
        is_open_now, upcoming, whole = walk.open, walk.upcoming, walk.whole

        remembered: dict[EnvelopeKey, _Funded] = {}
        refunded = changed = 0
        for key, usage in usages.items():
            open_leases = clip[key][2]  # in snapshot order: the same objects in the same order sort the same
            before = self._funded.get(key)
            same = (before is not None and before.budget is usage.budget and before.window_active == usage.window_active
                    and before.unbound == unbound and _same(before.leases, open_leases))
            if same and key[:2] not in capped:
                usage = usages[key] = dataclasses.replace(before.usage)  # its charges, as they were
                for charge in usage.charges:
                    charges[charge.lease.key] = charge
                found += before.found
                remembered[key] = before
                continue
            refunded += 1
            changed += not same
            mine: list[Finding] = []
            _fund(usage, sorted(open_leases, key=_funding_order), owners, charges, mine)
            found += mine
            # a capped Budget's envelopes are funded again every time (its caps change their charges after the
            # funding), their inputs remembered only to tell whether they changed
            remembered[key] = _Funded(usage.budget, usage.window_active, unbound, open_leases,
                                      dataclasses.replace(usage), mine)
        for key, usage in usages.items():
            usage.consumed_seconds = clip[key][3]
        aggregates = _apply_caps(snapshot, usages, found)
        found += unbound_findings(owners)
        self._funded = remembered
        self.refunded = refunded
        self.changed = changed
        self.same_open = _same(self._open, is_open_now)
        self._open = is_open_now
        book = Ledger(at=at, owners=owners, envelopes=usages, aggregates=aggregates, charges=charges, findings=found)
        for _budget, envelope in snapshot.envelopes_by_key.values():
            upcoming += [t for t in (envelope.start, envelope.end) if t > at]
            whole = whole and not envelope.start.microsecond and not envelope.end.microsecond
        slots = {key: sum(len(x.spec.slice.slots) for x in clip[key][2]) for key in usages}
        self._quiet = (snapshot.leases, snapshot.budgets, min(upcoming, default=None), slots, book) if whole else None
        return book

    def _moved(self, snapshot: Snapshot, at: datetime) -> Ledger | None:
        """The last ledger moved to ``at``, when nothing but the clock moved and it crossed no instant at which a
        lease opens or closes or an envelope's window opens or ends (the same GPULease and Budget tuples): the
        same leases are open and funded the same, and each envelope whose window holds ``at`` consumed its open
        slots × the seconds since — in whole seconds, so the sum is the one ``accounting.ledger`` makes, to the
        last bit. None: compute it."""
        quiet = self._quiet
        if quiet is None or at.microsecond:
            return None
        leases, budgets, upcoming, slots, before = quiet
        if (leases is not snapshot.leases or budgets is not snapshot.budgets or at < before.at
                or (upcoming is not None and at >= upcoming)):
            return None
        seconds = (at - before.at).total_seconds()
        envelopes = {key: dataclasses.replace(usage, consumed_seconds=usage.consumed_seconds
                                              + (seconds * slots[key] if usage.window_active else 0.0))
                     for key, usage in before.envelopes.items()}
        book = Ledger(at=at, owners=before.owners, envelopes=envelopes, aggregates=list(before.aggregates),
                      charges=dict(before.charges), findings=list(before.findings))
        self._quiet = (leases, budgets, upcoming, slots, book)
        self.refunded = self.changed = 0
        self.same_open = True
        self.moved += 1
        return book


def lease_holders(evaluation: Any) -> set[str]:
    """The Runs that hold open leases at the Evaluation's instant."""
    evaluation.leases_of("")  # computes the index when it is not yet
    return {key for key, mine in evaluation._leases_by_run.items() if mine}


def same_holders(holders: dict[str, Run | None], snapshot: Snapshot, evaluation: Any) -> bool:
    """The Runs holding open leases are those of ``holders`` and hold what a lottery or a release reads as they
    did (a Run's status written by the reconciler — phase, reason, message — is not read)."""
    if holders.keys() != lease_holders(evaluation):
        return False
    runs = snapshot.runs_by_key
    for key, then in holders.items():
        now = runs.get(key)
        if now is then:
            continue
        if (now is None or then is None or now.spec != then.spec or now.status.eta != then.status.eta
                or now.status.preemptions != then.status.preemptions or now.finished != then.finished
                or _meta(now) != _meta(then)):
            return False
    return True


def _meta(run: Run) -> tuple:
    """What a Run's metadata says but its resourceVersion (which our own status write moves)."""
    m = run.metadata
    return (m.uid, m.generation, m.creation_timestamp, m.deletion_timestamp, m.labels, m.annotations)


def _same(a: list[GPULease], b: list[GPULease]) -> bool:
    """The same lease objects in the same order (a changed lease is a new object)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
