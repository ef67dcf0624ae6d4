"""The archive writer's hand-off to DuckDB (kubectl_runs/archive/staging.py): the leases' own JSON lines, read
into rows by SQL, give exactly the rows ``schema.row_of`` makes — for every shape of lease, including the
fields msgspec leaves out because they hold their defaults — and each key once, the first given."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest
from builders import T0, lease, preempted

from kubectl_runs.archive import db, schema, staging, store
from kubectl_runs.model import GPULease, GPULeaseStatus, LeasePreemption, ObjectMeta

# the staged rows: a lease's own columns (the cluster is added when the month file is written: schema version 2)
_SELECT = ", ".join(f"epoch_us({name})" if name in ("start", "ended") else name for name in schema.LEASE_COLUMN_NAMES)


def _default_namespace(x: GPULease) -> GPULease:
    return msgspec.structs.replace(x, metadata=ObjectMeta(name=x.metadata.name))  # "default", left out of the JSON


def _empty_preemption(x: GPULease) -> GPULease:
    status = GPULeaseStatus(closed=True, ended=T0 + timedelta(hours=1), preemption=LeasePreemption())  # {}
    return msgspec.structs.replace(x, status=status)


CASES = [
    lease("a", ended=T0 + timedelta(hours=3), closure_reason="Completed"),
    lease("b", paid_by=None, gpus=4, node_name="n9", ended=T0 + timedelta(hours=1)),
    lease("c", paid_by=("lender", "b", "east"), ended=T0 + timedelta(minutes=5)),
    lease("d", role="Spare", reason="Swap", group=3, ended=T0 + timedelta(days=40)),
    lease("e", closed=True),
    preempted(lease("f", gpus=8, node_name="n1"), ended=T0 + timedelta(hours=2), reservation="team/r1",
              seed="0x00ff00ff00ff00ff"),
    preempted(lease("g"), ended=T0 + timedelta(hours=2), closure_reason="ReclaimUnfunded", reservation="team/r1"),
    lease("h", start=T0 + timedelta(microseconds=7), ended=T0 + timedelta(seconds=1, microseconds=999999)),
    lease("i", start=datetime(2025, 11, 1, 0, 30, tzinfo=timezone(timedelta(hours=2))),
          ended=datetime(2025, 11, 1, 3, 0, tzinfo=UTC)),
    lease("j", owner='org:"quoted", \\ back\nslash é', flavor="a,b", slot_list=["n#0", 'odd "slot"'],
          ended=T0 + timedelta(hours=1)),
    lease("k", paid_by=("", "b", "west"), ended=T0 + timedelta(hours=1)),
    _default_namespace(lease("l", ended=T0 + timedelta(hours=1))),
    _empty_preemption(lease("m")),
    lease("n", start=datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), ended=T0),
]


def _staged(tmp_path, leases: list[GPULease]) -> tuple[list[tuple], list, int]:
    con = db.connect()
    months, total = store._stage(con, tmp_path / "staging", leases)
    rows = con.execute(f"SELECT {_SELECT}, month FROM staged ORDER BY name").fetchall()
    con.close()
    return rows, months, total


def test_every_column_is_what_row_of_makes(tmp_path):
    rows, months, total = _staged(tmp_path, CASES)
    assert total == len(CASES) == len(rows)
    expected = sorted((schema.row_of(x) for x in CASES), key=lambda r: r.name)
    for got, want in zip(rows, expected, strict=True):
        want_values = tuple(msgspec.structs.astuple(want))[:-1]  # all but the cluster
        assert (*got[:8], tuple(got[8]), *got[9:-1]) == want_values, want.name
        assert got[-1] == schema.month_of(want.start)
    assert months == sorted(Counter(schema.month_of(r.start) for r in expected).items())


def test_a_key_given_twice_is_staged_once_the_first_given(tmp_path):
    first = lease("a", ended=T0 + timedelta(hours=3), closure_reason="Completed")
    second = lease("a", ended=T0 + timedelta(hours=5), closure_reason="Shrink")
    other = lease("b", ended=T0 + timedelta(hours=1))
    rows, _months, total = _staged(tmp_path, [first, other, second])
    assert total == 2
    assert [(r[1], r[19]) for r in rows] == [("a", "Completed"), ("b", None)]


def test_the_staging_columns_are_the_schemas():
    assert set(staging.ROW_SQL) == set(schema.LEASE_COLUMN_NAMES) == set(schema.COLUMN_NAMES) - {"cluster"}


@pytest.mark.parametrize("before, later", [(T0 + timedelta(hours=2), 3), (T0 + timedelta(hours=4), 1)])
def test_before_is_applied_to_the_end_or_the_start(tmp_path, before, later):
    leases = [lease("a", ended=T0 + timedelta(hours=1)), lease("b", ended=T0 + timedelta(hours=3)),
              lease("c", start=T0 + timedelta(hours=3), closed=True), lease("d", ended=T0 + timedelta(hours=9))]
    result = store.archive(tmp_path / "a", leases, archived_at=T0 + timedelta(days=1), before=before)
    assert (result.added, result.later) == (len(leases) - later, later)
