"""The reconciler cache's records share repeated values (reconciler/sharing.py) and read exactly as decoded."""

from __future__ import annotations

import json

import msgspec

from kubectl_runs.model import KINDS
from kubectl_runs.reconciler.cache import decode_entry
from kubectl_runs.reconciler.sharing import Sharing


def lease(name: str, *, start: str = "2025-11-01T00:00:00Z", rv: str = "7", labels: dict | None = None) -> bytes:
    meta = {"name": name, "namespace": "team", "resourceVersion": rv, "uid": f"uid-{name}",
            "creationTimestamp": "2025-11-01T00:00:00Z"}
    if labels:
        meta["labels"] = labels
    return json.dumps({
        "apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease", "metadata": meta,
        "spec": {"owner": "team", "runRef": {"namespace": "team", "name": "r"}, "group": 0, "flavor": "H100",
                 "slice": {"slots": [f"n-{name}#0"], "role": "Active"}, "start": start, "reason": "Start",
                 "paidBy": {"budget": "main", "envelope": "main"}},
        "status": {"closed": True, "ended": "2025-11-01T01:00:00Z", "closureReason": "Completed"},
    }).encode()


def node(name: str) -> bytes:
    return json.dumps({"kind": "Node", "metadata": {"name": name, "resourceVersion": "3",
                                                    "labels": {"gpu.flavor": "H100", "fabric.domain": "d0"}},
                       "status": {"allocatable": {"nvidia.com/gpu": "8"}}}).encode()


def test_shared_records_equal_the_decoded_ones():
    for kind, raw in (("GPULease", lease("a")), ("GPULease", lease("b", labels={"x": "y"})), ("Node", node("n1"))):
        entry = decode_entry(kind, raw)
        plain = msgspec.json.decode(raw, type=KINDS[kind])
        assert entry.record == plain
        assert msgspec.json.encode(entry.record) == msgspec.json.encode(plain)


def test_repeated_values_are_one_object():
    a, b = decode_entry("GPULease", lease("a")).record, decode_entry("GPULease", lease("b")).record
    assert a.spec.run_ref is b.spec.run_ref and a.spec.paid_by is b.spec.paid_by
    assert a.metadata.namespace is b.metadata.namespace is a.spec.owner is b.spec.owner
    assert a.spec.start is b.spec.start and a.status.ended is b.status.ended
    assert a.metadata.labels is b.metadata.labels == {}
    assert a.metadata.name != b.metadata.name and a.metadata.uid != b.metadata.uid
    # the entry's names are the record's own strings
    entry = decode_entry("GPULease", lease("c"))
    assert entry.name is entry.record.metadata.name and entry.namespace is entry.record.metadata.namespace
    n1, n2 = decode_entry("Node", node("n1")).record, decode_entry("Node", node("n2")).record
    assert n1.metadata.labels is n2.metadata.labels and n1.status is n2.status and n1.spec is n2.spec
    assert decode_entry("Node", node("n1")).resource_version == "3"


def test_a_time_in_another_offset_keeps_its_own_object():
    utc = decode_entry("GPULease", lease("a", start="2025-11-01T02:00:00Z")).record
    other = decode_entry("GPULease", lease("b", start="2025-11-01T03:00:00+01:00")).record
    assert utc.spec.start == other.spec.start and utc.spec.start is not other.spec.start
    assert other.spec.start.utcoffset().total_seconds() == 3600


def test_pools_start_over_past_their_limit():
    sharing = Sharing(limit=2)
    first = sharing.text("".join(["a", "b"]))
    sharing.text("c")
    sharing.text("d")  # the pool was full: it starts over
    again = sharing.text("".join(["a", "b"]))
    assert again == first and again is not first
    assert len(sharing._strings) <= 2
