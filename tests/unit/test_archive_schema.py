"""The lease archive's row (docs/archive.md): a closed GPULease -> Row -> the values a reader selects -> the same
GPULease, field for field, for every shape a lease takes (funded or not, paidBy with and without a namespace,
preempted, spare, closed without an end, instants with microseconds and non-UTC offsets)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest
from builders import T0, lease, preempted

from kubectl_runs.archive import schema
from kubectl_runs.model import GPULease


def reread(row: schema.Row) -> GPULease:
    """What a reader's ``LEASE_SELECT`` returns for this row, turned back into a lease."""
    values = tuple(getattr(row, name) for name in schema.COLUMN_NAMES if name not in ("gpus", "payer_namespace", "closed", "cluster"))
    return schema.lease_of(values)


CASES = {
    "funded": lease("a", ended=T0 + timedelta(hours=3), closure_reason="Completed"),
    "unfunded": lease("b", paid_by=None, gpus=4, node_name="n9", ended=T0 + timedelta(hours=1)),
    "paid-in-another-namespace": lease("c", paid_by=("lender", "b", "east"), ended=T0 + timedelta(minutes=5)),
    "spare": lease("d", role="Spare", reason="Swap", group=3, ended=T0 + timedelta(days=40)),
    "closed-without-end": lease("e", closed=True),
    "preempted": preempted(lease("f", gpus=8, node_name="n1"), ended=T0 + timedelta(hours=2),
                           reservation="team/r1", seed="0x00ff00ff00ff00ff"),
    "preempted-no-seed": preempted(lease("g"), ended=T0 + timedelta(hours=2), closure_reason="ReclaimUnfunded",
                                   reservation="team/r1"),
    "microseconds": lease("h", start=T0 + timedelta(microseconds=7), ended=T0 + timedelta(seconds=1, microseconds=999999)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_lease_survives_the_row(name):
    original = CASES[name]
    row = schema.row_of(original)
    assert tuple(msgspec.structs.asdict(row)) == schema.COLUMN_NAMES
    back = reread(row)
    assert back == original
    plain = msgspec.to_builtins(original)
    plain.pop("apiVersion", None)  # written when decoded from a manifest, omitted as the default otherwise
    assert msgspec.to_builtins(back) == plain


def test_other_offsets_are_the_same_instant():
    here = lease("x", start=datetime(2025, 11, 1, 2, 0, tzinfo=timezone(timedelta(hours=2))),
                 ended=datetime(2025, 11, 1, 3, 0, tzinfo=UTC))
    back = reread(schema.row_of(here))
    assert back.spec.start == here.spec.start and back.spec.start.timestamp() == here.spec.start.timestamp()
    assert schema.month_of(schema.row_of(here).start) == "2025-11"  # 00:00 UTC, the month of the UTC instant


def test_the_row_columns():
    row = schema.row_of(CASES["paid-in-another-namespace"])
    assert (row.payer_namespace, row.paid_by_namespace, row.gpus, row.closed) == ("lender", "lender", 1, True)
    row = schema.row_of(CASES["funded"])
    assert (row.payer_namespace, row.paid_by_namespace) == ("team", "")
    assert schema.micros(schema.instant(1_762_000_000_123_456)) == 1_762_000_000_123_456
    assert schema.month_of(schema.micros(datetime(2025, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))) == "2025-12"
    assert [c[0] for c in schema.COLUMNS] == list(schema.COLUMN_NAMES)


def test_micros_is_exact():
    import random

    rng = random.Random(16)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for _ in range(20_000):
        us = rng.randrange(0, 8 * 10**15)  # 1970 .. 2223
        assert schema.micros(schema.instant(us)) == us
        offset = schema.instant(us).astimezone(timezone(timedelta(hours=-7)))
        assert schema.micros(offset) == us == (offset - epoch) // timedelta(microseconds=1)
