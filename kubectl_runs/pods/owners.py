"""The workload a pod belongs to, for one row per workload instead of one per replica: its controller as
ownerReferences name it, with the Deployment behind a ReplicaSet that a Deployment made (the ReplicaSet's name is
the Deployment's name and the pod's ``pod-template-hash``), a pod of no controller standing for itself."""

from __future__ import annotations

from dataclasses import dataclass

from .model import Pod

TEMPLATE_HASH = "pod-template-hash"


@dataclass(frozen=True, order=True)
class Workload:
    """``kind`` and ``name`` of what runs the pod, in the pod's namespace."""

    namespace: str
    kind: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


def workload_of(pod: Pod) -> Workload:
    ns = pod.metadata.namespace
    owner = pod.controller
    if owner is None:
        return Workload(ns, "Pod", pod.metadata.name)
    suffix = pod.metadata.labels.get(TEMPLATE_HASH)
    if owner.kind == "ReplicaSet" and suffix and owner.name.endswith(f"-{suffix}"):
        return Workload(ns, "Deployment", owner.name[: -len(suffix) - 1])
    return Workload(ns, owner.kind or "Unknown", owner.name)
