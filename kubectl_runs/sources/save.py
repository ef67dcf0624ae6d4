"""``snapshot save`` from the cluster: every kind kubectl-runs reads, as the API server returns it."""

from __future__ import annotations

import msgspec

from ..model import snapshot_document
from . import Source
from .cluster import QUEUE_RESOURCES, RESOURCES, Cluster, CRDsMissing, Forbidden, Resource, readable_pages
from .files import gc_paused


def save_cluster(source: Source, taken_at: str) -> tuple[dict, list[str]]:
    """The objects as the server returned them (minus managedFields), as one JSON ``List`` stamped with
    ``jobtree.dev/snapshot-time``, and notes on what could not be read.

    Every kind but Node is optional: a cluster with Kueue and no jobtree.dev CRDs saves its Kueue and Kaiwo
    objects, one with jobtree.dev and no Kueue saves ours. The kinds whose CRD is not installed (the list
    answered 404) are named in annotation ``jobtree.dev/snapshot-absent-kinds`` and in one note. A server that
    serves none of the kinds at all is an error (the jobtree.dev one, which says how to install the CRDs)."""
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
    if missing_ours is not None and all(r in absent for r in RESOURCES + QUEUE_RESOURCES if r.kind != "Node"):
        raise missing_ours  # neither ours nor Kueue's: most likely the wrong cluster, or nothing installed yet
    if absent:
        groups: dict[str, list[str]] = {}
        for resource in absent:
            groups.setdefault(resource.api_version.rpartition("/")[0], []).append(resource.kind)
        named = "; ".join(f"{', '.join(kinds)} ({group})" for group, kinds in groups.items())
        notes.append(f"not installed on {cluster.server}, so the snapshot holds none: {named}")
    return snapshot_document(items, taken_at, absent=[r.kind for r in absent]), notes
