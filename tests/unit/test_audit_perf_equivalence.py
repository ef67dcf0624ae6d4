"""``engine.audit`` is written for speed (one pass over the history, slot lists handled once per distinct list,
an exact per-node test before the pair search for DoubleBooked, the ledger only where a cheap bound says a
problem is possible). Here it must agree with a plain reference written for clarity — every lease, every slot,
every slot's overlapping episodes, the ledger at every instant where funding can change — on random small fleets (hypothesis) that
have every finding kind: slots held twice, unknown nodes and slots, missing runs and envelopes, borrowers an
envelope does not lend to, overdrafts, an aggregate cap and an envelope whose window closes inside the audit
window."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

from builders import at, budget, envelope, lease, node, run, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_runs.engine import findings as fk
from kubectl_runs.engine.accounting import ledger
from kubectl_runs.engine.audit import NO_ENVELOPE, NODE_GONE_REASONS, RUN_GONE_REASONS, audit, split_slot
from kubectl_runs.engine.findings import Finding, sort_findings
from kubectl_runs.engine.reports import finding_entries, plain
from kubectl_runs.engine.slots import slot_findings as lease_slot_findings
from kubectl_runs.model import Snapshot
from kubectl_runs.timeutil import rfc3339

AT = at(hours=200)
NODES = ("n1", "n2", "n3")  # 4 GPUs each; "gone" is not a node, and #4.. are not slots of n1..n3
OWNERS = ("org:team", "org:team:x", "org:other", "partner:ext")
DIMENSION_SETS = (("owner",), ("envelope",), ("flavor",), ("run",), ("node",), ("owner", "node"), ("flavor", "envelope"))


# --- the reference ----------------------------------------------------------------------------------------------


def reference(fleet: Snapshot, since: datetime, until: datetime, by: tuple[str, ...], namespace: str | None):
    """(rows as {key: (gpu_seconds, leases, peak)}, total seconds, total leases, findings), the slow way."""
    hi_at = min(until, AT)
    lo, hi = since.timestamp(), hi_at.timestamp()
    window = []  # (lease, clipped start, clipped end)
    for x in fleet.leases:
        end = x.end_or(hi_at).timestamp()
        start = x.spec.start.timestamp()
        if x.status.closed and (x.status.ended is None or x.status.ended <= x.spec.start):
            continue
        if start < hi and end > lo:
            window.append((x, max(start, lo), min(end, hi)))

    def payer(x):
        return NO_ENVELOPE if x.payer is None else "/".join(x.payer)

    def node_counts(x):
        counts: dict[str, int] = {}
        for slot in x.spec.slice.slots:
            node_name = split_slot(slot)[0]
            counts[node_name] = counts.get(node_name, 0) + 1
        return counts

    entries = []  # (key, gpus, start, end): one per lease, or per (lease, node) when node is a dimension
    for x, start, end in window:
        if namespace is not None and x.metadata.namespace != namespace:
            continue
        values = {"owner": x.spec.owner, "flavor": x.spec.flavor, "run": x.run_key, "envelope": payer(x)}
        parts = node_counts(x).items() if "node" in by else [(None, x.gpus)]
        for node_name, gpus in parts:
            values["node"] = node_name
            entries.append((tuple(values[d] for d in by), gpus, start, end))
    rows: dict[tuple, tuple[float, int, int]] = {}
    for key in {e[0] for e in entries}:
        mine = [e for e in entries if e[0] == key]
        peak = max(sum(g for _, g, s, e in mine if s <= t < e) for t in {s for _, _, s, _ in mine})
        rows[key] = (sum(g * (e - s) for _, g, s, e in mine), len(mine), peak)
    counted = [w for w in window if namespace is None or w[0].metadata.namespace == namespace]
    total_seconds = sum(x.gpus * (e - s) for x, s, e in counted)

    found = _slot_findings(fleet, window) + _reference_findings(fleet, window) + _ledger_findings(fleet, window, lo, hi_at)
    if namespace is not None:
        found = [f for f in found if (f.lease.partition("/")[0] if f.lease else f.namespace) == namespace]
    return rows, total_seconds, len(counted), sort_findings(found)


def _slot_findings(fleet, window):
    """Each lease's slots judged one by one (the kinds of engine/slots.py, worded by its ``slot_findings``)."""
    found = []
    nodes = fleet.nodes_by_name
    for x, _s, _e in window:
        gone = x.status.closed and x.status.closure_reason in NODE_GONE_REASONS
        faults: dict[str, list[str]] = {}
        for slot in dict.fromkeys(x.spec.slice.slots):
            name, _sep, ordinal = slot.rpartition("#")
            if not name or not ordinal.isascii() or not ordinal.isdigit() or (ordinal != "0" and ordinal[0] == "0"):
                kind = fk.MALFORMED_SLOT
            elif not nodes or gone:
                continue
            elif name not in nodes:
                kind = fk.UNKNOWN_NODE
            elif int(ordinal) >= nodes[name].gpus:
                kind = fk.SLOT_OUT_OF_RANGE
            else:
                continue
            faults.setdefault(kind, []).append(slot)
        found.extend(lease_slot_findings(x, faults, nodes))
    found.extend(_double_bookings(window))
    return found


