"""The audit window as a DuckDB view (archive/relation.py): on random histories split between an archive and
the live leases, the view ``audit_leases`` holds exactly the leases the engine's ``clip`` keeps from one list
holding every lease — each once, the live copy when a lease is both live and archived — with the window-clipped
instants in exact epoch microseconds; leases that never held a GPU, that end exactly at the window's start or
start exactly at its end are left out; open leases run to the window's end."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from archive_fleets import history
from builders import T0, lease
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_runs.archive import db, reader, relation, store
from kubectl_runs.archive.schema import COLUMN_NAMES, micros
from kubectl_runs.engine.audit_window import clip

AT = T0 + timedelta(days=31)


def archived(x, cut) -> bool:
    return x.status.closed and (x.status.ended or x.spec.start) < cut


def expected(leases, lo, hi) -> list[tuple]:
    """(namespace, name, uid, owner, held_from_us, held_until_us) of every lease the engine's window keeps."""
    win = clip(leases, lo, hi)
    out = []
    for x in win.leases:
        held_until = micros(hi) if not x.status.closed else min(micros(x.status.ended), micros(hi))
        out.append((x.metadata.namespace, x.metadata.name, x.metadata.uid, x.spec.owner,
                    max(micros(x.spec.start), micros(lo)), held_until))
    return sorted(out)


def view(con) -> list[tuple]:
    return sorted(con.execute(f"SELECT namespace, name, uid, owner, held_from_us, held_until_us "
                              f"FROM {relation.VIEW}").fetchall())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), count=st.integers(0, 120), cut_days=st.integers(-130, 40),
       lo_days=st.integers(-160, 40), span_days=st.integers(0, 200), still_live=st.booleans())
def test_the_view_is_the_engine_window(tmp_path_factory, seed, count, cut_days, lo_days, span_days, still_live):
    leases = history(seed, count, days=120)
    cut = T0 + timedelta(days=cut_days)
    directory = tmp_path_factory.mktemp("h")
    store.archive(directory, leases, archived_at=AT, before=cut)
    live = leases if still_live else [x for x in leases if not archived(x, cut)]
    lo = T0 + timedelta(days=lo_days)
    hi = lo + timedelta(days=span_days)
    con = db.connect()
    try:
        relation.define(con, [reader.open_archive(directory)], live, lo, hi)
        assert view(con) == (expected(leases, lo, hi) if lo < hi else [])
        counts = con.execute(f"SELECT count(*), count(DISTINCT (namespace, name, uid)), "
                             f"count(*) FILTER (WHERE held_from_us >= held_until_us) FROM {relation.VIEW}").fetchone()
        assert counts[0] == counts[1] and counts[2] == 0
    finally:
        con.close()


def exact(at) -> str:
    """An instant with its microseconds (the builders write whole seconds)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_edges_open_leases_and_the_live_copy(tmp_path):
    lo, hi = T0, T0 + timedelta(days=1)
    leases = [
        lease("ends-at-lo", start=lo - timedelta(hours=2), ended=lo),  # held [lo-2h, lo): not in the window
        lease("starts-at-hi", start=hi, ended=hi + timedelta(hours=1)),  # not in the window
        lease("ends-at-hi", start=hi - timedelta(hours=1), ended=hi),
        lease("starts-at-lo", start=lo, ended=exact(lo + timedelta(seconds=1, microseconds=7))),
        lease("across", start=lo - timedelta(days=3), ended=hi + timedelta(days=3), gpus=8),
        lease("never-held", start=lo + timedelta(hours=1), ended=lo + timedelta(hours=1)),
        lease("no-end", start=lo + timedelta(hours=1), closed=True),
        lease("micro", start=exact(lo + timedelta(microseconds=1)), ended=exact(lo + timedelta(microseconds=2))),
    ]
    leases = [msgspec.structs.replace(x, metadata=msgspec.structs.replace(x.metadata, uid=f"u-{x.metadata.name}"))
              for x in leases]
    store.archive(tmp_path / "a", leases, archived_at=AT)
    open_now = lease("open", start=lo - timedelta(days=1), gpus=2)
    open_late = lease("open-late", start=hi)  # starts when the window ends: not in it
    # the same key as an archived lease, read live with another owner: the live copy is the one in the view
    relabelled = msgspec.structs.replace(leases[2], spec=msgspec.structs.replace(leases[2].spec, owner="org:live"))
    live = [open_now, open_late, relabelled]
    con = db.connect()
    try:
        relation.define(con, [reader.open_archive(tmp_path / "a")], live, lo, hi)
        got = con.execute(f"SELECT name, owner, live, closed, held_from_us, held_until_us FROM {relation.VIEW} "
                          f"ORDER BY name").fetchall()
        lo_us, hi_us = micros(lo), micros(hi)
        assert got == [
            ("across", "org:team", False, True, lo_us, hi_us),
            ("ends-at-hi", "org:live", True, True, hi_us - 3_600_000_000, hi_us),
            ("micro", "org:team", False, True, lo_us + 1, lo_us + 2),
            ("open", "org:team", True, False, lo_us, hi_us),
            ("starts-at-lo", "org:team", False, True, lo_us, lo_us + 1_000_007),
        ]
        assert [name for name, *_ in got] == [x[1] for x in expected([*leases[:2], relabelled, *leases[3:],
                                                                          open_now, open_late], lo, hi)]
        # every column of the archive schema, then the window's
        names = [row[0] for row in con.execute(f"DESCRIBE {relation.VIEW}").fetchall()]
        assert names == [*COLUMN_NAMES, *relation.EXTRA_COLUMNS]
    finally:
        con.close()


@pytest.mark.parametrize("live_count", [0, 1, 3000])
def test_live_leases_registered_at_once(live_count):
    leases = history(7, live_count, days=30, open_share=0.5)
    con = db.connect()
    try:
        lo, hi = T0 - timedelta(days=40), AT
        relation.define(con, [], leases, lo, hi)
        assert con.execute(f"SELECT count(*) FROM {relation.LIVE_TABLE}").fetchone()[0] == live_count
        assert view(con) == expected(leases, lo, hi)
        if live_count:  # every field as written: the slots list, NULLs, timestamps
            first = leases[0]
            row = con.execute(f"SELECT slots, paid_by_budget, epoch_us(start), closed FROM {relation.LIVE_TABLE} "
                              f"WHERE name = ?", [first.metadata.name]).fetchone()
            assert row == (list(first.spec.slice.slots), first.spec.paid_by and first.spec.paid_by.budget,
                           micros(first.spec.start), first.status.closed)
    finally:
        con.close()


def test_two_archives_each_lease_once(tmp_path):
    leases = history(11, 300, days=120)
    store.archive(tmp_path / "new", leases, archived_at=AT, before=T0)
    store.archive(tmp_path / "old", leases, archived_at=AT, before=T0 - timedelta(days=60))
    con = db.connect()
    try:
        lo, hi = T0 - timedelta(days=200), T0
        archives = [reader.open_archive(tmp_path / "old"), reader.open_archive(tmp_path / "new")]
        relation.define(con, archives, [], lo, hi)
        assert view(con) == expected([x for x in leases if archived(x, T0)], lo, hi)
    finally:
        con.close()
