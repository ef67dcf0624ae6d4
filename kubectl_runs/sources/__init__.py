"""Where a Snapshot comes from: snapshot files, or the cluster of the current kubeconfig context.

Only ``sources.cluster`` (through ``sources.kubeclient``) imports the kubernetes client, and only when a command
talks to a cluster whose kubeconfig needs it (an auth-provider, a proxy, in-cluster config: ``lean_client``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import Snapshot


@dataclass(frozen=True)
class Source:
    """What to read: snapshot paths, else the cluster named by kubeconfig/context."""

    snapshots: tuple[str, ...] = ()
    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: float | None = None
    namespace: str | None = None  # list only this namespace; None = every namespace
    chunk_size: int | None = None  # objects per list page (kubectl's --chunk-size)
    fallback_namespace: str | None = None  # read this namespace alone when listing every namespace is forbidden
    queues: bool = False  # list Nodes and the Kueue and Kaiwo objects (where their CRDs are installed) instead
    pods: bool = False  # live: also list Pods (`pending`); the jobtree.dev and Kueue kinds are then optional
    lean: bool = False  # snapshot files: Workloads as WorkloadHead where the JSON fast path reads them (files.py)

    @property
    def live(self) -> bool:
        return not self.snapshots


def load(source: Source, stdin: Any = None) -> Snapshot:
    if source.snapshots:
        from .files import load_snapshot

        return load_snapshot(source.snapshots, stdin, lean=source.lean).in_namespace(source.namespace)
    from .cluster import load_cluster

    return load_cluster(source)


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (like kubectl), else ``default``. Reads the kubeconfig
    files with PyYAML, so it costs no import of the kubernetes client."""
    from .kubeconfig import context_namespace

    return context_namespace(kubeconfig, context) or "default"
