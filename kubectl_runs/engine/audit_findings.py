"""The findings of ``leases audit`` (API.md §5) about runs (``UnknownRun``), envelopes (``UnknownEnvelope``) and
the ledger itself (``ACLViolation``, ``Overdraft``, ``UnboundNamespace``, evaluated where a problem is possible),
over the window of engine/audit_window.py. The slot findings (``DoubleBooked``, ``UnknownNode``) are
engine/audit_slots.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from itertools import compress, count, groupby, repeat
from operator import attrgetter, ge

from ..model import Snapshot
from ..text import counted
from ..timeutil import rfc3339
from . import findings as fk
from .accounting import BORROWED, EnvelopeKey, ledger, lends_to, relation, unknown_envelope
from .audit_window import Window, peak
from .findings import Finding

# Closed leases whose run is expected to be gone: not reported as UnknownRun.
RUN_GONE_REASONS = frozenset({"RunDeleted", "Orphaned"})



# --- findings about references: UnknownRun, UnknownEnvelope ---------------------------------------------------


_NAMESPACE = attrgetter("metadata.namespace")
_NAME = attrgetter("metadata.name")


def run_findings(snapshot: Snapshot, win: Window) -> list[Finding]:
    namespaces, names = win.column("run_namespace"), win.column("run_name")
    # Leases and runs come a namespace at a time (loaded snapshots are sorted; any order is correct, only slower):
    # each costs one set operation on its name, and no key tuple is made.
    wanted: dict[str, set[str]] = {}  # namespace -> names of runs the window's leases refer to
    for namespace, idx in groupby(range(len(names)), key=namespaces.__getitem__):
        found = wanted.get(namespace)
        if found is None:
            wanted[namespace] = set(map(names.__getitem__, idx))
        else:
            found.update(map(names.__getitem__, idx))
    for namespace, runs in groupby(snapshot.runs, key=_NAMESPACE):
        found = wanted.get(namespace)
        if found:
            found.difference_update(map(_NAME, runs))
    missing = {(namespace, name) for namespace, left in wanted.items() for name in left}
    if not missing:
        return []
    out = []
    missing_names = {name for _namespace, name in missing}
    for i in compress(count(), map(missing_names.__contains__, names)):
        ref = (namespaces[i], names[i])
        if ref not in missing:
            continue
        lease = win.leases[i]
        status = lease.status
        if status.closed and status.closure_reason in RUN_GONE_REASONS:
            continue
        still = "still holds" if not status.closed else "held"
        out.append(
            Finding(
                fk.UNKNOWN_RUN,
                lease.key,
                f"run {ref[0]}/{ref[1]} is not in the snapshot but the lease {still} {counted(len(lease.spec.slice.slots), 'GPU')}: "
                + ("close it (RunDeleted) or restore the run" if not status.closed else "check the runRef"),
                namespace=lease.metadata.namespace,
            )
        )
    return out


def payers(win: Window) -> list[EnvelopeKey | None]:
    """The (namespace, budget, envelope) each window lease is charged to; None = minted unfunded. A paidBy
    without a namespace names an envelope in the run's namespace."""
    found = win._columns.get("payer")
    if found is not None:
        return found
    # One key per PaidBy object (clip makes equal ones one object; any others only make equal keys): by
    # identity, which reads no field of the object.
    paid_by = win.column("paid_by")
    ids = list(map(id, paid_by))
    distinct = dict(zip(ids, paid_by, strict=True))
    keys = {i: None if paid is None else (paid.namespace, paid.budget, paid.envelope) for i, paid in distinct.items()}
    out = list(map(keys.__getitem__, ids))
    if any(key is not None and not key[0] for key in keys.values()):
        run_namespaces = win.column("run_namespace")
        for i, key in enumerate(out):
            if key is not None and not key[0]:
                out[i] = (run_namespaces[i], key[1], key[2])
    win._columns["payer"] = out
    return out


def envelope_findings(snapshot: Snapshot, win: Window, by_payer: dict[EnvelopeKey | None, list[int]]) -> list[Finding]:
    known = snapshot.envelopes_by_key
    out = []
    for key, idx in by_payer.items():
        if key is None or key in known:
            continue
        out.extend(unknown_envelope(win.leases[i], key, hint="; fix paidBy or create the envelope") for i in idx)
    return out


# --- findings of the ledger: ACLViolation, Overdraft, UnboundNamespace ---------------------------------------------


def ledger_findings(
    snapshot: Snapshot,
    win: Window,
    by_payer: dict[EnvelopeKey | None, list[int]],
    since: datetime,
    hi_at: datetime,
    at_starts: bool,
) -> tuple[list[Finding], int]:
    """Run the ledger (``accounting.ledger``) itself, at the end of the window and — when ``at_starts`` — at
    every instant inside the window where it could find a problem, on the leases open at that instant.

    Funding only changes when a lease starts or an envelope's window closes, and a lease takes its place in the
    funding order by its start, so a lease that is unfunded at some instant is already unfunded at its own
    start or at the close of its envelope's window. Those are the instants evaluated, but only for budgets
    where a cheap bound says a problem is possible: an envelope whose peak of charged GPUs exceeds its
    concurrency (or the lending cap, or an aggregate cap), a lease of an owner it does not lend to, or a lease
    open outside its window. Each lease keeps its earliest finding of each kind, said with its instant."""
    evaluations: list[tuple[datetime, list[int]]] = []
    if hi_at > since:
        reach = compress(count(), map(ge, win.ends, repeat(win.hi)))  # held up to the window's end (C-level)
        end_open = [i for i in reach if win.leases[i].open_at(hi_at)]
        evaluations.append((hi_at, end_open))
    else:
        evaluations.append((hi_at, []))
    if at_starts and win.leases:
        evaluations.extend(_suspect_instants(snapshot, win, by_payer))
    best: dict[tuple[str, str | None, str], tuple[datetime, Finding]] = {}
    for instant, idx in evaluations:
        view = Snapshot(budgets=snapshot.budgets, leases=tuple(win.leases[i] for i in idx))
        for finding in ledger(view, instant).findings:
            if finding.kind == fk.UNKNOWN_ENVELOPE:
                continue  # reported for every window lease by envelope_findings
            key = (finding.kind, finding.lease, finding.detail if finding.lease is None else "")
            if key not in best or instant < best[key][0]:
                best[key] = (instant, finding)
    out = []
    for instant, finding in best.values():
        if finding.lease is None:
            out.append(finding)
        else:
            out.append(
                Finding(
                    finding.kind,
                    finding.lease,
                    f"at {rfc3339(instant)}: {finding.detail}",
                    envelope=finding.envelope,
                    namespace=finding.lease.partition("/")[0],
                )
            )
    return out, len(evaluations)


