"""Differential tests of the findings of ``leases audit --archive`` computed over DuckDB (archive/findings.py):
on the same leases, the findings, the ledger's instants and the notes are exactly those of the engine on one
snapshot holding every lease (engine/audit.py) — planted double bookings (pile-ups, chains, a lease across
months, live and archived on one slot, equal starts, touching ends), unknown nodes, slots, runs and envelopes,
overdrafts, ACL violations, lending and aggregate caps, ``-n``, windows inside, across and outside the archive,
and random fleets (hypothesis) with every finding kind. The view is archive/relation.py's, over Parquet written by the archive."""

from __future__ import annotations

import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import test_audit_perf_equivalence as perf
from archive_fleets import fleet_objects, history, with_uid
from builders import T0, at, budget, envelope, lease, node, run, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kubectl_runs.archive.findings as findings_module
from kubectl_runs.archive import db, reader, relation, store
from kubectl_runs.archive.findings import findings
from kubectl_runs.engine.audit import audit
from kubectl_runs.engine.codes import FindingKind
from kubectl_runs.model import Snapshot

AT = T0 + timedelta(days=31)


def _key(x):
    return (x.metadata.namespace, x.metadata.name)


def both(fleet: Snapshot, live_keys, since, until, base: Path, *, at_=AT, namespace=None):
    """(the engine's findings, instants, notes on the whole fleet; the same from DuckDB over the view of
    archive/relation.py, the leases not in ``live_keys`` archived into a new directory under ``base``)."""
    want = audit(fleet, at_, since=since, until=until, namespace=namespace)
    live = [x for x in fleet.leases if _key(x) in live_keys]
    archived = [x for x in fleet.leases if _key(x) not in live_keys]
    assert all(x.status.closed for x in archived)
    hi_at = min(until, at_)
    archive_dir = Path(tempfile.mkdtemp(dir=base))
    store.archive(archive_dir, archived, archived_at=at_)
    con = db.connect()
    relation.define(con, [reader.open_archive(archive_dir)], live, since, hi_at)
    notes: list[str] = []
    got, instants = findings(con, relation.VIEW, Snapshot(nodes=fleet.nodes, budgets=fleet.budgets, runs=fleet.runs,
                                                          leases=tuple(live)), since, hi_at, namespace=namespace,
                             notes=notes)
    # archive/findings.py gives the time findings of the live leases; those of archived leases are
    # archive/faults.py's (archive/audit.py joins them: tests/unit/test_audit_archive.py compares the whole).
    archived_keys = {x.key for x in archived}
    wanted = [f for f in want.findings if f.kind not in TIMED or f.lease not in archived_keys]
    return (wanted, want.ledger_instants, [n for n in want.notes if "Nodes" in n]), (got, instants, notes)


TIMED = (FindingKind.INVALID_INTERVAL, FindingKind.CLOSED_WITHOUT_END, FindingKind.OPEN_WITH_END, FindingKind.FUTURE_START)


def closed_before(leases, cut):
    return {_key(x) for x in leases if not (x.status.closed and (x.status.ended or x.spec.start) < cut)}


# --- a history with every kind, read from Parquet --------------------------------------------------------------


LEASES = sorted(history(21, 700, days=150), key=_key)
FLEET = snapshot(*fleet_objects(), *LEASES)
CUT = T0 - timedelta(days=40)
WINDOWS = {
    "inside": (T0 - timedelta(days=120), T0 - timedelta(days=60)),
    "across": (T0 - timedelta(days=60), T0 - timedelta(days=20)),
    "after": (T0 - timedelta(days=10), T0 + timedelta(days=20)),
    "before": (T0 - timedelta(days=400), T0 - timedelta(days=300)),
    "whole": (T0 - timedelta(days=200), AT + timedelta(days=5)),
}


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("namespace", [None, "team", "ext"])
def test_a_history_from_parquet(tmp_path, window, namespace):
    since, until = WINDOWS[window]
    want, got = both(FLEET, closed_before(LEASES, CUT), since, until, tmp_path, namespace=namespace)
    assert got == want
    if window in ("inside", "across", "whole") and namespace is None:
        kinds = {f.kind for f in want[0]}
        assert {"DoubleBooked", "UnknownEnvelope", "UnknownRun"} <= kinds, kinds
    if window == "whole" and namespace is None:
        assert {"ACLViolation", "Overdraft"} <= {f.kind for f in want[0]}


