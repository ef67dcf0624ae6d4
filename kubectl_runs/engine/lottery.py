"""Preemption seeds: reproducible lotteries that anyone can check (API.md §4).

When a Reservation activates with a deficit that the gentler remedies did not cover, the GPUs are taken from
the *conflict set* (the open Active lease groups left in its scope) by a lottery whose every input is written
down: the seed is derived from the Reservation's name and activation time, each group's ticket from the seed
and the group's name, and victims are taken by class rank first (unfunded, borrowed, shared, owned) and
ticket second, a whole group at a time. Only SHA-256 is involved — no language's random generator — so a
shell with ``sha256sum`` can replay a draw.

engine/verify.py recomputes a recorded draw from these formulas (``seeds verify``, and the draws ``explain``
shows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime

import msgspec

from ..model import Action, Activation, ConflictEntry, Reservation
from ..timeutil import rfc3339
from .codes import class_rank

# Action kinds, in the order the resolver applies them (API.md §3 Remedies, §4).
RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, LOTTERY = "ReclaimUnfunded", "DropSpare", "Shrink", "Lottery"
ACTION_KINDS = (RECLAIM_UNFUNDED, DROP_SPARE, SHRINK, LOTTERY)

# The closureReason each action writes on the leases it closes; ReclaimUnfunded and the lottery also write
# status.preemption {reservation, seed}.
CLOSURE_REASON = {RECLAIM_UNFUNDED: "ReclaimUnfunded", DROP_SPARE: "DropSpare", SHRINK: "Shrink", LOTTERY: "RandomPreempt"}
PREEMPTING_KINDS = (RECLAIM_UNFUNDED, LOTTERY)

# status.activation.rule of round-3 decisions: the victims are the shortest prefix of the draw order after which
# the reserving Run starts (engine/resolver.py); a record without a rule took victims until their GPUs covered
# deficitGPUs.
PLACEMENT_RULE = "placement"


GroupKey = tuple[str, int]  # (run "namespace/name", group index)


# --- the formulas ---------------------------------------------------------------------------------------------


def derive_seed(reservation: str, at: datetime) -> str:
    """``"0x" + sha256(f"{ns}/{name}|{at}")[:16]``, ``at`` in RFC 3339 UTC seconds precision."""
    text = f"{reservation}|{rfc3339(at)}"
    return "0x" + hashlib.sha256(text.encode()).hexdigest()[:16]


def ticket(seed: str, run: str, group: int) -> str:
    """``sha256(f"{seed}|{run_ns}/{run_name}|{group}")`` as 64 hex digits; ``run`` is ``namespace/name``."""
    return hashlib.sha256(f"{seed}|{run}|{group}".encode()).hexdigest()


def with_tickets(seed: str, entries: Iterable[ConflictEntry]) -> list[ConflictEntry]:
    """The entries with the tickets ``seed`` gives them (any recorded ticket is ignored)."""
    return [msgspec.structs.replace(e, ticket=ticket(seed, e.run, e.group)) for e in entries]


def draw_order(seed: str, entries: Iterable[ConflictEntry]) -> list[ConflictEntry]:
    """The whole conflict set in the order the lottery takes it: class rank, then ticket (run and group only
    break a tie, which needs a SHA-256 collision). Tickets are recomputed from ``seed``."""
    return sorted(with_tickets(seed, entries), key=lambda e: (class_rank(e.class_), e.ticket, e.run, e.group))


def victims(seed: str, entries: Iterable[ConflictEntry], deficit_gpus: int) -> list[ConflictEntry]:
    """The groups the lottery takes, in order, until their GPUs cover ``deficit_gpus`` (or the set runs out).

    A pure function of (seed, conflict set, deficit): the order the entries come in does not matter.
    """
    taken: list[ConflictEntry] = []
    freed = 0
    for entry in draw_order(seed, entries):
        if freed >= deficit_gpus:
            break
        taken.append(entry)
        freed += entry.gpus
    return taken


# --- JSON shapes (API.md §4) ------------------------------------------------------------------------------------


def entry_json(entry: ConflictEntry) -> dict:
    return {
        "run": entry.run,
        "group": entry.group,
        "owner": entry.owner,
        "class": entry.class_,
        "gpus": entry.gpus,
        "ticket": entry.ticket,
    }


def action_json(action: Action) -> dict:
    return {"kind": action.kind, "run": action.run, "group": action.group, "lease": action.lease, "gpus": action.gpus}


def activation_json(activation: Activation) -> dict:
    """``status.activation`` as the Reservation records it."""
    return {
        "at": rfc3339(activation.at),
        "seed": activation.seed,
        "deficitGPUs": activation.deficit_gpus,
        "conflictSet": [entry_json(e) for e in activation.conflict_set],
        "actions": [action_json(a) for a in activation.actions],
        "freedGPUs": activation.freed_gpus,
        **({"rule": activation.rule} if activation.rule else {}),
        **({"protected": [msgspec.to_builtins(p) for p in activation.protected]} if activation.protected else {}),
        **({"passedOver": [msgspec.to_builtins(p) for p in activation.passed_over]} if activation.passed_over else {}),
        **({"decidedAt": rfc3339(activation.decided_at)} if activation.decided_at is not None else {}),
    }


def is_activated(reservation: Reservation) -> bool:
    """It has a recorded activation (state Activated, or Released/Failed later with the record kept)."""
    activation = reservation.status.activation
    return reservation.status.state == "Activated" or (
        activation is not None and (activation.at is not None or bool(activation.seed))
    )
