"""The `budgets usage` report: every envelope's usage at one instant, filtered (API.md §5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..model import Snapshot
from ..timeutil import rfc3339
from .accounting import AggregateUsage, EnvelopeUsage, ledger
from .findings import Finding, sort_findings
from .owners import is_ancestor
from .reports import UsageReport, aggregate_row, envelope_row, finding_entries
from .slots import leases_slot_findings


@dataclass(frozen=True)
class BudgetUsage:
    """The ledger's rows kept by the filters; ``report`` is the value ``-o json`` prints."""

    at: datetime
    envelopes: list[EnvelopeUsage]
    aggregates: list[AggregateUsage]
    findings: list[Finding]

    @property
    def report(self) -> UsageReport:
        return UsageReport(
            at=rfc3339(self.at) or "",
            envelopes=[envelope_row(e) for e in self.envelopes],
            aggregates=[aggregate_row(a) for a in self.aggregates],
            findings=finding_entries(self.findings),
        )


def owner_selected(owner: str, wanted: str | None) -> bool:
    """``--owner PATH`` keeps that owner and its descendants."""
    return wanted is None or owner == wanted or is_ancestor(wanted, owner)


def budget_usage(
    snapshot: Snapshot,
    at: datetime,
    *,
    owner: str | None = None,
    flavor: str | None = None,
    namespace: str | None = None,
) -> BudgetUsage:
    """The ledger over the whole snapshot, then the rows asked for: ``namespace`` (``-n``) narrows the rows and
    findings but not the arithmetic — a lease in one namespace may be charged to an envelope in another. The
    findings are the ledger's and those of the open leases' slots (``MalformedSlot``, ``SlotOutOfRange``,
    ``UnknownNode``): such a slot is still one GPU charged to its envelope."""
    book = ledger(snapshot, at)
    kept = [
        usage
        for key, usage in sorted(book.envelopes.items())
        if (namespace is None or key[0] == namespace)
        and owner_selected(usage.owner, owner)
        and (flavor is None or usage.envelope.flavor == flavor)
    ]
    kept_keys = {u.key for u in kept}
    kept_budgets = {(u.key[0], u.key[1]) for u in kept}
    kept_namespaces = {u.key[0] for u in kept}
    aggregates = [
        a
        for a in book.aggregates
        if (a.budget.metadata.namespace, a.budget.metadata.name) in kept_budgets
    ]

    def concerns_kept(finding: Finding) -> bool:
        if namespace is not None and not finding.concerns(namespace):
            return False
        if owner is None and flavor is None:
            return True
        if finding.envelope is not None:
            return finding.envelope in kept_keys
        return finding.namespace in kept_namespaces

    # The open leases counted here whose slots name no GPU (engine/slots.py): counted, and said.
    slots_said = leases_slot_findings(((c.lease, c.envelope) for c in book.charges.values()), snapshot.nodes_by_name)
    findings = [f for f in [*book.findings, *slots_said] if concerns_kept(f)]
    return BudgetUsage(at=at, envelopes=kept, aggregates=aggregates, findings=sort_findings(findings))

