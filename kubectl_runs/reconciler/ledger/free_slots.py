"""What minting may place on, per flavor and domain scope, kept for the whole pass: the candidate nodes with a
free ordinal, their free ordinals, the same nodes by domain, and the free slots of each domain.

A node is in it when the Evaluation counts a free GPU on it (``Evaluation.open_nodes``: schedulable, of the
flavor, not every valid slot held by an open lease) and no lease not closed at the instant holds one of its
ordinals (``PassState.free_ordinals``). Both change only on the nodes whose slots a lease written by the pass
holds: those are marked ``moved`` as the pass emits (``PassState._count``) and looked at again when the
structure is next asked for, instead of every candidate node per Run minted (``Minting`` reads it, and
changes copies only: a Run whose groups do not place or fund leaves it as it was).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...engine.packing import NO_DOMAIN
from ...model import Node

if TYPE_CHECKING:
    from .pass_state import PassState


@dataclass
class FreeSlots:
    """The nodes minting may take slots from, in ``scope`` (any domain when None) of ``flavor``."""

    flavor: str
    scope: str | None
    nodes: list[Node] = field(default_factory=list)  # in the Evaluation's order of open nodes
    free: dict[str, tuple[int, ...]] = field(default_factory=dict)  # node -> its free ordinals, ascending
    by_domain: dict[str, list[Node]] = field(default_factory=dict)  # ``nodes`` by domain (NO_DOMAIN for none)
    domain_free: dict[str, int] = field(default_factory=dict)  # free ordinals by domain (of ``by_domain``'s)
    moved: set[str] = field(default_factory=set)  # nodes whose slots a lease took or gave back since

    @classmethod
    def of(cls, owner: PassState, flavor: str, scope: str | None) -> FreeSlots:
        """Made from every candidate node (the Evaluation's open nodes of ``flavor`` in ``scope``)."""
        made = cls(flavor, scope)
        for node in owner.evaluation().open_nodes(flavor).values():
            if scope is not None and node.domain != scope:
                continue
            made.add(node, owner.free_ordinals(node))
        return made

    def add(self, node: Node, ordinals: tuple[int, ...]) -> None:
        """``node`` last, with its free ``ordinals`` (none: left out)."""
        if ordinals:
            self.free[node.name] = ordinals
            self.nodes.append(node)
            domain = node.domain or NO_DOMAIN
            self.by_domain.setdefault(domain, []).append(node)
            self.domain_free[domain] = self.domain_free.get(domain, 0) + len(ordinals)

    def catch_up(self, owner: PassState) -> bool:
        """Look at the ``moved`` nodes again; False when one came back among the candidates (its place in their
        order is the Evaluation's: the caller makes the structure again)."""
        open_nodes = owner.evaluation().open_nodes(self.flavor)
        by_name = owner.snap.nodes_by_name
        for name in self.moved:
            node = by_name.get(name)
            was = self.free.get(name)
            candidate = node is not None and name in open_nodes and (self.scope is None or node.domain == self.scope)
            now = owner.free_ordinals(node) if candidate else ()
            if was is None:
                if now:
                    return False
                continue
            domain = node.domain or NO_DOMAIN
            self.domain_free[domain] += len(now) - len(was)
            if now:
                self.free[name] = now
                continue
            del self.free[name]
            self.nodes.remove(node)
            in_domain = self.by_domain[domain]
            in_domain.remove(node)
            if not in_domain:
                del self.by_domain[domain], self.domain_free[domain]
        self.moved.clear()
        return True
