"""``snapshot save`` from the cluster: every kind kubectl-runs reads, as the API server returns it."""

from __future__ import annotations

import msgspec

from ..model import snapshot_document
from . import Source
from .cluster import (
    POD_RESOURCES,
    QUEUE_RESOURCES,
    RESOURCES,
    Cluster,
    CRDsMissing,
    Forbidden,
    Resource,
    readable_pages,
)
from .files import gc_paused


def save_cluster(source: Source, taken_at: str) -> tuple[dict, list[str]]:
    """The objects as the server returned them (minus managedFields), as one JSON ``List`` stamped with
    ``jobtree.dev/snapshot-time``, and notes on what could not be read.

    Every kind but Node is optional: a cluster with Kueue and no jobtree.dev CRDs saves its Kueue and Kaiwo
    objects, one with jobtree.dev and no Kueue saves ours, one with neither saves its GPU nodes and pods (what
    ``pending`` reads). The kinds whose CRD is not installed (the list answered 404) are named in annotation
    ``jobtree.dev/snapshot-absent-kinds`` and in one note. A server with none of the CRDs and no GPU at all is an
    error (the jobtree.dev one, which says how to install the CRDs)."""
    cluster = Cluster(source)
    items: list[dict] = []
    notes: list[str] = []
    absent: list[Resource] = []
    missing_ours: CRDsMissing | None = None
    with gc_paused():
        for resource in RESOURCES + QUEUE_RESOURCES:
            try:
                pages = readable_pages(cluster, resource, source, notes)
            except Forbidden as refused:  # a user who may not read Kueue's objects still saves ours
                if resource not in QUEUE_RESOURCES:
                    raise
                notes.append(f"{refused.message}; the snapshot holds no {resource.qualified}")
                continue
            except CRDsMissing as missing:  # a Kueue cluster: no jobtree.dev CRDs
                missing_ours = missing
                absent.append(resource)
                continue
            if resource in cluster.missing:
                absent.append(resource)
            for body in pages:
                for item in msgspec.json.decode(body).get("items") or []:
                    item.setdefault("apiVersion", resource.api_version)
                    item.setdefault("kind", resource.kind)
                    item.get("metadata", {}).pop("managedFields", None)
                    items.append(item)
        pod_items = _pod_objects(cluster, source, items, notes)
        gpu_nodes = any(_has_gpus(item) for item in items if item.get("kind") == "Node")
        items += pod_items
    if missing_ours is not None and all(r in absent for r in RESOURCES + QUEUE_RESOURCES if r.kind != "Node") \
            and not pod_items and not gpu_nodes:
        raise missing_ours  # neither ours nor Kueue's nor a GPU: most likely the wrong cluster
    if absent:
        groups: dict[str, list[str]] = {}
        for resource in absent:
            groups.setdefault(resource.api_version.rpartition("/")[0], []).append(resource.kind)
        named = "; ".join(f"{', '.join(kinds)} ({group})" for group, kinds in groups.items())
        notes.append(f"not installed on {cluster.server}, so the snapshot holds none: {named}")
    return snapshot_document(items, taken_at, absent=[r.kind for r in absent], context=_context_of(source),
                             server=cluster.server), notes


def _context_of(source: Source) -> str | None:
    """The kubeconfig context read: ``--context``, else the current context (None in-cluster)."""
    if source.context:
        return source.context
    from .contexts import current_context

    return current_context(source.kubeconfig)


def _pod_objects(cluster: Cluster, source: Source, items: list[dict], notes: list[str]) -> list[dict]:
    """What the pod reports read, lean (only the fields kubectl-runs reads, as ``snapshot save --snapshot``
    writes them): the Pods that request GPUs, claim devices (DRA) or run on a GPU node, the Events that carry a
    verdict (FailedScheduling, FailedCreate), ResourceQuotas, LimitRanges, and DRA's ResourceClaims, their
    templates, DeviceClasses and ResourceSlices where the server serves resource.k8s.io. A user the server refuses them still saves
    the rest, with a note."""
    from ..pods.model import POD_API_VERSIONS, POD_KINDS, VERDICT_EVENT_REASONS
    from .controllers import live_refusals
    from .dra import claim_resources

    controllers: dict = {}

    gpu_nodes = {item["metadata"]["name"] for item in items if item.get("kind") == "Node" and _has_gpus(item)}
    out: list[dict] = []
    for resource in (*POD_RESOURCES, *claim_resources(cluster)):
        try:
            pages = readable_pages(cluster, resource, source, notes)
        except Forbidden as refused:
            notes.append(f"{refused.message}; the snapshot holds no {resource.qualified}")
            continue
        decoder = msgspec.json.Decoder(_page_type(POD_KINDS[resource.kind]))
        for body in pages:
            records = decoder.decode(body).items
            if resource.kind == "Event":  # refusals of controllers that are gone are history
                records = live_refusals(cluster, [e for e in records if e.reason in VERDICT_EVENT_REASONS],
                                        controllers)
            for record in records:
                if resource.kind == "Pod" and record.spec.gpu_request() is None and not record.spec.resource_claims \
                        and record.spec.node_name not in gpu_nodes:
                    continue
                if resource.kind == "Event" and record.reason not in VERDICT_EVENT_REASONS:
                    continue
                item = msgspec.to_builtins(record)
                item["apiVersion"] = POD_API_VERSIONS[resource.kind]
                out.append(item)
    return out


def _page_type(cls: type) -> type:
    return msgspec.defstruct(f"{cls.__name__}SavePage", [("items", list[cls], [])], frozen=True, gc=False)


def _has_gpus(node: dict) -> bool:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return any(str(allocatable.get(r, "0")) not in ("0", "") for r in ("nvidia.com/gpu", "amd.com/gpu"))