def _double_bookings(window):
    """DoubleBooked, the plain way: for every slot, the instants at which its holders start or end; between two
    consecutive instants the slot is held by a fixed set of leases; the maximal runs of such stretches held by
    two or more are the slot's *episodes*, and the leases involved in one are those held during any of its
    stretches. Slots of one node with the same episode (same interval, same leases) are one finding."""
    holders: dict[str, list[tuple]] = {}
    for x, start, end in window:
        for slot in x.spec.slice.slots:
            holders.setdefault(slot, []).append((x, start, end))
    groups: dict[tuple, list[str]] = {}
    for slot, held in holders.items():
        instants = sorted({t for _x, s, e in held for t in (s, e)})
        episode = None  # [lo, hi, involved keys]
        for lo, hi in pairwise(instants):
            during = {x.key for x, s, e in held if s < hi and e > lo}
            if len(during) >= 2:
                if episode is not None and episode[1] == lo:
                    episode[1] = hi
                    episode[2] |= during
                else:
                    if episode is not None:
                        groups.setdefault((split_slot(slot)[0], episode[0], episode[1], frozenset(episode[2])), []).append(slot)
                    episode = [lo, hi, set(during)]
        if episode is not None:
            groups.setdefault((split_slot(slot)[0], episode[0], episode[1], frozenset(episode[2])), []).append(slot)
    by_key = {x.key: x for x, _s, _e in window}
    found = []
    for (_node, lo, hi, involved), slots in groups.items():
        ordered = sorted((by_key[k] for k in involved), key=lambda x: (x.spec.start, x.key))
        lease, others = ordered[1], [ordered[0], *ordered[2:]]
        slots = sorted(slots, key=split_slot)
        said = "slot " + slots[0] if len(slots) == 1 else (
            "slots " + ", ".join(slots) if len(slots) <= 3 else f"{len(slots)} slots ({slots[0]} … {slots[-1]})")
        if len(ordered) == 2:
            detail = (f"holds {said} also held by {others[0].key} from {_iso(lo)} to {_iso(hi)}: one slot is one GPU; "
                      "close the lease that is not running there")
        else:
            named = [x.key for x in others[:3]]
            more = len(others) - len(named)
            names = ", ".join(named) + f" and {more} more" if more else ", ".join(named[:-1]) + " and " + named[-1]
            detail = (f"holds {said} at once with {len(others)} other leases from {_iso(lo)} to {_iso(hi)} ({names}): "
                      "one slot is one GPU; close the leases that are not running there")
        found.append(Finding(fk.DOUBLE_BOOKED, lease.key, detail))
    return found


def _reference_findings(fleet, window):
    found = []
    runs = {r.key for r in fleet.runs}
    for x, _s, _e in window:
        gpus = f"{x.gpus} GPU" if x.gpus == 1 else f"{x.gpus} GPUs"
        closed = x.status.closed
        if x.run_key not in runs and not (closed and x.status.closure_reason in RUN_GONE_REASONS):
            still = "held" if closed else "still holds"
            found.append(Finding(fk.UNKNOWN_RUN, x.key, f"run {x.run_key} is not in the snapshot but the lease {still} "
                                 f"{gpus}: " + ("check the runRef" if closed else "close it (RunDeleted) or restore the run")))
        if x.payer is not None and x.payer not in fleet.envelopes_by_key:
            ns, name, env = x.payer
            found.append(Finding(fk.UNKNOWN_ENVELOPE, x.key, f"paid by {ns}/{name} envelope {env}, which does not exist: "
                                 f"its {gpus} {'is' if x.gpus == 1 else 'are'} unfunded; fix paidBy or create the "
                                 "envelope"))
    return found


def _ledger_findings(fleet, window, lo, hi_at):
    """The ledger at every instant funding can change inside the window — each lease's (clipped) start and each
    envelope's close — and at its end; each lease keeps its earliest finding of each kind."""
    hi = hi_at.timestamp()
    instants = {s for _x, s, _e in window} | {
        e.end.timestamp() for _b, e in fleet.envelopes_by_key.values() if lo < e.end.timestamp() < hi}
    evaluations = [(datetime.fromtimestamp(t, UTC), [x for x, s, e in window if s <= t < e]) for t in sorted(instants)
                   if lo <= t < hi]
    if hi_at.timestamp() > lo:
        evaluations.append((hi_at, [x for x, _s, e in window if e >= hi and x.open_at(hi_at)]))
    best: dict = {}
    for instant, open_leases in evaluations:
        for f in ledger(Snapshot(budgets=fleet.budgets, leases=tuple(open_leases)), instant).findings:
            if f.kind == fk.UNKNOWN_ENVELOPE:
                continue
            key = (f.kind, f.lease, f.detail if f.lease is None else "")
            if key not in best or instant < best[key][0]:
                best[key] = (instant, f)
    return [f if f.lease is None else Finding(f.kind, f.lease, f"at {rfc3339(t)}: {f.detail}") for t, f in best.values()]


