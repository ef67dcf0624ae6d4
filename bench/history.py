"""A multi-year lease history written straight into a lease archive (docs/archive.md), month by month, so that
10 million leases need no more memory than one month of them (``python -m bench.generate --history DIR``).

    python -m bench.generate --history /tmp/h10m --leases 10000000 --years 3
    python -m bench.generate --history /tmp/h1m --leases 1000000 --years 3 --nodes 1024

What it writes into DIR:

* ``archive/`` — the lease archive, one run of ``archive.store.archive`` per month (so the manifest records the
  fleet's GPUs 36 times, as nightly runs would);
* ``fleet.json`` — the present as a snapshot (stamped at the end of the history): the nodes, one Budget per
  owner whose envelopes (one per flavor) fund the whole fleet over the whole history, the runs the leases name,
  and one open lease per 16 nodes.

The leases: every node's 8 GPUs are split into chains (one chain of 8 slots, two of 4 or four of 2), each a
sequence of leases back to back with gaps, owners and runs drawn at random (seeded): no slot is ever held twice,
except one planted double booking per month (a second lease on the slots of one lease). UIDs are random UUIDs,
as the API server writes them (they are most of what does not compress). Same seed, same history.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubectl_runs.model import (
    SNAPSHOT_TIME_ANNOTATION,
    GPULease,
    GPULeaseSpec,
    GPULeaseStatus,
    ObjectMeta,
    ObjectRef,
    PaidBy,
    Slice,
)

END = datetime(2025, 11, 1, tzinfo=UTC)
FLAVORS = (("H100-80GB", "nvidia.com/gpu", 0.5), ("A100-80GB", "nvidia.com/gpu", 0.3), ("MI300X", "amd.com/gpu", 0.2))
OWNERS = tuple(f"org:ai:t{t}:s{s}" for t in range(6) for s in range(4))
RUNS_PER_OWNER = 40
CLOSURES = (("Completed", 0.7), ("Shrink", 0.1), ("RunDeleted", 0.1), ("NodeFailure", 0.05), ("DropSpare", 0.05))


def namespace_of(owner: str) -> str:
    return owner.split(":", 2)[2].replace(":", "-")


def _months(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    out = []
    first = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while first < end:
        nxt = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
        out.append((max(first, start), min(nxt, end)))
        first = nxt
    return out


class History:
    def __init__(self, *, leases: int, years: int, nodes: int, seed: int):
        self.rng = random.Random(seed)
        self.uids = random.Random(seed + 1)
        self.start = END - timedelta(days=365 * years)
        self.nodes = [(f"gpu-{i:05d}", self._flavor(i)) for i in range(nodes)]
        self.chains: list[tuple[tuple[str, ...], str]] = []  # (slots, flavor)
        for name, flavor in self.nodes:
            width = self.rng.choices((8, 4, 2), weights=(5, 3, 2))[0]
            for first in range(0, 8, width):
                self.chains.append((tuple(f"{name}#{k}" for k in range(first, first + width)), flavor))
        span = (END - self.start).total_seconds()
        self.period = span * len(self.chains) / leases  # mean seconds from one lease's start to the next's
        self.cursor = [self.start.timestamp() + self.rng.random() * self.period for _ in self.chains]
        self.count = 0
        self.weights = [self.rng.random() ** 2 + 0.05 for _ in OWNERS]

    def _flavor(self, i: int) -> str:
        cut = (i * 0.6180339887) % 1.0
        acc = 0.0
        for flavor, _resource, share in FLAVORS:
            acc += share
            if cut < acc:
                return flavor
        return FLAVORS[-1][0]

    def gpus(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _name, flavor in self.nodes:
            out[flavor] = out.get(flavor, 0) + 8
        return out

    def _lease(self, slots: tuple[str, ...], flavor: str, start: float, end: float | None) -> GPULease:
        rng = self.rng
        owner = rng.choices(OWNERS, weights=self.weights)[0]
        namespace = namespace_of(owner)
        run = f"job-{rng.randrange(RUNS_PER_OWNER)}"
        group = rng.randrange(4)
        self.count += 1
        closed = end is not None
        closure = rng.choices([c for c, _ in CLOSURES], weights=[w for _, w in CLOSURES])[0] if closed else None
        return GPULease(
            metadata=ObjectMeta(name=f"{run}-g{group}-{self.count:x}", namespace=namespace,
                                uid=str(uuid.UUID(int=self.uids.getrandbits(128), version=4))),
            spec=GPULeaseSpec(owner=owner, run_ref=ObjectRef(namespace=namespace, name=run), group=group,
                              flavor=flavor, slice=Slice(slots=slots, role="Active"),
                              start=datetime.fromtimestamp(int(start), UTC), reason="Start",
                              paid_by=PaidBy(budget="b", envelope=flavor.lower())),
            status=GPULeaseStatus(closed=closed, ended=datetime.fromtimestamp(int(end), UTC) if closed else None,
                                  closure_reason=closure),
        )

    def month(self, lo: datetime, hi: datetime) -> list[GPULease]:
        """The closed leases that start in ``[lo, hi)``, chain by chain; one planted double booking."""
        out = []
        limit, end_of_history = hi.timestamp(), END.timestamp()
        rng = self.rng
        for c, (slots, flavor) in enumerate(self.chains):
            at = self.cursor[c]
            while at < limit:
                held = self.period * (0.2 + 1.3 * rng.random()) * 0.85 / 0.8725
                ended = at + max(held, 600.0)
                if ended >= end_of_history:
                    at = end_of_history + 1e12  # the chain's last lease would still be open: left to the present
                    break
                out.append(self._lease(slots, flavor, at, ended))
                at = ended + self.period * 0.3 * rng.random() / 0.8725
            self.cursor[c] = at
        if out:
            victim = out[rng.randrange(len(out))]
            spec, status = victim.spec, victim.status
            self.count += 1
            out.append(GPULease(
                metadata=ObjectMeta(name=f"planted-double-{self.count:x}", namespace=victim.metadata.namespace,
                                    uid=str(uuid.UUID(int=self.uids.getrandbits(128), version=4))),
                spec=spec, status=status))
        return out

    def present(self) -> list[dict]:
        """The fleet.json items: nodes, budgets, runs, and an open lease per 16 nodes."""
        resource = {flavor: res for flavor, res, _ in FLAVORS}
        items: list[dict] = []
        for name, flavor in self.nodes:
            items.append({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "labels": {"gpu.flavor": flavor, "fabric.domain": name[:8]}},
                          "status": {"allocatable": {resource[flavor]: "8"}}})
        gpus = self.gpus()
        for owner in OWNERS:
            ns = namespace_of(owner)
            envelopes = [{"name": flavor.lower(), "flavor": flavor, "concurrency": gpus[flavor],
                          "start": (self.start - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "end": (END + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ")} for flavor in gpus]
            items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget",
                          "metadata": {"name": "b", "namespace": ns}, "spec": {"owner": owner, "envelopes": envelopes}})
            for k in range(RUNS_PER_OWNER):
                items.append({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run",
                              "metadata": {"name": f"job-{k}", "namespace": ns},
                              "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": 8}},
                              "status": {"phase": "Running"}})
        for i, (slots, flavor) in enumerate(self.chains[::max(1, len(self.chains) // max(1, len(self.nodes) // 16))]):
            lease = self._lease(slots, flavor, END.timestamp() - 3600 * (1 + i % 24), None)
            items.append(json.loads(__import__("msgspec").json.encode(lease)))
        return items


def write_history(out: Path, *, leases: int, years: int = 3, nodes: int = 4096, seed: int = 1) -> dict:
    from kubectl_runs.archive import store

    history = History(leases=leases, years=years, nodes=nodes, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "archive"
    gpus = history.gpus()
    began = time.perf_counter()
    total = 0
    for lo, hi in _months(history.start, END):
        month = history.month(lo, hi)
        result = store.archive(archive, month, archived_at=hi, gpus=gpus)
        total += result.added
        print(f"  {lo:%Y-%m}: {result.added:,} leases ({total:,} in all) [{time.perf_counter() - began:.0f} s]",
              file=sys.stderr)
        del month
    items = history.present()
    document = {"apiVersion": "v1", "kind": "List",
                "metadata": {"annotations": {SNAPSHOT_TIME_ANNOTATION: END.strftime("%Y-%m-%dT%H:%M:%SZ")}},
                "items": items}
    (out / "fleet.json").write_text(json.dumps(document))
    manifest = json.loads((archive / "_manifest.json").read_text())
    size = sum(p["bytes"] for p in manifest["partitions"])
    return {"leases": manifest["leases"], "bytes": size, "months": len(manifest["partitions"]),
            "from": manifest["firstStart"], "to": manifest["lastEnded"], "nodes": nodes,
            "seconds": round(time.perf_counter() - began, 1)}
