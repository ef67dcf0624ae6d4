"""Charges, classes, headroom and consumed GPU-hours of every envelope at one instant (API.md §3).

``ledger(snapshot, at)`` is the one pass over the leases that `budgets usage`, `plan`, `explain` and the
resolver share: it funds the open leases charged to each envelope in (start, namespace/name) order, classes
each funded slot as owned, shared or borrowed, and sums the GPU-hours every envelope paid for in its window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ..model import Budget, Envelope, GPULease, Snapshot
from ..text import counted
from ..timeutil import rfc3339
from . import findings as fk
from .codes import FundingClass
from .findings import Finding
from .owners import NamespaceOwners, any_pattern_matches, is_family, namespace_owners

OWNED, SHARED, BORROWED, UNFUNDED = FundingClass
CLASSES = tuple(FundingClass)

EnvelopeKey = tuple[str, str, str]  # (namespace, budget, envelope)


def lends_to(envelope: Envelope, owner: str) -> bool:
    """The envelope's lending ACL admits ``owner``: ``lending.allow`` and a ``to`` pattern matches."""
    lending = envelope.lending
    return lending is not None and lending.allow and any_pattern_matches(lending.to, owner)


def relation(lease_owner: str, envelope_owner: str) -> str:
    """The class a funded slot would have: owned, shared (family) or borrowed."""
    if lease_owner == envelope_owner:
        return OWNED
    if is_family(lease_owner, envelope_owner):
        return SHARED
    return BORROWED


@dataclass(slots=True)
class LeaseCharge:
    """How one lease open at ``at`` is funded, in GPUs (slots) per class. Slotted: one per open lease in every
    ledger, and ``setattr(charge, cls, …)`` with a ``FundingClass`` (a str subclass) would otherwise give each
    instance its own ~550-byte ``__dict__`` (~75 MB per ledger at 130,000 open leases)."""

    lease: GPULease
    envelope: EnvelopeKey | None = None
    lender: str | None = None  # the envelope's owner when the slots are borrowed
    owned: int = 0
    shared: int = 0
    borrowed: int = 0
    unfunded: int = 0

    @property
    def funded(self) -> int:
        return self.owned + self.shared + self.borrowed

    @property
    def worst_class(self) -> str:
        """The lowest-ranked class any of its slots has (a partly unfunded lease counts as unfunded)."""
        if self.unfunded:  # CLASSES from the worst
            return UNFUNDED
        if self.borrowed:
            return BORROWED
        if self.shared:
            return SHARED
        return OWNED if self.owned else UNFUNDED

    def unfund(self, gpus: int) -> None:
        """Move ``gpus`` funded slots to unfunded (an aggregate cap was hit)."""
        for cls in (BORROWED, SHARED, OWNED):
            take = min(gpus, getattr(self, cls))
            setattr(self, cls, getattr(self, cls) - take)
            self.unfunded += take
            gpus -= take


@dataclass
class EnvelopeUsage:
    """One envelope at ``at``: GPUs by class, headroom, GPU-hours (API.md §5 budgets usage row)."""

    budget: Budget
    envelope: Envelope
    window_active: bool
    owned: int = 0
    shared: int = 0
    borrowed: int = 0
    unfunded: int = 0
    spare: int = 0
    consumed_seconds: float = 0.0  # GPU-seconds
    charges: list[LeaseCharge] = field(default_factory=list)

    @property
    def key(self) -> EnvelopeKey:
        return (self.budget.metadata.namespace, self.budget.metadata.name, self.envelope.name)

    @property
    def owner(self) -> str:
        return self.budget.spec.owner

    @property
    def used(self) -> int:
        return self.owned + self.shared + self.borrowed

    @property
    def headroom(self) -> int:
        """GPUs it can still fund now; 0 outside its window, never below 0."""
        if not self.window_active:
            return 0
        return max(0, self.envelope.concurrency - self.used)

    @property
    def consumed_gpu_hours(self) -> float:
        return self.consumed_seconds / 3600.0

    @property
    def gpu_hours_headroom(self) -> float | None:
        """``maxGPUHours − consumedGPUHours`` (negative when the cap is overrun); None without a cap."""
        cap = self.envelope.max_gpu_hours
        return None if cap is None else cap - self.consumed_gpu_hours

    @property
    def borrowed_room(self) -> int | None:
        """Borrowed GPUs it may still lend (lending.maxConcurrency − borrowed); None = no lending cap."""
        lending = self.envelope.lending
        if lending is None or not lending.allow:
            return 0
        if lending.max_concurrency is None:
            return None
        return max(0, lending.max_concurrency - self.borrowed)


@dataclass
class AggregateUsage:
    budget: Budget
    name: str
    envelopes: tuple[str, ...]
    max_concurrency: int
    used: int = 0

    @property
    def headroom(self) -> int:
        return max(0, self.max_concurrency - self.used)


