"""Small fixture builders: objects are written as the manifests a user would apply (the API's wire names) and
decoded with ``msgspec.convert`` into the typed model, so a test reads like YAML and fails like a bad manifest.

Append new builders at the end; do not change the signatures of existing ones (other test modules use them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from kubectl_runs.model import Budget, GPULease, Node, Reservation, Run, Snapshot

# One clock for every test: the start of a November window.
T0 = datetime(2025, 11, 1, tzinfo=UTC)
WINDOW_END = datetime(2025, 12, 1, tzinfo=UTC)


def at(text: str | None = None, **delta: float) -> datetime:
    """``at("2025-11-02T00:00:00Z")`` or ``at(hours=5)`` (= T0 + 5 h)."""
    if text is not None:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    return T0 + timedelta(**delta)


def iso(value: datetime | str) -> str:
    """A time as a manifest writes it."""
    if isinstance(value, str):
        return value
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decode(kind: type, manifest: dict[str, Any]) -> Any:
    return msgspec.convert(manifest, kind)


def envelope(
    name: str = "west",
    *,
    flavor: str = "H100",
    concurrency: int = 8,
    start: datetime | str = T0,
    end: datetime | str = WINDOW_END,
    selector: dict[str, str] | None = None,
    max_gpu_hours: float | None = None,
    lending: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An envelope entry of ``Budget.spec.envelopes`` (a dict, as in a manifest)."""
    out: dict[str, Any] = {
        "name": name,
        "flavor": flavor,
        "concurrency": concurrency,
        "start": iso(start),
        "end": iso(end),
    }
    if selector is not None:
        out["selector"] = selector
    if max_gpu_hours is not None:
        out["maxGPUHours"] = max_gpu_hours
    if lending is not None:
        out["lending"] = lending
    return out


