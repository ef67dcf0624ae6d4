"""``sort_findings``: the order every report prints its findings in — by kind as ``KINDS`` lists them (unknown
kinds last), then lease (none first), then detail — with equal findings (same kind, lease and detail) once, the
first of them kept. Checked against that definition written plainly, on random findings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_runs.engine.findings import KINDS, Finding, sort_findings

findings = st.lists(st.builds(
    Finding,
    st.sampled_from([*KINDS, "SomethingElse"]),
    st.sampled_from([None, "a/x", "a/y", "b/x"]),
    st.sampled_from(["d1", "d2", "é"]),
    envelope=st.sampled_from([None, ("a", "b", "e")]),
    namespace=st.sampled_from([None, "a", "b"]),
), max_size=30)


def plainly(found: list[Finding]) -> list[Finding]:
    rank = {kind: i for i, kind in enumerate(KINDS)}
    firsts: list[Finding] = []
    for finding in found:
        if finding not in firsts:
            firsts.append(finding)
    return sorted(firsts, key=lambda f: (rank.get(f.kind, len(KINDS)), f.lease or "", f.detail))


@settings(max_examples=300, deadline=None)
@given(findings)
def test_sorted_by_kind_lease_and_detail_each_once(found):
    got = sort_findings(found)
    want = plainly(found)
    assert got == want
    assert all(g is w for g, w in zip(got, want, strict=True))  # the first of equal findings, not a copy


def test_a_finding_is_a_frozen_value_of_its_kind_lease_and_detail():
    """``Finding`` sets its fields itself (for speed): it stays what the dataclass declares — every field set,
    frozen, equal and hashed by (kind, lease, detail) only, ordered by them, printed with every field."""
    import dataclasses

    import pytest

    a = Finding("DoubleBooked", "a/x", "d", envelope=("a", "b", "e"), namespace="a")
    b = Finding("DoubleBooked", "a/x", "d")
    assert (a.kind, a.lease, a.detail, a.envelope, a.namespace) == ("DoubleBooked", "a/x", "d", ("a", "b", "e"), "a")
    assert (b.envelope, b.namespace) == (None, None)
    assert a == b and hash(a) == hash(b) and a != Finding("DoubleBooked", "a/x", "e")
    assert b < Finding("DoubleBooked", "a/y", "a") and sorted([Finding("b", None, "x"), b])[0] is b
    assert repr(b) == "Finding(kind='DoubleBooked', lease='a/x', detail='d', envelope=None, namespace=None)"
    assert dataclasses.replace(a, detail="z") == Finding("DoubleBooked", "a/x", "z")
    assert dataclasses.asdict(b) == {"kind": "DoubleBooked", "lease": "a/x", "detail": "d", "envelope": None,
                                     "namespace": None}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.detail = "changed"  # type: ignore[misc]