@dataclass
class Ledger:
    """Every envelope's usage and every open lease's funding at ``at``."""

    at: datetime
    owners: NamespaceOwners
    envelopes: dict[EnvelopeKey, EnvelopeUsage]
    aggregates: list[AggregateUsage]
    charges: dict[str, LeaseCharge]  # open leases by namespace/name
    findings: list[Finding]

    def charges_of_run(self, run_key: str) -> list[LeaseCharge]:
        return [c for c in self.charges.values() if c.lease.run_key == run_key]


def ledger(snapshot: Snapshot, at: datetime) -> Ledger:
    """Fund every open lease and sum GPU-hours, one pass over the leases (API.md §3 Charges)."""
    owners = namespace_owners(snapshot)
    usages, clip = envelope_windows(snapshot, at)
    charges: dict[str, LeaseCharge] = {}
    found: list[Finding] = []
    walk_leases(snapshot.leases, at, clip, charges, found)

    for key, usage in usages.items():
        usage.consumed_seconds = clip[key][3]
        open_leases = clip[key][2]
        open_leases.sort(key=_funding_order)
        _fund(usage, open_leases, owners, charges, found)
    aggregates = _apply_caps(snapshot, usages, found)
    found += unbound_findings(owners)
    return Ledger(at=at, owners=owners, envelopes=usages, aggregates=aggregates, charges=charges, findings=found)


def envelope_windows(snapshot: Snapshot, at: datetime) -> tuple[dict[EnvelopeKey, EnvelopeUsage], dict[EnvelopeKey, list]]:
    """Each envelope's usage (not funded yet) and, mutable for the hot loop of ``walk_leases``: [window start,
    min(window end, at), open leases, GPU-seconds]."""
    usages: dict[EnvelopeKey, EnvelopeUsage] = {}
    clip: dict[EnvelopeKey, list] = {}
    for key, (budget, envelope) in snapshot.envelopes_by_key.items():
        usages[key] = EnvelopeUsage(budget=budget, envelope=envelope, window_active=envelope.window_contains(at))
        clip[key] = [envelope.start, min(envelope.end, at), [], 0.0]
    return usages, clip


@dataclass
class LeaseWalk:
    """What ``walk_leases`` saw besides the sums: the leases open at ``at`` (snapshot order), the instants after
    ``at`` at which a lease opens or closes, and whether every start and end it read is in whole seconds."""

    open: list[GPULease]
    upcoming: list[datetime]
    whole: bool


def walk_leases(leases: Iterable[GPULease], at: datetime, clip: dict[EnvelopeKey, list],
                charges: dict[str, LeaseCharge], found: list[Finding]) -> LeaseWalk:
    """The one pass over every lease of ``ledger`` (and of reconciler/books.py, which must sum the same floats in
    the same order): each lease's GPU-seconds inside its envelope's window up to ``at`` added to ``clip[key][3]``
    (``clip[key]`` = [window start, min(window end, at), open leases, GPU-seconds]), each open lease appended to
    ``clip[key][2]`` — or charged unfunded (no payer, or an unknown envelope: a finding)."""
    is_open_now: list[GPULease] = []
    upcoming: list[datetime] = []
    whole = at.microsecond == 0
    for lease in leases:
        spec = lease.spec
        start = spec.start
        if start.microsecond:
            whole = False
        if start > at:
            upcoming.append(start)
            continue
        status = lease.status
        if status.closed:
            ended = status.ended or start
            is_open = at < ended
            end = ended if ended < at else at
            if is_open:
                upcoming.append(ended)
            if ended.microsecond:
                whole = False
        else:
            is_open = True
            end = at
        if is_open:
            is_open_now.append(lease)
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
    return LeaseWalk(is_open_now, upcoming, whole)


def unbound_findings(owners: NamespaceOwners) -> list[Finding]:
    """UnboundNamespace: a namespace whose Budgets name several owners."""
    return [
        Finding(
            fk.UNBOUND_NAMESPACE,
            None,
            f"namespace {namespace} has Budgets of {len(names)} owners ({', '.join(names)}): its runs are "
            "unfunded until its Budgets name one owner",
            namespace=namespace,
        )
        for namespace, names in sorted(owners.unbound.items())
    ]


def _funding_order(lease: GPULease) -> tuple:
    return (lease.spec.start, lease.metadata.namespace, lease.metadata.name)


def _charge_unfunded(lease: GPULease, charges: dict[str, LeaseCharge], key: EnvelopeKey | None) -> LeaseCharge:
    charge = LeaseCharge(lease=lease, envelope=key, unfunded=len(lease.spec.slice.slots))
    charges[lease.key] = charge
    return charge


def unknown_envelope(lease: GPULease, key: EnvelopeKey, hint: str = "") -> Finding:
    """UnknownEnvelope: the lease names an envelope that does not exist (``hint`` says what to do)."""
    ns, budget, envelope = key
    return Finding(
        fk.UNKNOWN_ENVELOPE,
        lease.key,
        f"paid by {ns}/{budget} envelope {envelope}, which does not exist: its "
        f"{counted(len(lease.spec.slice.slots), 'GPU')} {_are(len(lease.spec.slice.slots))} unfunded{hint}",
        namespace=lease.metadata.namespace,
    )


