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