def budget(
    name: str = "b",
    namespace: str = "team",
    *,
    owner: str = "org:team",
    envelopes: list[dict[str, Any]] | None = None,
    aggregate_caps: list[dict[str, Any]] | None = None,
) -> Budget:
    spec: dict[str, Any] = {"owner": owner, "envelopes": envelopes if envelopes is not None else [envelope()]}
    if aggregate_caps:
        spec["aggregateCaps"] = aggregate_caps
    return _decode(Budget, {"kind": "Budget", "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def node(
    name: str,
    *,
    gpus: int = 8,
    vendor: str = "nvidia.com/gpu",
    flavor: str = "H100",
    domain: str = "d1",
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> Node:
    all_labels = {"gpu.flavor": flavor, "fabric.domain": domain, **(labels or {})}
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return _decode(
        Node,
        {
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": spec,
            "status": {"allocatable": {"cpu": "96", vendor: str(gpus)}},
        },
    )


def run(
    name: str,
    namespace: str = "team",
    *,
    gpus: int = 8,
    flavor: str = "H100",
    phase: str | None = "Running",
    group_gpus: int | None = None,
    spares_per_group: int = 0,
    malleable: dict[str, Any] | None = None,
    funding: dict[str, Any] | None = None,
    eta: datetime | str | None = None,
    created: datetime | str | None = None,
    spread: bool | None = None,
) -> Run:
    spec: dict[str, Any] = {"resources": {"gpuType": flavor, "totalGPUs": gpus}}
    if group_gpus is not None:
        spec["locality"] = {"groupGPUs": group_gpus}
        if spread is not None:
            spec["locality"]["allowCrossGroupSpread"] = spread
    if spares_per_group:
        spec["sparesPerGroup"] = spares_per_group
    if malleable is not None:
        spec["malleable"] = malleable
    if funding is not None:
        spec["funding"] = funding
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if eta is not None:
        status["eta"] = {"estimatedCompletion": iso(eta), "source": "workload"}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = iso(created)
    return _decode(Run, {"kind": "Run", "metadata": metadata, "spec": spec, "status": status})


def slots(node_name: str, count: int, first: int = 0) -> list[str]:
    """``slots("n1", 2)`` -> ``["n1#0", "n1#1"]``."""
    return [f"{node_name}#{i}" for i in range(first, first + count)]


def lease(
    name: str,
    namespace: str = "team",
    *,
    owner: str = "org:team",
    gpus: int | None = None,
    slot_list: list[str] | None = None,
    node_name: str | None = None,
    run_name: str | None = None,
    run_namespace: str | None = None,
    group: int = 0,
    flavor: str = "H100",
    role: str = "Active",
    paid_by: tuple[str, str] | tuple[str, str, str] | None = ("b", "west"),
    start: datetime | str = T0,
    ended: datetime | str | None = None,
    closed: bool | None = None,
    closure_reason: str | None = None,
    reason: str = "Start",
) -> GPULease:
    """A GPULease. ``paid_by`` is (budget, envelope) or (namespace, budget, envelope); None = minted unfunded.
    ``ended`` closes the lease at that instant (``closed`` defaults to True then)."""
    if slot_list is None:
        slot_list = slots(node_name or f"{name}-node", gpus if gpus is not None else 1)
    spec: dict[str, Any] = {
        "owner": owner,
        "runRef": {"namespace": run_namespace or namespace, "name": run_name or name},
        "group": group,
        "flavor": flavor,
        "slice": {"slots": slot_list, "role": role},
        "start": iso(start),
        "reason": reason,
    }
    if paid_by is not None:
        if len(paid_by) == 2:
            spec["paidBy"] = {"budget": paid_by[0], "envelope": paid_by[1]}
        else:
            spec["paidBy"] = {"namespace": paid_by[0], "budget": paid_by[1], "envelope": paid_by[2]}
    status: dict[str, Any] = {}
    if closed is None:
        closed = ended is not None
    if closed:
        status["closed"] = True
    if ended is not None:
        status["ended"] = iso(ended)
    if closure_reason is not None:
        status["closureReason"] = closure_reason
    return _decode(
        GPULease,
        {"kind": "GPULease", "metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status},
    )


def reservation(
    name: str,
    namespace: str = "team",
    *,
    run_name: str,
    flavor: str = "H100",
    domain: str | None = None,
    paying: tuple[str, str] | None = None,
    earliest_start: datetime | str = T0,
    state: str | None = "Pending",
    managed: bool = True,
    annotations: dict[str, str] | None = None,
) -> Reservation:
    """A Reservation; ``managed``: labelled as the reconciler's own (the only kind it activates, with those an
    admin approves by annotation)."""
    scope: dict[str, Any] = {"flavor": flavor}
    if domain is not None:
        scope["domain"] = domain
    spec: dict[str, Any] = {
        "runRef": {"namespace": namespace, "name": run_name},
        "scope": scope,
        "earliestStart": iso(earliest_start),
    }
    if paying is not None:
        spec["payingEnvelope"] = {"budget": paying[0], "envelope": paying[1]}
    status = {"state": state} if state else {}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if managed:
        metadata["labels"] = {"app.kubernetes.io/managed-by": "kubectl-runs-reconciler"}
    if annotations:
        metadata["annotations"] = annotations
    return _decode(Reservation, {"kind": "Reservation", "metadata": metadata, "spec": spec, "status": status})


def snapshot(*objects: Any, taken_at: datetime | None = None) -> Snapshot:
    """A Snapshot of these objects, each sorted into its kind's tuple in the order given."""
    by_type: dict[type, list[Any]] = {Node: [], Budget: [], Run: [], Reservation: [], GPULease: []}
    for obj in objects:
        by_type[type(obj)].append(obj)
    return Snapshot(
        nodes=tuple(by_type[Node]),
        budgets=tuple(by_type[Budget]),
        runs=tuple(by_type[Run]),
        reservations=tuple(by_type[Reservation]),
        leases=tuple(by_type[GPULease]),
        taken_at=taken_at,
    )


def to_manifest(obj: Any) -> dict[str, Any]:
    """The object back as a manifest dict (wire names, ``kind`` included): for writing snapshot files."""
    out = msgspec.json.decode(msgspec.json.encode(obj))  # lists, not tuples: safe for yaml.safe_dump
    out.setdefault("apiVersion", "v1" if isinstance(obj, Node) else "jobtree.dev/v1alpha1")
    return out


# --- preemption records (issue 4: seeds) -----------------------------------------------------------------------


def activated(res: Reservation, activation: dict[str, Any], *, state: str = "Activated") -> Reservation:
    """The Reservation with ``status.activation`` recorded (``activation`` as a manifest dict: at, seed,
    deficitGPUs, conflictSet, actions, freedGPUs)."""
    manifest = to_manifest(res)
    manifest["status"] = {"state": state, "activation": activation}
    return _decode(Reservation, manifest)


def preempted(
    victim: GPULease,
    *,
    ended: datetime | str,
    closure_reason: str = "RandomPreempt",
    reservation: str | None = None,
    seed: str | None = None,
) -> GPULease:
    """The lease closed at ``ended`` with ``closureReason`` and, when ``seed`` or ``reservation`` is given,
    ``status.preemption``."""
    manifest = to_manifest(victim)
    status: dict[str, Any] = {"closed": True, "ended": iso(ended), "closureReason": closure_reason}
    if seed is not None or reservation is not None:
        status["preemption"] = {k: v for k, v in (("reservation", reservation), ("seed", seed)) if v is not None}
    manifest["status"] = status
    return _decode(GPULease, manifest)


# --- running commands -------------------------------------------------------------------------------------------


def write_fleet(path: Any, objects: Any) -> str:
    """The objects as one multi-document YAML file (as a user would write it); returns the path."""
    import yaml

    path.write_text(yaml.safe_dump_all([to_manifest(o) for o in objects], sort_keys=False))
    return str(path)


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """``kubectl runs ARGS`` through main()'s error boundary: (exit code, stdout, stderr)."""
    from kubectl_runs.cli.main import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