def _suspect_instants(
    snapshot: Snapshot, win: Window, by_payer: dict[EnvelopeKey | None, list[int]]
) -> list[tuple[datetime, list[int]]]:
    """(instant, leases open then) for every instant where the ledger might find a problem (see above)."""
    envelopes = snapshot.envelopes_by_key
    by_envelope: dict[EnvelopeKey, list[int]] = {
        key: idx for key, idx in by_payer.items() if key is not None and key in envelopes
    }
    if not by_envelope:
        return []
    starts, ends = win.starts, win.ends
    owners = win.column("owner")
    suspects: dict[tuple[str, str], set[float]] = {}  # budget -> instants to evaluate

    def suspect(key: EnvelopeKey, instants: Iterable[float]) -> None:
        suspects.setdefault((key[0], key[1]), set()).update(instants)

    env_peaks: dict[EnvelopeKey, int] = {}
    for key, idx in by_envelope.items():
        budget, envelope = envelopes[key]
        open_at, close_at = envelope.start.timestamp(), envelope.end.timestamp()
        # Outside the envelope's window: at the start of a lease that starts before it opens or after it closes,
        # or when the window closes on a lease still held.
        covers = open_at <= win.lo and close_at >= win.hi  # then every lease is inside the envelope's window
        if not covers and (min(map(starts.__getitem__, idx)) < open_at or max(map(ends.__getitem__, idx)) > close_at):
            suspect(key, (starts[i] for i in idx if starts[i] < open_at or starts[i] >= close_at))
            if win.lo < close_at < win.hi:
                suspect(key, (close_at,))
        # Borrowed: an owner it does not lend to (ACL) is suspect at the lease's start; a lending cap is checked
        # like the concurrency below.
        env_owner = budget.spec.owner
        lending = envelope.lending
        borrowed: list[int] = []
        lease_owners = set(map(owners.__getitem__, idx))
        outsiders = {o for o in lease_owners if relation(o, env_owner) == BORROWED}
        if outsiders:
            denied = {o for o in outsiders if not lends_to(envelope, o)}
            if denied:
                suspect(key, (starts[i] for i in idx if owners[i] in denied))
            borrowed = [i for i in idx if owners[i] in outsiders and owners[i] not in denied]
        env_peaks[key] = _bounded_peak(win, idx, envelope.concurrency)
        if env_peaks[key] > envelope.concurrency:
            suspect(key, _over(win, idx, envelope.concurrency))
        cap = None if lending is None else lending.max_concurrency
        if borrowed and cap is not None and _bounded_peak(win, borrowed, cap) > cap:
            suspect(key, _over(win, borrowed, cap))
    for budget in snapshot.budgets:
        ns, name = budget.metadata.namespace, budget.metadata.name
        for cap in budget.spec.aggregate_caps:
            members = [(ns, name, e) for e in cap.envelopes if (ns, name, e) in by_envelope]
            if sum(env_peaks[m] for m in members) <= cap.max_concurrency:
                continue
            idx = [i for m in members for i in by_envelope[m]]
            if _bounded_peak(win, idx, cap.max_concurrency) > cap.max_concurrency:
                suspect(members[0], _over(win, idx, cap.max_concurrency))
    out = []
    for (ns, name), instants in suspects.items():
        idx = [i for key, members in by_envelope.items() if key[0] == ns and key[1] == name for i in members]
        for instant in sorted(instants):
            if not win.lo <= instant < win.hi:
                continue
            open_then = [i for i in idx if starts[i] <= instant < ends[i]]
            out.append((datetime.fromtimestamp(instant, UTC), open_then))
    return out


def _bounded_peak(win: Window, idx: list[int], limit: int) -> int:
    """The peak of GPUs held by these leases, or any number ≤ ``limit`` when it cannot exceed it (their sum)."""
    total = sum(map(win.gpus.__getitem__, idx))
    if total <= limit:
        return total
    return peak(
        list(map(win.starts.__getitem__, idx)), list(map(win.ends.__getitem__, idx)), list(map(win.gpus.__getitem__, idx))
    )


def _over(win: Window, idx: list[int], limit: int) -> list[float]:
    """The start instants at which these leases hold more than ``limit`` GPUs."""
    starts, ends, gpus = win.starts, win.ends, win.gpus
    events = sorted([(ends[i], 0, -gpus[i]) for i in idx] + [(starts[i], 1, gpus[i]) for i in idx])
    held = 0
    out = []
    for instant, kind, delta in events:
        held += delta
        if kind and held > limit:
            out.append(instant)
    return out
