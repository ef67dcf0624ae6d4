"""The workload a pod belongs to, for one row per workload instead of one per replica: its controller as
ownerReferences name it, with the Deployment behind a ReplicaSet that a Deployment made (the ReplicaSet's name is
the Deployment's name and the pod's ``pod-template-hash``), a pod of no controller standing for itself. A Run's pod
(labelled ``jobtree.dev/run: NAME``, or owned by a ``jobtree.dev`` Run, directly or through the Job the Run made)
belongs to the Run: ``pending`` shows it in the Run's row, never beside it."""

from __future__ import annotations

from dataclasses import dataclass

from .model import Pod

TEMPLATE_HASH = "pod-template-hash"
RUN_LABEL = "jobtree.dev/run"
RUN_GROUP = "jobtree.dev/"


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
    return Workload(*workload_key(pod))


def workload_key(pod: Pod) -> tuple[str, str, str]:
    """(namespace, kind, name) of ``workload_of(pod)``, as a plain tuple (cheap to hash and sort)."""
    meta = pod.metadata
    ns = meta.namespace
    run = meta.labels.get(RUN_LABEL)
    owner = None
    for ref in meta.owner_references:  # one pass: the Run among the owners, the controller
        if ref.kind == "Run" and ref.api_version.startswith(RUN_GROUP):
            run = run or ref.name
        if ref.controller and owner is None:
            owner = ref
    if run:
        return ns, "Run", run
    if owner is None:
        return ns, "Pod", meta.name
    suffix = meta.labels.get(TEMPLATE_HASH)
    if owner.kind == "ReplicaSet" and suffix and owner.name.endswith(f"-{suffix}"):
        return ns, "Deployment", owner.name[: -len(suffix) - 1]
    return ns, owner.kind or "Unknown", owner.name


def run_of(pod: Pod) -> str | None:
    """The name of the Run (in the pod's namespace) the pod belongs to, or None."""
    labelled = pod.metadata.labels.get(RUN_LABEL)
    if labelled:
        return labelled
    for owner in pod.metadata.owner_references:
        if owner.kind == "Run" and owner.api_version.startswith(RUN_GROUP):
            return owner.name
    return None