def test_nothing_live(tmp_path):
    """Every closed lease archived (the open ones stay live), whole history."""
    want, got = both(FLEET, {_key(x) for x in LEASES if not x.status.closed}, *WINDOWS["whole"], tmp_path)
    assert got == want
    assert len(want[0]) > 100


# --- planted cases ----------------------------------------------------------------------------------------------


def _lease(name, slot_list, start_h, end_h=None, **kw):
    return with_uid(lease(name, slot_list=slot_list, start=at(hours=start_h),
                          ended=None if end_h is None else at(hours=end_h), run_name="r", **kw), f"uid-{name}")


NODES = [node("a", gpus=8), node("b", gpus=4)]
BUDGET = budget("b", "team", owner="org:team",
                envelopes=[envelope("west", concurrency=6, start=at(hours=-1000), end=at(hours=1000),
                                    lending={"allow": True, "to": ["org:*"], "maxConcurrency": 2}),
                           envelope("east", concurrency=4, start=at(hours=10), end=at(hours=80))],
                aggregate_caps=[{"name": "both", "envelopes": ["west", "east"], "maxConcurrency": 7}])
PLANTED = {
    # 30 leases on a#0, each starting an hour after the last and held 10 hours: one long episode
    "pile-up": [_lease(f"p{i:02d}", ["a#0"], i, i + 10) for i in range(30)],
    # back to back (touching ends are not double bookings) with one overlap in the middle of the chain
    "chain": [_lease(f"c{i}", ["a#1", "a#2"], 5 * i, 5 * i + 5) for i in range(8)]
    + [_lease("c-over", ["a#2"], 12, 13)],
    # equal starts, equal ends
    "equal": [_lease("e1", ["b#0", "b#1"], 3, 9), _lease("e2", ["b#0", "b#1"], 3, 9), _lease("e3", ["b#1"], 3, 4)],
    # a lease held across months (partitions) that two later leases double-book, one live and open
    "months": [_lease("long", ["a#3", "a#4"], -24 * 40, 24 * 20), _lease("m1", ["a#3"], -24 * 35, -24 * 34),
               _lease("m2-live", ["a#4"], 24 * 3)],
    # several episodes on one slot, separated by gaps, and a holder spanning two of them
    "episodes": [_lease("h", ["a#5"], 0, 100), _lease("x1", ["a#5"], 10, 20), _lease("x2", ["a#5"], 20, 30),
                 _lease("x3", ["a#5"], 50, 60), _lease("x4", ["a#5", "a#6"], 55, 58), _lease("y", ["a#6"], 57, 70)],
    # overlaps that touch: t3 starts as the first episode ends, holds the slot longest, and t4 overlaps it — one
    # episode of four leases (t3 is one of them though it never overlaps the lease before it)
    "touching": [_lease("t1", ["a#3"], 0, 10), _lease("t2", ["a#3"], 5, 10), _lease("t3", ["a#3"], 10, 15),
                 _lease("t4", ["a#3"], 10, 12)],
    # a slot twice in one lease is held once by it (no finding alone; one other lease makes two holders)
    "duplicate-slot": [_lease("d1", ["a#0", "a#0"], 0, 10), _lease("d2", ["a#1", "a#1", "a#2"], 0, 10),
                       _lease("d3", ["a#2"], 5, 6)],
    "unknown": [_lease("u-node", ["gone#0"], 1, 2), _lease("u-slot", ["b#4", "b#1"], 30, 31),
                _lease("u-bad", ["a#x"], 1, 5), _lease("u-gone", ["gone#1"], 1, 2, closure_reason="NodeFailure"),
                _lease("u-run", ["a#7"], 1, 2, run_namespace="elsewhere"),
                _lease("u-run-deleted", ["a#7"], 3, 4, run_namespace="elsewhere", closure_reason="RunDeleted"),
                _lease("u-env", ["a#7"], 5, 6, paid_by=("b", "nowhere"))],
    "ledger": [_lease(f"o{i}", ["a#0", "a#1"], 20 + i, 40 + i, paid_by=("b", "west")) for i in range(4)]
    + [_lease("borrow1", ["b#2", "b#3"], 25, 35, owner="org:else"),
       _lease("borrow2", ["b#0", "b#1"], 26, 36, owner="org:else:x"),
       _lease("acl", ["b#2"], 50, 52, owner="ext:partner"),
       _lease("late", ["a#6"], 70, 90, paid_by=("b", "east")),
       _lease("east1", ["a#7"], 20, 30, paid_by=("b", "east")),
       _lease("east2", ["a#5"], 21, 29, paid_by=("b", "east"))],
}


