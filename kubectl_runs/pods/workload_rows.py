"""The rows of ``kubectl runs pending`` for Kueue's pending Workloads that ask for GPUs, and which pods those rows
stand for (a pod of such a Workload is counted in its row, never in a pod row of its own). Pure functions."""

from __future__ import annotations

from ..timeutil import rfc3339
from .model import Pod
from .pending import PendingRow

KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"


def workload_rows(snapshot) -> list[PendingRow]:
    """Kueue's pending Workloads that ask for GPUs: the GPUs and pods of their pod sets, and why they wait as
    ``explain workload`` says it — ``NeverAdmitted`` (beyond the ClusterQueue's maximum capacity in every flavor
    it could use), ``InsufficientQuota`` (short of quota after borrowing), ``NoFlavor`` (no flavor it may use),
    else ``Queued`` (it waits its turn)."""
    from ..kueue.explain import explain_workload
    from ..kueue.model import PodSetsError

    rows = []
    for workload in snapshot.queues.workloads:
        if workload.finished or workload.admitted or workload.quota_reserved or not workload.spec.active:
            continue
        try:
            why = explain_workload(snapshot, workload)
        except PodSetsError:
            continue  # `explain workload` names the bad field
        gpus = sum(view.count * sum(view.per_pod.values()) for view in why.pod_sets)
        if gpus <= 0:
            continue
        if why.never_admitted:
            code = "NeverAdmitted"
        elif why.shortfalls:
            code = "InsufficientQuota"
        elif why.flavors and all(f.verdict == "Excluded" for f in why.flavors):
            code = "NoFlavor"
        else:
            code = "Queued"
        resources = {r for view in why.pod_sets for r, n in view.per_pod.items() if n}
        rows.append(PendingRow("Workload", workload.namespace, workload.name, sum(v.count for v in why.pod_sets),
                               gpus, next(iter(resources)) if len(resources) == 1 else None, None,
                               rfc3339(workload.metadata.creation_timestamp), "Kueue", code,
                               why.assignment_message or why.kueue_message))
    return rows


def kueue_row_pods(workloads, kueue_rows: list[PendingRow]) -> tuple[set, set, set]:
    """(uids, (namespace, pod name)s, (namespace, group)s) of the pods of the Kueue Workloads that have a row:
    owned by uid or by name, or in a pod group named as the Workload. Pods of an admitted Workload are
    kube-scheduler's again: they get rows of their own."""
    pending = {(r.namespace, r.name) for r in kueue_rows}
    uids, names = set(), set()
    for workload in workloads:
        if (workload.namespace, workload.name) in pending:
            for owner in workload.metadata.owner_references:
                if owner.uid:
                    uids.add(owner.uid)
                if owner.kind == "Pod":
                    names.add((workload.namespace, owner.name))
    return uids, names, pending


def in_kueue_row(pod: Pod, in_row: tuple[set, set, set]) -> bool:
    uids, names, groups = in_row
    meta = pod.metadata
    return (bool(meta.uid) and meta.uid in uids) or (meta.namespace, meta.name) in names or \
        (meta.namespace, meta.labels.get(KUEUE_POD_GROUP, "")) in groups
