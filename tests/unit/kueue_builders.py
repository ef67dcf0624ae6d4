"""Small builders of Kueue/Kaiwo objects for the queue tests (plain dicts as the API writes them, decoded into
the typed model exactly as a snapshot file is)."""

from __future__ import annotations

from typing import Any

import msgspec

from kubectl_runs.kueue.model import QUEUE_KINDS, QueueObjects
from kubectl_runs.model import Node, Snapshot

GPU = "nvidia.com/gpu"
AMD = "amd.com/gpu"


def node(name: str, labels: dict[str, str], gpus: int, resource: str = GPU, unschedulable: bool = False) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": unschedulable}, "status": {"allocatable": {resource: str(gpus)}}}


def flavor(name: str, labels: dict[str, str] | None = None, taints: list[dict] | None = None) -> dict:
    spec: dict[str, Any] = {"nodeLabels": labels if labels is not None else {"gpu": name}}
    if taints:
        spec["nodeTaints"] = taints
    return {"kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def quota(resource: str, nominal: int, borrowing: int | None = None, lending: int | None = None) -> dict:
    out: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
    if borrowing is not None:
        out["borrowingLimit"] = borrowing
    if lending is not None:
        out["lendingLimit"] = lending
    return out


def group(resources: list[str], *flavors: tuple[str, list[dict]]) -> dict:
    return {"coveredResources": resources, "flavors": [{"name": f, "resources": r} for f, r in flavors]}


def cluster_queue(name: str, *groups: dict, cohort: str = "", **spec: Any) -> dict:
    body: dict[str, Any] = {"resourceGroups": list(groups), **spec}
    if cohort:
        body["cohort"] = cohort
    return {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}


def cohort(name: str, *groups: dict, parent: str = "") -> dict:
    body: dict[str, Any] = {"resourceGroups": list(groups)}
    if parent:
        body["parent"] = parent
    return {"kind": "Cohort", "metadata": {"name": name}, "spec": body}


def local_queue(namespace: str, name: str, cq: str) -> dict:
    return {"kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq}}


def pod_set(count: int, per_pod: dict[str, int], name: str = "main", **pod: Any) -> dict:
    requests = {r: str(v) for r, v in per_pod.items()}
    return {"name": name, "count": count, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}], **pod}}}


def workload(namespace: str, name: str, *pod_sets: dict, queue: str = "q", priority: int | None = None,
             created: str = "2025-11-20T10:00:00Z", admitted_in: str | None = None,
             flavors: list[dict[str, str]] | None = None, labels: dict[str, str] | None = None,
             admitted: bool = True) -> dict:
    """A pending workload, or one holding quota in ``admitted_in`` with ``flavors`` per pod set."""
    spec: dict[str, Any] = {"queueName": queue, "podSets": list(pod_sets)}
    if priority is not None:
        spec["priority"] = priority
    status: dict[str, Any] = {}
    if admitted_in is not None:
        assignments = []
        for ps, chosen in zip(pod_sets, flavors or [], strict=True):
            per_pod = ps["template"]["spec"]["containers"][0]["resources"]["requests"]
            assignments.append({"name": ps["name"], "count": ps["count"], "flavors": chosen,
                                "resourceUsage": {r: str(int(v) * ps["count"]) for r, v in per_pod.items()}})
        status["admission"] = {"clusterQueue": admitted_in, "podSetAssignments": assignments}
        status["conditions"] = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""}]
        if admitted:
            status["conditions"].append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""})
    meta = {"name": name, "namespace": namespace, "creationTimestamp": created, "labels": labels or {}}
    return {"kind": "Workload", "metadata": meta, "spec": spec, "status": status}


def snapshot(*objects: dict) -> Snapshot:
    nodes, by_kind = [], {}
    for obj in objects:
        kind = obj["kind"]
        if kind == "Node":
            nodes.append(msgspec.convert(obj, Node))
        else:
            by_kind.setdefault(kind, []).append(msgspec.convert(obj, QUEUE_KINDS[kind]))
    return Snapshot(nodes=tuple(nodes), queues=QueueObjects.of({k: tuple(v) for k, v in by_kind.items()}))
