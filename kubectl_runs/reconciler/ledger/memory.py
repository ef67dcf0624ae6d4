"""What one ledger pass leaves the next: ``reconcile --manage-leases`` runs a pass on every batch, and most
batches change nothing the pass's Evaluation is made of (our own status writes coming back, a Run created or
edited that holds no lease). Making that Evaluation — the open-lease ledger (``OpenBook``), free GPUs, a
scope's lease groups and lottery candidates — is most of a pass at 10,000 runs; the stages themselves are not.

``PassMemory.start(snapshot, at)`` gives the next pass the previous pass's Evaluation, moved to the new snapshot
and instant, when every value it holds is the one a new Evaluation would compute:

- the previous pass wrote nothing (its Evaluation was never advanced: it is still that of its snapshot);
- the Nodes, GPULeases, Budgets and Reservations are the very same tuples (the cache keeps a kind's tuple when
  none of its objects changed), so the open leases, their funding, free GPUs, lease groups and held GPUs are;
- the Runs that hold open leases are the same Runs with the same spec, metadata (resourceVersion aside),
  reported completion, preemptions and finished state (what lottery candidates and releases read;
  ``books.same_holders``); when another Run's reported completion changed, the protections are dropped;
- no instant passed at which a value changes by itself: a lease starting or ending, an envelope's window
  opening or closing, a reported completion passing or coming within the grace, a protection ending;
- every open lease and envelope starts on a whole second: moving the ledger adds each active envelope's open
  slots × the seconds since, which is then the very sum a new ledger makes (as ``Books._moved``).

Anything else: None, and the pass makes its Evaluation as before. The stages still run over the whole new
snapshot; only what they share is kept. Pure apart from that memory; one pass at a time."""

from __future__ import annotations

from datetime import datetime

from ...engine.evaluation import Evaluation
from ...model import Snapshot
from ..books import lease_holders, same_holders
from ..instants import evaluation_horizon

Basis = tuple[datetime | None, dict]  # (the first instant the kept values may change by themselves, holders)


class PassMemory:
    def __init__(self) -> None:
        self._last: tuple[Evaluation, Basis | None] | None = None
        self.reused = 0  # passes that started from the previous pass's Evaluation

    def remember(self, evaluation: Evaluation | None, wrote: bool) -> None:
        """After a pass: its Evaluation (None: it made none), kept only when the pass wrote nothing."""
        if wrote or evaluation is None:
            self._last = None
        elif self._last is None or self._last[0] is not evaluation:
            self._last = (evaluation, None)

    def start(self, snapshot: Snapshot, at: datetime) -> Evaluation | None:
        """The previous pass's Evaluation as the one of ``snapshot`` at ``at``, or None (module docstring)."""
        if self._last is None:
            return None
        ev, basis = self._last
        self._last = None
        then = ev.snapshot
        if (at < ev.at or snapshot.nodes is not then.nodes or snapshot.leases is not then.leases
                or snapshot.budgets is not then.budgets or snapshot.reservations is not then.reservations):
            return None
        if basis is None:
            basis = (evaluation_horizon(then, ev.at), {key: then.runs_by_key.get(key) for key in lease_holders(ev)})
        horizon, holders = basis
        if (horizon is not None and at >= horizon) or not same_holders(holders, snapshot, ev):
            return None
        book = ev._keeper
        if not _whole(ev, at):
            return None
        seconds = (at - ev.at).total_seconds()
        for key, usage in book.ledger.envelopes.items():
            if usage.window_active:
                usage.consumed_seconds += seconds * sum(len(x.spec.slice.slots) for x in book.by_envelope[key].values())
        book.at = book.ledger.at = at
        if not _same_completions(then, snapshot):
            ev._protections = None
        ev._state, ev._funding_inputs = None, {}
        ev.snapshot, ev.at = snapshot, at
        self._last = (ev, basis)  # remembered again by ``remember`` when this pass writes nothing
        self.reused += 1
        return ev


def _whole(ev: Evaluation, at: datetime) -> bool:
    if at.microsecond or ev.at.microsecond:
        return False
    book = ev._keeper
    if book is None or any(envelope.start.microsecond for _b, envelope in book.envelopes_by_key.values()):
        return False
    return not any(x.spec.start.microsecond for leases in book.by_envelope.values() for x in leases.values())


def _same_completions(then: Snapshot, now: Snapshot) -> bool:
    """Every Run reports the completion and finished state it did (what protections read of Runs)."""
    if len(then.runs) != len(now.runs):
        return False
    before = then.runs_by_key
    for run in now.runs:
        old = before.get(run.key)
        if old is not run and (old is None or old.status.eta != run.status.eta or old.finished != run.finished):
            return False
    return True
