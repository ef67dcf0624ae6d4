"""Slots ``node#ordinal`` (one GPU each, API.md §1 GPULease): how a slot is read, and what can be wrong with one.

A slot names a GPU of a node when it is a node name, ``#`` and an ordinal written as the API writes it (ASCII
digits, no leading zero: ``gpu-a-01#3``), and the node is in the snapshot with more GPUs than the ordinal.
Otherwise it is one of three findings (docs/arithmetic.md, Findings):

* ``MalformedSlot`` — not ``node#ordinal`` at all (``gpu-a-01``, ``#3``, ``n#x``, ``n#03``, ``n#³``): no GPU can be
  told from it, whatever the nodes;
* ``UnknownNode`` — ``node#ordinal`` on a node the snapshot does not have;
* ``SlotOutOfRange`` — ``node#k`` on a node that has ``k`` GPUs or fewer (ordinals run from 0 to GPUs − 1).

Budgets still count such a slot as one GPU (the lease's GPUs are its slots: the envelope paid for it), but no
node's capacity does (``packing.used_slots``): it names no GPU there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import findings as fk
from .findings import Finding

MALFORMED, UNKNOWN_NODE, OUT_OF_RANGE = fk.MALFORMED_SLOT, fk.UNKNOWN_NODE, fk.SLOT_OUT_OF_RANGE
SLOT_KINDS = (UNKNOWN_NODE, MALFORMED, OUT_OF_RANGE)


def split_slot(slot: str) -> tuple[str, int | None]:
    """``gpu-a-01#3`` -> (``gpu-a-01``, 3); a slot without a valid ``#ordinal`` (ASCII digits) -> (slot, None)."""
    node, sep, ordinal = slot.rpartition("#")
    if not sep or not (ordinal.isascii() and ordinal.isdigit()):
        return slot, None
    return node, int(ordinal)


def gpu_of(slot: str) -> tuple[str, int] | None:
    """(node, ordinal) of a well-formed slot (a node name, ``#``, ASCII digits without a leading zero), else None."""
    node, sep, ordinal = slot.rpartition("#")
    if not sep or not node or not (ordinal.isascii() and ordinal.isdigit()) or (ordinal[0] == "0" and len(ordinal) > 1):
        return None
    return node, int(ordinal)


def slot_fault(slot: str, nodes: Mapping[str, Any]) -> str | None:
    """The finding kind of a slot that names no GPU (module docstring), None for a good one. Without nodes
    (``nodes`` empty: a snapshot of leases alone) only ``MalformedSlot`` can be told."""
    gpu = gpu_of(slot)
    if gpu is None:
        return MALFORMED
    if not nodes:
        return None
    known = nodes.get(gpu[0])
    if known is None:
        return UNKNOWN_NODE
    return OUT_OF_RANGE if gpu[1] >= known.gpus else None


def slot_faults(slots: Iterable[str], nodes: Mapping[str, Any]) -> dict[str, list[str]]:
    """A lease's faulty slots by kind (each slot once, in the lease's order); {} when every slot names a GPU."""
    out: dict[str, list[str]] = {}
    for slot in dict.fromkeys(slots):
        kind = slot_fault(slot, nodes)
        if kind is not None:
            out.setdefault(kind, []).append(slot)
    return out


def slot_findings(lease: Any, faults: Mapping[str, list[str]], nodes: Mapping[str, Any],
                  envelope: tuple[str, str, str] | None = None) -> list[Finding]:
    """One finding per kind of ``faults`` (``slot_faults`` of the lease's slots), said the same in every report."""
    out = []
    key, namespace = lease.key, lease.metadata.namespace
    for kind in SLOT_KINDS:
        slots = faults.get(kind)
        if not slots:
            continue
        if kind == UNKNOWN_NODE:
            gone = ", ".join(dict.fromkeys(split_slot(s)[0] for s in slots))
            detail = (f"holds slots on {gone} (not in the snapshot): fix the slot names, or restore the node if it "
                      "was removed while the lease was open")
        elif kind == MALFORMED:
            detail = (f"holds {_said(slots)}, not node#ordinal (a node, '#', an ordinal without leading zeros): "
                      f"no GPU can be told from {'it' if len(slots) == 1 else 'them'}; budgets count "
                      f"{'it' if len(slots) == 1 else 'them'}, node capacity does not; fix the slot names")
        else:
            by_node: dict[str, list[str]] = {}
            for slot in slots:
                by_node.setdefault(split_slot(slot)[0], []).append(slot)
            parts = []
            for node, held in by_node.items():
                gpus = nodes[node].gpus
                has = f"slots #0-#{gpus - 1}" if gpus else "no slots"
                parts.append(f"{_said(held)} (node {node} has {gpus} GPUs: {has})")
            detail = (f"holds {'; '.join(parts)}: an ordinal past the node's GPUs names no GPU; budgets count it, "
                      "node capacity does not; fix the slot names")
        out.append(Finding(kind, key, detail, envelope=envelope, namespace=namespace))
    return out


def _said(slots: list[str]) -> str:
    shown = [repr(s) if not s.isprintable() or not s else s for s in slots[:3]]
    more = f" and {len(slots) - 3} more" if len(slots) > 3 else ""
    return ("slot " if len(slots) == 1 else "slots ") + ", ".join(shown) + more


def leases_slot_findings(leases: Iterable[tuple[Any, tuple[str, str, str] | None]],
                         nodes: Mapping[str, Any]) -> list[Finding]:
    """The slot findings of these (lease, envelope charged) pairs: each distinct slot judged once."""
    pairs = list(leases)
    distinct: set[str] = set().union(*(lease.spec.slice.slots for lease, _envelope in pairs)) if pairs else set()
    bad = {slot: kind for slot in distinct if (kind := slot_fault(slot, nodes)) is not None}
    if not bad:
        return []
    out: list[Finding] = []
    for lease, envelope in pairs:
        held = lease.spec.slice.slots
        if bad.keys().isdisjoint(held):
            continue
        faults: dict[str, list[str]] = {}
        for slot in dict.fromkeys(held):
            kind = bad.get(slot)
            if kind is not None:
                faults.setdefault(kind, []).append(slot)
        out.extend(slot_findings(lease, faults, nodes, envelope=envelope))
    return out
