"""Quota refusals of controllers that are gone: a ``FailedCreate`` Event outlives its controller (Events are kept
an hour by default), so a Job deleted after ResourceQuota refused its pods would still be listed by ``pending`` as
``QuotaExceeded``. A live load asks the API server for each controller a quota refusal names (one GET per
controller, only for refusals): one that is not there (404), is being deleted, or is another object of the same
name (its uid is not the Event's), makes its refusals history, and they are left out. A controller kind kubectl-runs does not know, or
one the user may not read, is kept (the refusal is shown, as the Event says)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

import msgspec

from .cluster import Cluster, Forbidden, NotFound

# the controllers that make pods, by the kind an Event's involvedObject names: their API paths
_PATHS = {"Job": "/apis/batch/v1", "ReplicaSet": "/apis/apps/v1", "StatefulSet": "/apis/apps/v1",
          "DaemonSet": "/apis/apps/v1", "ReplicationController": "/api/v1"}


class _Meta(msgspec.Struct, frozen=True, rename="camel"):
    uid: str = ""
    deletion_timestamp: str | None = None


class _Object(msgspec.Struct, frozen=True):
    metadata: _Meta = _Meta()


def live_refusals(cluster: Cluster, events: Iterable, cache: dict[tuple[str, str, str], str | None]) -> list:
    """``events`` less the quota refusals (``FailedCreate`` Events whose message is one) of controllers that are
    gone. ``cache``: (namespace, kind, name) -> the controller's uid (None: gone), shared by the pages of a load."""
    from ..pods.quota import parse

    kept = []
    for event in events:
        ref = event.involved_object
        if event.reason != "FailedCreate" or ref.kind not in _PATHS or parse(event.message) is None:
            kept.append(event)
            continue
        key = (event.metadata.namespace, ref.kind, ref.name)
        if key not in cache:
            cache[key] = _uid(cluster, *key)
        uid = cache[key]
        if uid is None or (ref.uid and uid and uid != ref.uid):
            continue  # the controller is gone, or this is another one of its name: the refusal is history
        kept.append(event)
    return kept


def _uid(cluster: Cluster, namespace: str, kind: str, name: str) -> str | None:
    """The controller's uid; None when it does not exist or is being deleted (it makes no more pods); "" when it
    may not be read (kept)."""
    plural = kind.lower() + "s"
    path = f"{_PATHS[kind]}/namespaces/{quote(namespace, safe='')}/{plural}/{quote(name, safe='')}"
    try:
        body = cluster.get(path)
    except NotFound:
        return None
    except Forbidden:
        return ""
    try:
        meta = msgspec.json.decode(body, type=_Object).metadata
    except msgspec.DecodeError:
        return ""
    return None if meta.deletion_timestamp else meta.uid