# Budgets where exactly one bound makes a budget suspect (each its own namespace and owner), and the leases
# that trip it; the window of the tests below is [-2000 h, 2000 h) unless a case says otherwise.
def _budget(namespace, **kw):
    caps = kw.pop("caps", None)
    return budget("b", namespace, owner=f"org:{namespace}", envelopes=[envelope(
        "w", concurrency=kw.pop("concurrency", 8), start=kw.pop("start", at(hours=-3000)),
        end=kw.pop("end", at(hours=3000)), **kw), envelope("v", concurrency=8, start=at(hours=-3000),
                                                          end=at(hours=3000))], aggregate_caps=caps)


def _charged(name, namespace, slot_list, start_h, end_h=None, *, owner=None, envelope_name="w"):
    return _lease(name, slot_list, start_h, end_h, owner=owner or f"org:{namespace}",
                  paid_by=(namespace, "b", envelope_name), run_namespace="team")


LEDGER = {
    "overdraft-only": ([_budget("ov", concurrency=2)],
                       [_charged("ov1", "ov", ["a#0", "a#1"], 10, 20), _charged("ov2", "ov", ["b#0"], 15, 25)]),
    "acl-only": ([_budget("acl")], [_charged("acl1", "acl", ["a#0"], 10, 20, owner="ext:partner")]),
    "lending-only": ([_budget("len", lending={"allow": True, "to": ["ext:*"], "maxConcurrency": 1})],
                     [_charged("len1", "len", ["a#0"], 10, 20, owner="ext:a"),
                      _charged("len2", "len", ["b#0"], 15, 25, owner="ext:b")]),
    "aggregate-only": ([_budget("agg", caps=[{"name": "c", "envelopes": ["w", "v"], "maxConcurrency": 2}])],
                       [_charged("agg1", "agg", ["a#0", "a#1"], 10, 20),
                        _charged("agg2", "agg", ["b#0"], 15, 25, envelope_name="v")]),
    "window-only": ([_budget("win", start=at(hours=12))], [_charged("win1", "win", ["a#0"], 10, 20)]),
    # the envelope's window ends at the audit's end (150 h) while a lease is open: only the evaluation at the
    # end of the window sees it
    "end-only": ([_budget("end", end=at(hours=150))], [_charged("end1", "end", ["a#0"], 100)]),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
@pytest.mark.parametrize("live_share", ["none", "half", "all"])
@pytest.mark.parametrize("span", [(-2000, 2000), (0, 48), (15, 35), (-24 * 36, -24 * 30), (200, 300)])
def test_planted(tmp_path, case, live_share, span):
    leases = sorted(PLANTED[case], key=_key)
    fleet = snapshot(*NODES, BUDGET, run("r"), *leases)
    live = {_key(x) for i, x in enumerate(leases) if not x.status.closed
            or live_share == "all" or (live_share == "half" and i % 2)}
    want, got = both(fleet, live, at(hours=span[0]), at(hours=span[1]), tmp_path, at_=at(hours=150))
    assert got == want
    if span == (-2000, 2000) and case != "unknown":
        assert want[0], "the planted case finds something over its whole history"
    if case == "duplicate-slot" and span == (-2000, 2000):  # a slot twice in one lease is not a double booking
        assert [(f.lease, f.detail[:40]) for f in want[0]] == [("team/d3", "holds slot a#2 also held by team/d2 from")]


@pytest.mark.parametrize("case", sorted(LEDGER))
@pytest.mark.parametrize("span", [(-2000, 2000), (0, 18), (12, 150), (16, 2000)])
def test_each_ledger_bound(tmp_path, case, span):
    """A busy history (40 leases of org:team on n#0-#7, none of them a problem) is archived; the case's leases
    are archived or live; the finding comes from one bound only."""
    budgets, planted = LEDGER[case]
    quiet = [_lease(f"q{i:02d}", [f"n#{i % 8}"], 5 * (i // 8), 5 * (i // 8) + 5) for i in range(40)]
    leases = sorted([*quiet, *planted], key=_key)
    fleet = snapshot(*NODES, node("n", gpus=8), BUDGET, *budgets, run("r"), *leases)
    for live in (set(), {_key(x) for x in planted}):
        live |= {_key(x) for x in leases if not x.status.closed}
        want, got = both(fleet, live, at(hours=span[0]), at(hours=span[1]), tmp_path, at_=at(hours=150))
        assert got == want
        if (span[0] < 12 and span[1] > 16 and case != "end-only") or (case == "end-only" and span[1] >= 150):
            assert {f.kind for f in want[0]} & {"Overdraft", "ACLViolation"}, want[0]


def test_planted_kinds(tmp_path):
    """The planted cases together have every kind, and the archive gives them all from Parquet."""
    leases = sorted((x for case in PLANTED.values() for x in case), key=_key)
    fleet = snapshot(*NODES, BUDGET, run("r"), *leases)
    want, got = both(fleet, {_key(x) for x in leases if not x.status.closed}, at(hours=-2000), at(hours=2000), tmp_path,
                     at_=at(hours=150))
    assert got == want
    assert {f.kind for f in want[0]} == {"DoubleBooked", "UnknownNode", "MalformedSlot", "SlotOutOfRange", "UnknownRun",
                                         "UnknownEnvelope", "ACLViolation", "Overdraft"}


def test_no_nodes_note(tmp_path):
    leases = sorted(PLANTED["chain"], key=_key)
    fleet = snapshot(BUDGET, run("r"), *leases)
    want, got = both(fleet, set(), at(hours=0), at(hours=100), tmp_path, at_=at(hours=150))
    assert got == want
    assert want[2] == ["the snapshot has no Nodes: slots were not checked against nodes (UnknownNode, SlotOutOfRange)"]
    # a window with no lease: no note
    assert both(fleet, set(), at(hours=500), at(hours=600), tmp_path, at_=at(hours=700)) == (([], 1, []), ([], 1, []))


def test_an_unbound_namespace_with_no_lease_in_the_window(tmp_path):
    fleet = snapshot(*NODES, BUDGET, budget("c", "team", owner="org:team:twin"), run("r"),
                     *sorted(PLANTED["chain"], key=_key))
    want, got = both(fleet, set(), at(hours=500), at(hours=600), tmp_path, at_=at(hours=700))
    assert got == want
    assert [f.kind for f in want[0]] == ["UnboundNamespace"]


# --- hash collisions, rows read again by start or by a whole scan ---------------------------------------------


@pytest.mark.parametrize("list_hash", ["hash(slots)", "hash(len(slots))"])
@pytest.mark.parametrize(("by_start", "sample"), [(0, 0), (3, 5), (5_000, 100_000), (5_000, 0)])
def test_colliding_list_hashes_and_reading_by_start(tmp_path, monkeypatch, list_hash, by_start, sample):
    """The findings do not depend on the slot lists' hashes being distinct (``hash(len(slots))`` makes every list
    of one length collide: those lists are swept per slot), on how many lists are known before the scan of every
    list (those of the first ``sample`` rows; the others are read again), nor on how rows are read again: at
    their starts (up to ``_FETCH_BY_START`` of them) or by a whole scan."""
    monkeypatch.setattr(findings_module, "_LIST_HASH", list_hash)
    monkeypatch.setattr(findings_module, "_FETCH_BY_START", by_start)
    monkeypatch.setattr(findings_module, "_SAMPLE", sample)
    planted = sorted((x for case in PLANTED.values() for x in case), key=_key)
    cases = [(snapshot(*NODES, BUDGET, run("r"), *planted), planted, at(hours=-2000), at(hours=2000), at(hours=150)),
             (snapshot(*NODES, BUDGET, run("r"), *planted), planted, at(hours=15), at(hours=35), at(hours=150)),
             (FLEET, LEASES, *WINDOWS["whole"], AT), (FLEET, LEASES, *WINDOWS["across"], AT)]
    for fleet, leases, since, until, at_ in cases:
        for live in ({_key(x) for x in leases if not x.status.closed}, closed_before(leases, since + (until - since) / 2)):
            want, got = both(fleet, live, since, until, tmp_path, at_=at_)
            assert got == want
    if list_hash != "hash(slots)" or sample < 10:  # the collisions happened; the lists read again are all there
        store.archive(tmp_path / "a", [x for x in planted if x.status.closed], archived_at=at(hours=150))
        con = db.connect()
        relation.define(con, [reader.open_archive(tmp_path / "a")], [], at(hours=-2000), at(hours=150))
        lists = findings_module._spans(con, relation.VIEW, [])
        if list_hash != "hash(slots)":
            assert len({h for _held, h in lists.rows}) < len(lists.rows)
        assert len(lists.rows) == len({held for held, _h in lists.rows})
        if list_hash != "hash(slots)":
            assert lists.shared == {h for _held, h in lists.rows}
        assert sorted(lists.rows) == sorted((tuple(held), h) for held, h in con.execute(
            f"SELECT slots, {list_hash} FROM {relation.VIEW} GROUP BY slots").fetchall())


# --- random fleets --------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=perf.fleets(), share=st.integers(0, 3), data=st.data())
def test_random_fleets(tmp_path, case, share, data):
    """perf.fleets: every kind on three nodes, half of them pile-ups; the closed leases archived (some of them,
    all, or none)."""
    fleet, since, until, _by, namespace = case
    leases = [with_uid(x, f"uid-{x.metadata.name}") for x in fleet.leases]
    fleet = Snapshot(nodes=fleet.nodes, budgets=fleet.budgets, runs=fleet.runs, leases=tuple(leases))
    closed = [x for x in leases if x.status.closed]
    archived = {_key(x) for x in closed if share == 3 or (share and data.draw(st.booleans()))}
    live = {_key(x) for x in leases} - archived
    want, got = both(fleet, live, since, until, tmp_path, at_=perf.AT, namespace=namespace)
    assert got == want


# --- the documented query ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [*sorted(PLANTED), "history"])
def test_the_documented_double_booked_query(tmp_path, case):
    """docs/archive.md's DoubleBooked SQL (as bench/bench_archive.py runs it) gives, per slot, the engine's
    episodes: the same intervals and the same number of leases."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ is the repository's, not installed
    from bench.bench_archive import double_booked_sql
    from kubectl_runs.engine.audit_slots import _episodes
    from kubectl_runs.engine.audit_window import clip
    from kubectl_runs.timeutil import EARLIEST, LATEST

    leases = [x for x in (LEASES if case == "history" else PLANTED[case]) if x.status.closed]
    store.archive(tmp_path / "a", leases, archived_at=AT)
    arch = reader.open_archive(tmp_path / "a")
    paths = ", ".join(db.quote(arch.directory / p.file) for p in arch.manifest.partitions)
    con = db.connect()
    query = double_booked_sql(f"read_parquet([{paths}])")
    got = sorted((slot, lo / 1e6, hi / 1e6, n) for slot, lo, hi, n in con.execute(
        f'SELECT slot, epoch_us("from"), epoch_us("to"), leases FROM ({query})').fetchall())
    win = clip(leases, EARLIEST, LATEST)
    want = []
    for slot in {s for x in leases for s in x.spec.slice.slots}:
        idx = sorted((i for i, x in enumerate(win.leases) if slot in win.slots[i]), key=win.starts.__getitem__)
        for lo, hi, involved in _episodes(idx, [win.starts[i] for i in idx], [win.ends[i] for i in idx]):
            want.append((slot, lo, hi, len(involved)))
    assert got == sorted(want)
    assert want or case == "unknown"


# --- through the command ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("namespace", [None, "team"])
def test_the_command_prints_the_json_paths_findings(capsys, tmp_path, namespace):
    """``leases audit --archive -o json`` on every planted case and ledger bound (the closed leases archived, the
    open ones live) prints exactly what ``leases audit`` prints on one snapshot holding every lease."""
    from builders import run_cli, write_fleet

    # (not "duplicate-slot": a snapshot refuses a slot given twice, as the API server does since #28)
    leases = sorted([*(x for name, case in PLANTED.items() if name != "duplicate-slot" for x in case),
                     *(x for _b, ls in LEDGER.values() for x in ls)], key=_key)
    others = [*NODES, BUDGET, *(b for budgets, _ls in LEDGER.values() for b in budgets), run("r")]
    everything = write_fleet(tmp_path / "all.yaml", [*others, *leases])
    live = write_fleet(tmp_path / "live.yaml", [*others, *(x for x in leases if not x.status.closed)])
    store.archive(tmp_path / "archive", [x for x in leases if x.status.closed], archived_at=at(hours=150))
    args = ["leases", "audit", "--at", at(hours=150).isoformat(), "--since", at(hours=-2000).isoformat(), "-o", "json",
            "--strict", *(["-n", namespace] if namespace else [])]
    want = run_cli(capsys, *args, "--snapshot", everything)
    got = run_cli(capsys, *args, "--snapshot", live, "--archive", str(tmp_path / "archive"))
    assert got == want
    assert want[0] == 3
    kinds = {f["kind"] for f in __import__("json").loads(want[1])["findings"]}
    assert kinds >= ({"DoubleBooked", "UnknownRun", "ACLViolation", "Overdraft"} if namespace else
                     {"DoubleBooked", "UnknownNode", "UnknownRun", "UnknownEnvelope", "ACLViolation", "Overdraft"})
