"""Owner paths, family, lending patterns and namespace owners (API.md §1 "owner of a namespace", §3 Family)."""

from __future__ import annotations

import pytest
from builders import budget, envelope, snapshot

from kubectl_runs.engine.owners import (
    any_pattern_matches,
    family_rank,
    is_ancestor,
    is_family,
    namespace_owners,
    parent,
    pattern_matches,
    segments,
)


def test_segments_and_parent():
    assert segments("org:ai:rai:sys") == ("org", "ai", "rai", "sys")
    assert segments("") == ()
    assert parent("org:ai:rai:sys") == "org:ai:rai"
    assert parent("org") is None


@pytest.mark.parametrize(
    ("ancestor", "owner", "expected"),
    [
        ("org:ai", "org:ai:rai:sys", True),
        ("org", "org:ai", True),
        ("org:ai", "org:ai", False),  # proper prefix only
        ("org:ai:rai:sys", "org:ai", False),  # the other way round
        ("org:a", "org:ai", False),  # segments, not characters
        ("org:ai:mm", "org:ai:rai:sys", False),
        ("", "org", False),
    ],
    ids=["grandparent", "parent", "self", "descendant", "char-prefix", "cousin-branch", "empty"],
)
def test_is_ancestor(ancestor, owner, expected):
    assert is_ancestor(ancestor, owner) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("org:ai:rai:sys", "org:ai:rai:sys", True),
        ("org:ai:rai", "org:ai:rai:sys", True),
        ("org:ai:rai:sys", "org:ai", True),
        ("org:ai:rai:sys", "org:ai:rai:eval", True),
        ("org:ai:rai:sys", "org:ai:mm:vision", False),  # cousins: parents org:ai:rai and org:ai:mm differ
        ("org:ai:rai:sys", "org:ext:partner", False),
        ("org:ai:rai", "org:ai:rai:sys:x", True),  # grandchild
        ("alpha", "beta", False),  # two roots have no parent, so are not siblings
        ("org:ai:rai:sys", "org:ai:rais", False),  # different branch despite a shared character prefix
    ],
    ids=["same", "parent", "grand-ancestor", "siblings", "cousins", "unrelated", "grandchild", "roots",
         "char-prefix"],
)
def test_is_family(a, b, expected):
    assert is_family(a, b) is expected
    assert is_family(b, a) is expected  # symmetric


@pytest.mark.parametrize(
    ("pattern", "owner", "expected"),
    [
        ("org:ext:partner", "org:ext:partner", True),
        ("org:ext:partner", "org:ext:partner:sub", False),  # exact means exact
        ("*", "anyone:at:all", True),
        ("org:ai:*", "org:ai:rai:sys", True),
        ("org:ai:*", "org:ai:mm", True),
        ("org:ai:*", "org:ai", False),  # descendants of org:ai, not org:ai itself
        ("org:ai:*", "org:aim:x", False),
        ("org:ai:*", "org:ext:partner", False),
    ],
    ids=["exact", "exact-not-descendant", "star", "prefix-deep", "prefix-child", "prefix-not-self",
         "prefix-char-boundary", "prefix-other"],
)
def test_lending_patterns(pattern, owner, expected):
    assert pattern_matches(pattern, owner) is expected


def test_any_pattern_matches():
    assert any_pattern_matches(["org:x", "org:ai:*"], "org:ai:rai")
    assert not any_pattern_matches([], "org:ai:rai")


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        ("org:ai:rai:sys", 0),
        ("org:ai:rai", 1),
        ("org:ai", 2),
        ("org", 3),
        ("org:ai:rai:eval", 5),  # siblings after every ancestor (4 segments + 1)
        ("org:ai:mm:vision", None),
        ("org:ai:rai:sys:child", None),  # descendants are family but not a funding source of the parent
    ],
    ids=["own", "parent", "grandparent", "root", "sibling", "cousin", "child"],
)
def test_family_rank_orders_own_then_ancestors_then_siblings(candidate, expected):
    assert family_rank("org:ai:rai:sys", candidate) == expected


def test_namespace_owner_is_the_owner_its_budgets_name():
    snap = snapshot(
        budget("a", "rai-sys", owner="org:ai:rai:sys"),
        budget("b", "rai-sys", owner="org:ai:rai:sys", envelopes=[envelope("other")]),
        budget("c", "lab", owner="org:lab:a"),
        budget("d", "lab", owner="org:lab:b"),
    )
    owners = namespace_owners(snap)
    assert owners.owner_of("rai-sys") == "org:ai:rai:sys"
    assert owners.owner_of("lab") is None
    assert owners.owner_of("nowhere") is None
    assert owners.unbound == {"lab": ("org:lab:a", "org:lab:b")}
