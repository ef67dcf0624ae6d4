"""``json_text.dumps`` writes what ``json.dumps(indent=2, ensure_ascii=False, default=…)`` writes, byte for byte:
on random JSON-shaped values (nested dicts, lists and tuples; strings with any character, control characters
and non-ASCII included; ints of any size, floats with NaN and the infinities, booleans, null; keys that are not
strings; values only ``default`` knows), and on the reports' own documents."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_runs.json_text import dumps
from kubectl_runs.render import _json_default


class Tagged(int):
    """An int subclass, as an IntEnum would be."""


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70).map(Tagged),
    st.floats(allow_nan=True, allow_infinity=True), st.text(), st.sampled_from(["", "\x1b[31m", "é…✓", "\u202e"]),
    st.datetimes(timezones=st.just(UTC)),  # written through default
)
keys = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.booleans(), st.none(), st.floats(-2, 2))


def values():
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5), st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=8), inner, max_size=5),
            st.dictionaries(keys, inner, max_size=3),
            st.frozensets(st.integers(0, 9), max_size=3),  # written through default, as a list
        ),
        max_leaves=40,
    )


def expected(value):
    return json.dumps(value, indent=2, ensure_ascii=False, default=_json_default)


@settings(max_examples=500, deadline=None)
@given(values())
def test_the_same_text_as_json_dumps(value):
    assert dumps(value, _json_default) == expected(value)


def test_a_report_with_rows_and_findings():
    start = datetime(2025, 11, 20, tzinfo=UTC)
    doc = {
        "since": start, "until": start + timedelta(days=30), "rows": [],
        "totals": {"gpuHours": 1.5e-07, "leases": 10**20, "share": float("nan")},
        "findings": [{"kind": "DoubleBooked", "lease": f"team/l{i}", "detail": f"holds slot n#{i} \"x\"\n\t"}
                     for i in range(50)],
        "nested": {"empty": {}, "list": [[], [{}], [1, [2, [3]]]], "tuple": (1, "a", None, True)},
    }
    assert dumps(doc, _json_default) == expected(doc)
    assert dumps([], _json_default) == "[]" and dumps({}, _json_default) == "{}"


records = st.lists(st.dictionaries(st.text(max_size=6), st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(), st.sampled_from(["\x1b[31m", "é…✓", "\u2028", "\ud800", "a\nb"])),
    max_size=4), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(records, st.integers(0, 3))
def test_lists_of_flat_records_the_same_as_json_dumps(rows, depth):
    """Lists of dicts of strings, ints, booleans and nulls (the findings: written by msgspec), at any depth, with
    ints past 64 bits and lone surrogates (msgspec refuses those: json's own path writes them)."""
    value = rows
    for level in range(depth):
        value = {"level": level, "rows": value} if level % 2 else [value, 1.5e-07]
    assert dumps(value, _json_default) == expected(value)
