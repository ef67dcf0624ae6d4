"""Owner paths (``org:ai:rai:sys``), their family relations, lending patterns, and namespace owners (API.md
§1 "owner of a namespace", §3 "Family")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..model import Snapshot


def segments(owner: str) -> tuple[str, ...]:
    return tuple(owner.split(":")) if owner else ()


def parent(owner: str) -> str | None:
    """The owner minus its last segment; a one-segment owner has no parent."""
    head, sep, _ = owner.rpartition(":")
    return head if sep else None


def is_ancestor(ancestor: str, owner: str) -> bool:
    """``ancestor``'s segments are a proper prefix of ``owner``'s."""
    return owner.startswith(ancestor + ":") and ancestor != ""


def is_family(a: str, b: str) -> bool:
    """One is an ancestor of the other, or they have the same parent (siblings)."""
    if a == b:
        return True
    if is_ancestor(a, b) or is_ancestor(b, a):
        return True
    pa = parent(a)
    return pa is not None and pa == parent(b)


def pattern_matches(pattern: str, owner: str) -> bool:
    """Lending patterns: an exact owner, ``*``, or ``prefix:*`` (every descendant of ``prefix``)."""
    if pattern == "*":
        return True
    if pattern.endswith(":*"):
        return is_ancestor(pattern[:-2], owner)
    return pattern == owner


def any_pattern_matches(patterns: Iterable[str], owner: str) -> bool:
    return any(pattern_matches(p, owner) for p in patterns)


def family_rank(owner: str, candidate: str) -> int | None:
    """Where ``candidate``'s envelopes stand in ``owner``'s funding order (API.md §3 Plan): own 0,
    parent and further ancestors 1.. (nearest first), siblings after them; None when not family."""
    if candidate == owner:
        return 0
    if is_ancestor(candidate, owner):
        return len(segments(owner)) - len(segments(candidate))
    if parent(candidate) is not None and parent(candidate) == parent(owner):
        return len(segments(owner)) + 1
    return None


@dataclass(frozen=True)
class NamespaceOwners:
    """The owner each namespace's Budgets name; namespaces whose Budgets disagree are unbound."""

    owners: dict[str, str]
    unbound: dict[str, tuple[str, ...]]

    def owner_of(self, namespace: str) -> str | None:
        return self.owners.get(namespace)


def namespace_owners(snapshot: Snapshot) -> NamespaceOwners:
    seen: dict[str, set[str]] = {}
    for budget in snapshot.budgets:
        seen.setdefault(budget.metadata.namespace, set()).add(budget.spec.owner)
    owners = {ns: next(iter(names)) for ns, names in seen.items() if len(names) == 1}
    unbound = {ns: tuple(sorted(names)) for ns, names in seen.items() if len(names) > 1}
    return NamespaceOwners(owners=owners, unbound=unbound)