def _iso(epoch: float) -> str:
    return rfc3339(datetime.fromtimestamp(epoch, UTC))


# --- random fleets ------------------------------------------------------------------------------------------------


@st.composite
def fleets(draw):
    """Budget team/b (org:team): west funds 2-8 GPUs, lends to org:* up to 2 when lending is drawn, closes at a
    drawn hour; east funds 4; an aggregate cap over both is drawn or not. Leases of team and ext hold 1-3 slots on
    n1-n3 (sometimes on "gone", or slot #5 of a 4-GPU node), paid by west, east, a missing envelope, or nothing. Half
    the fleets are pile-ups (see below): the path of engine/audit_slots.py for a node whose leases are all held
    at one instant."""
    lending = draw(st.sampled_from([None, {"allow": True, "to": ["org:*"], "maxConcurrency": 2}, {"allow": False}]))
    envelopes = [
        envelope("west", concurrency=draw(st.integers(2, 8)), start=at(hours=0),
                 end=at(hours=draw(st.sampled_from([60, 120, 500]))), lending=lending),
        envelope("east", concurrency=4, start=at(hours=0), end=at(hours=500)),
    ]
    caps = [{"name": "both", "envelopes": ["west", "east"], "maxConcurrency": draw(st.integers(2, 10))}] \
        if draw(st.booleans()) else None
    objects: list = [node(name, gpus=4) for name in NODES]
    objects.append(budget("b", envelopes=envelopes, aggregate_caps=caps))
    if draw(st.booleans()):
        objects.append(budget("c", "team", owner="org:team:twin"))  # two owners: team is unbound
    leases = []
    # A pile-up: every lease starts within a few hours (often the same hour) and is held long, so a node's leases
    # are usually all held at one instant, by many different slot lists (some on two nodes).
    pile = draw(st.booleans())
    for i in range(draw(st.integers(0, 18))):
        node_name = draw(st.sampled_from((*NODES, "n1", "n2", "gone")))
        first = draw(st.integers(0, 3))
        count = draw(st.integers(1, 3 if node_name != "gone" else 1))
        slot_list = [f"{node_name}#{k}" for k in range(first, first + count)]  # may run past #3: not a slot
        if pile and node_name != "gone" and draw(st.integers(0, 4)) == 0:
            slot_list.append(f"{draw(st.sampled_from(NODES))}#{draw(st.integers(0, 3))}")  # a second node (or a repeat)
            slot_list = list(dict.fromkeys(slot_list))
        start = draw(st.integers(100, 103)) if pile else draw(st.integers(0, 190))
        closed = draw(st.booleans())
        leases.append(lease(
            f"l{i:02d}", draw(st.sampled_from(("team", "team", "ext"))),
            owner=draw(st.sampled_from(OWNERS)),
            slot_list=slot_list,
            paid_by=draw(st.sampled_from([("team", "b", "west"), ("team", "b", "west"), ("team", "b", "east"),
                                          ("team", "b", "gone"), None])),
            start=at(hours=start),
            ended=at(hours=start + draw(st.integers(50, 90) if pile else st.integers(0, 80))) if closed else None,
            closure_reason=draw(st.sampled_from([None, "Completed", "RunDeleted", "NodeFailure"])) if closed else None,
            flavor=draw(st.sampled_from(("H100", "MI300X"))),
        ))
    objects.extend(leases)
    known = [x for x in leases if draw(st.integers(0, 5))]  # most runs exist
    objects.extend(run(x.spec.run_ref.name, x.spec.run_ref.namespace) for x in known)
    since = draw(st.integers(90, 110)) if pile and draw(st.booleans()) else draw(st.integers(0, 180))
    until = draw(st.integers(since + 1, 260))
    by = draw(st.sampled_from(DIMENSION_SETS))
    namespace = draw(st.sampled_from([None, None, "team", "ext"]))
    return snapshot(*objects), at(hours=since), at(hours=until), by, namespace


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_the_fast_engine_agrees_with_the_reference(case):
    fleet, since, until, by, namespace = case
    report = audit(fleet, AT, since=since, until=until, by=by, namespace=namespace)
    rows, total_seconds, total_leases, found = reference(fleet, since, until, by, namespace)
    # Times are whole hours: every GPU-second sum is exact, so the comparison is exact too.
    assert {r.key: (r.gpu_seconds, r.leases, r.peak_gpus) for r in report.rows} == rows
    assert (report.total_gpu_seconds, report.total_leases) == (total_seconds, total_leases)
    assert plain(finding_entries(report.findings)) == plain(finding_entries(found))
