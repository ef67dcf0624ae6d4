"""An independent check of a generated fleet: every problem ``leases audit`` could report, looked for at every
instant of the history (not only at the snapshot time), with the arithmetic of API.md written out here rather
than borrowed from the engine.

    python -m bench.check bench/out/large.json

Prints one line per finding (kind, lease, detail) and exits 1 when it finds anything that the generator did
not plant (the planted findings are read from ``<path>.meta.json``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from datetime import UTC, datetime

from kubectl_runs.model import GPULease, Snapshot
from kubectl_runs.sources.files import load_snapshot

FOREVER = datetime.max.replace(tzinfo=UTC)


def _parent(owner: str) -> str | None:
    head, sep, _ = owner.rpartition(":")
    return head if sep else None


def _ancestor(a: str, b: str) -> bool:
    return a != "" and b.startswith(a + ":")


def _family(a: str, b: str) -> bool:
    if a == b or _ancestor(a, b) or _ancestor(b, a):
        return True
    return _parent(a) is not None and _parent(a) == _parent(b)


def _matches(pattern: str, owner: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(":*"):
        return _ancestor(pattern[:-2], owner)
    return pattern == owner


def _end(lease: GPULease):
    if lease.status.closed:
        return lease.status.ended or lease.spec.start
    return FOREVER


def check(snapshot: Snapshot) -> list[tuple[str, ...]]:
    """(kind, lease or namespace, detail) for every problem found at any instant; a DoubleBooked finding
    also names the other lease."""
    found: list[tuple[str, str, str]] = []
    nodes = snapshot.nodes_by_name
    runs = snapshot.runs_by_key
    envelopes = snapshot.envelopes_by_key
    owners: dict[str, set[str]] = defaultdict(set)
    for budget in snapshot.budgets:
        owners[budget.metadata.namespace].add(budget.spec.owner)
    for namespace, names in sorted(owners.items()):
        if len(names) > 1:
            found.append(("UnboundNamespace", namespace, ", ".join(sorted(names))))

    by_node: dict[str, list[tuple]] = defaultdict(list)
    charged: dict[tuple[str, str, str], list[GPULease]] = defaultdict(list)
    for lease in snapshot.leases:
        spec = lease.spec
        if lease.run_key not in runs:
            found.append(("UnknownRun", lease.key, f"run {lease.run_key} does not exist"))
        per_node: dict[str, set[int]] = defaultdict(set)
        for slot in spec.slice.slots:
            node, _, ordinal = slot.partition("#")
            per_node[node].add(int(ordinal))
        for node, ordinals in per_node.items():
            known = nodes.get(node)
            if known is None:
                found.append(("UnknownNode", lease.key, f"node {node} does not exist"))
            elif max(ordinals) >= known.gpus:
                found.append(("UnknownNode", lease.key, f"{node} has {known.gpus} GPUs"))
            by_node[node].append((spec.start, _end(lease), ordinals, lease.key))
        payer = lease.payer
        if payer is None:
            continue
        if payer not in envelopes:
            found.append(("UnknownEnvelope", lease.key, f"envelope {'/'.join(payer)} does not exist"))
            continue
        charged[payer].append(lease)

    for node, spans in by_node.items():  # one slot in two leases open at once, at any instant
        spans.sort(key=lambda s: (s[0], s[3]))
        active: list[tuple] = []
        for span in spans:
            active = [a for a in active if a[1] > span[0]]
            for other in active:
                if other[2] & span[2]:
                    found.append(("DoubleBooked", span[3], f"{node} slots {sorted(other[2] & span[2])} also in "
                                                           f"{other[3]}", other[3]))
            active.append(span)

    now = snapshot.taken_at or FOREVER  # the history ends at the snapshot time
    budgets = {(b.metadata.namespace, b.metadata.name): b for b in snapshot.budgets}
    for key, leases in charged.items():
        budget, envelope = envelopes[key]
        owner = budget.spec.owner
        lending = envelope.lending
        funded: list[GPULease] = []
        borrowed: list[GPULease] = []
        for lease in leases:
            if lease.spec.start < envelope.start or min(_end(lease), now) > envelope.end:
                found.append(("Overdraft", lease.key, f"open outside the window of {'/'.join(key)}"))
                continue
            if lease.spec.run_ref.namespace in owners and len(owners[lease.spec.run_ref.namespace]) > 1:
                continue
            if not _family(lease.spec.owner, owner):
                if lending is None or not lending.allow or not any(_matches(p, lease.spec.owner) for p in lending.to):
                    found.append(("ACLViolation", lease.key, f"{lease.spec.owner} may not spend {'/'.join(key)}"))
                    continue
                borrowed.append(lease)
            funded.append(lease)
        for lease in _over(funded, envelope.concurrency):
            found.append(("Overdraft", lease.key, f"{'/'.join(key)} funds {envelope.concurrency} GPUs at once"))
        if lending is not None and lending.max_concurrency is not None:
            for lease in _over(borrowed, lending.max_concurrency):
                found.append(("Overdraft", lease.key, f"{'/'.join(key)} lends {lending.max_concurrency} at once"))
        charged[key] = funded
    for (namespace, name), budget in budgets.items():
        for cap in budget.spec.aggregate_caps:
            members = [lease for e in cap.envelopes for lease in charged.get((namespace, name, e), ())]
            for lease in _over(members, cap.max_concurrency):
                found.append(("Overdraft", lease.key, f"aggregate cap {namespace}/{name} {cap.name}"))
    return sorted(set(found))


def _over(leases: list[GPULease], limit: int) -> list[GPULease]:
    """The leases that start while the GPUs held would exceed ``limit`` (ends before starts at one instant)."""
    events = []
    for lease in leases:
        events.append((lease.spec.start, 1, lease.metadata.namespace, lease.metadata.name, lease))
        events.append((_end(lease), 0, lease.metadata.namespace, lease.metadata.name, lease))
    events.sort(key=lambda e: e[:4])
    level = 0
    over = []
    for _, starts, _, _, lease in events:
        if starts:
            level += lease.gpus
            if level > limit:
                over.append(lease)
        else:
            level -= lease.gpus
    return over


def unplanted(path: str) -> tuple[list[tuple[str, ...]], list[dict]]:
    """(findings the generator did not plant, planted findings that were not found) for a generated file."""
    with open(f"{path}.meta.json") as handle:
        planted = json.load(handle)["planted"]
    expected = {(p["kind"], p["lease"] or p["namespace"], p.get("also", "")) for p in planted}
    expected |= {(kind, also, lease) for kind, lease, also in expected if also}  # a collision has two sides
    found = check(load_snapshot([path]))
    extra = [f for f in found if (f[0], f[1], f[3] if len(f) > 3 else "") not in expected]
    seen = {(f[0], f[1]) for f in found}
    missing = [p for p in planted if (p["kind"], p["lease"] or p["namespace"]) not in seen]
    return extra, missing


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    status = 0
    for path in paths:
        extra, missing = unplanted(path)
        for kind, lease, detail, *_ in extra:
            print(f"{path}: unplanted {kind} {lease}: {detail}")
        for plant in missing:
            print(f"{path}: planted {plant['kind']} {plant['lease'] or plant['namespace']} was not found")
        if extra or missing:
            status = 1
        else:
            print(f"{path}: only the planted findings")
    return status


if __name__ == "__main__":
    sys.exit(main())