def _fund(
    usage: EnvelopeUsage,
    open_leases: list[GPULease],
    owners: NamespaceOwners,
    charges: dict[str, LeaseCharge],
    found: list[Finding],
) -> None:
    envelope = usage.envelope
    env_owner = usage.owner
    key = usage.key  # one tuple for every charge of the envelope (the property makes a new one per call)
    label = f"{key[0]}/{key[1]} envelope {envelope.name}"
    lending = envelope.lending
    first = len(usage.charges)  # the charges before (a walk that goes on: OpenBook._extend) keep theirs
    for lease in open_leases:
        gpus = len(lease.spec.slice.slots)
        charge = LeaseCharge(lease=lease, envelope=key)
        charges[lease.key] = charge
        usage.charges.append(charge)
        if not usage.window_active:
            charge.unfunded = gpus
            found.append(
                Finding(
                    fk.OVERDRAFT,
                    lease.key,
                    f"charged to {label} outside its window "
                    f"[{rfc3339(envelope.start)}, {rfc3339(envelope.end)}): {counted(gpus, 'GPU')} unfunded",
                    envelope=usage.key,
                )
            )
            continue
        if lease.spec.run_ref.namespace in owners.unbound:
            charge.unfunded = gpus
            continue
        cls = relation(lease.spec.owner, env_owner)
        room = envelope.concurrency - usage.used
        limit_reason = f"{label} funds {envelope.concurrency} GPUs at once"
        if cls == BORROWED:
            if not lends_to(envelope, lease.spec.owner):
                charge.unfunded = gpus
                why = "does not lend" if lending is None or not lending.allow else "does not lend to it"
                found.append(
                    Finding(
                        fk.ACL_VIOLATION,
                        lease.key,
                        f"owner {lease.spec.owner} is not family of {env_owner} and {label} {why}: "
                        f"{counted(gpus, 'GPU')} unfunded",
                        envelope=usage.key,
                    )
                )
                continue
            if lending.max_concurrency is not None and lending.max_concurrency - usage.borrowed < room:
                room = lending.max_concurrency - usage.borrowed
                limit_reason = f"{label} lends at most {lending.max_concurrency} GPUs (lending.maxConcurrency)"
            charge.lender = env_owner
        funded = max(0, min(gpus, room))
        setattr(charge, cls, funded)
        setattr(usage, cls, getattr(usage, cls) + funded)
        charge.unfunded = gpus - funded
        if lease.spec.slice.role == "Spare":
            usage.spare += funded
        if charge.unfunded:
            found.append(
                Finding(
                    fk.OVERDRAFT,
                    lease.key,
                    f"{limit_reason}: {charge.unfunded} of its {counted(gpus, 'GPU')} {_are(charge.unfunded)} unfunded",
                    envelope=usage.key,
                )
            )
    usage.unfunded += sum(c.unfunded for c in usage.charges[first:])  # unfunded: the sum of its charges'


def _apply_caps(
    snapshot: Snapshot, usages: dict[EnvelopeKey, EnvelopeUsage], found: list[Finding]
) -> list[AggregateUsage]:
    """Aggregate caps apply after the envelopes: funded slots past a cap become unfunded, latest first in
    funding order."""
    aggregates = []
    for budget in snapshot.budgets:
        aggregates += apply_budget_caps(budget, usages, found)
    return aggregates


def apply_budget_caps(
    budget: Budget, usages: dict[EnvelopeKey, EnvelopeUsage], found: list[Finding]
) -> list[AggregateUsage]:
    """``_apply_caps`` of one Budget: its members' charges are all it changes."""
    aggregates = []
    for cap in budget.spec.aggregate_caps:
        ns, name = budget.metadata.namespace, budget.metadata.name
        members = [usages[(ns, name, e)] for e in cap.envelopes if (ns, name, e) in usages]
        ordered = sorted(
            (c for u in members for c in u.charges if c.funded), key=lambda c: _funding_order(c.lease)
        )
        used = 0
        for charge in ordered:
            funded = charge.funded
            allowed = max(0, min(funded, cap.max_concurrency - used))
            if allowed < funded:
                owner_usage = usages[charge.envelope]
                before = {cls: getattr(charge, cls) for cls in (OWNED, SHARED, BORROWED)}
                charge.unfund(funded - allowed)
                for cls, was in before.items():
                    setattr(owner_usage, cls, getattr(owner_usage, cls) - (was - getattr(charge, cls)))
                owner_usage.unfunded += funded - allowed
                if charge.lease.spec.slice.role == "Spare":
                    owner_usage.spare -= funded - allowed
                found.append(
                    Finding(
                        fk.OVERDRAFT,
                        charge.lease.key,
                        f"aggregate cap {ns}/{name} {cap.name} allows {cap.max_concurrency} GPUs at once: "
                        f"{funded - allowed} of its GPUs {_are(funded - allowed)} unfunded",
                        envelope=charge.envelope,
                    )
                )
            used += allowed
        aggregates.append(
            AggregateUsage(
                budget=budget, name=cap.name, envelopes=cap.envelopes, max_concurrency=cap.max_concurrency,
                used=used,
            )
        )
    return aggregates


def _are(count: int) -> str:
    return "is" if count == 1 else "are"
