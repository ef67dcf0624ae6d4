"""The Kueue reports as values (what ``-o json|yaml`` prints), in the style of engine/reports.py: frozen msgspec
Structs whose fields, in order, are the JSON contract; docs/schemas/queues-usage.schema.json and
explain-workload.schema.json are generated from them (``python -m kubectl_runs.engine.schemas``)."""

from __future__ import annotations

from typing import Literal

from ..engine.reports import Value, plain

__all__ = ["ExplainWorkloadReport", "QueuesUsageReport", "plain"]

GPUResource = Literal["nvidia.com/gpu", "amd.com/gpu"]
FindingKind = Literal["MissingClusterQueue", "MissingLocalQueue", "MissingFlavor", "FlavorSelectsNoNode",
                      "UnbackedQuota", "UnreachableBorrowingLimit", "CohortCycle"]
Verdict = Literal["Excluded", "TooBig", "Insufficient", "Fits", "FitsByBorrowing"]
State = Literal["Admitted", "QuotaReserved", "Pending", "Finished", "Inactive"]
RemedyKind = Literal["Preempt", "Reclaim", "Lend", "RaiseBorrowingLimit", "RaiseQuota", "GrowNodePool", "Wait",
                     "FixQueue"]


# --- queues usage -------------------------------------------------------------------------------------------


class QueueRowEntry(Value):
    """One ClusterQueue × flavor × GPU resource, in GPUs."""

    cluster_queue: str
    cohort: str | None
    flavor: str
    resource: GPUResource
    nominal_quota: int
    borrowing_limit: int | None  # null: no limit
    lending_limit: int | None  # null: lends all
    reserved: int
    admitted: int
    pending: int
    pending_workloads: int
    headroom: int
    cohort_can_lend: int
    available: int
    maximum: int
    nodes: int
    node_gpus: int
    kueue_reserved: int | None  # the ClusterQueue's status.flavorsReservation (null: not written)
    kueue_admitted: int | None  # status.flavorsUsage


class CohortEntry(Value):
    cohort: str
    parent: str | None
    flavor: str
    resource: GPUResource
    nominal_quota: int
    pooled: int
    used: int
    free: int


class QueueFindingEntry(Value):
    kind: FindingKind
    object: str
    detail: str


class QueuesUsageReport(Value):
    """``kubectl runs queues usage``: per ClusterQueue × flavor × GPU resource, per Cohort, findings."""

    cluster_queues: list[QueueRowEntry]
    cohorts: list[CohortEntry]
    findings: list[QueueFindingEntry]


# --- explain workload -------------------------------------------------------------------------------------------


class PodSetEntry(Value):
    name: str
    count: int
    gpus_per_pod: dict[GPUResource, int]
    gpus: dict[GPUResource, int]
    flavors: dict[GPUResource, str]


class FlavorEntry(Value):
    pod_set: str
    flavor: str
    verdict: Verdict
    reasons: list[str]


class KueueSays(Value):
    reason: str | None
    message: str | None
    matches: bool | None  # null: not pending, or Kueue wrote no message yet


class ShortfallEntry(Value):
    """In GPUs, pods where said."""

    pod_set: str
    flavor: str
    resource: GPUResource
    needed: int
    nominal_quota: int
    reserved: int
    own_free: int
    cohort_free: int
    borrowing_limit: int | None
    own_quota_short: int
    quota_short: int  # Kueue's "N more needed"
    gpus_per_pod: int
    pods: int
    nodes: int
    pods_fit: int
    physical_short: int


class BeyondCapacityEntry(Value):
    """A request larger than the most the ClusterQueue can ever admit in a flavor: its nominal quota plus what
    it may borrow from its cohort, nothing in use (Kueue: ``request > maximum capacity (request > maximum)``).
    In Kueue's units: GPUs for GPU resources, millicores for cpu, whole units otherwise."""

    pod_set: str
    flavor: str
    resource: str
    request: int
    maximum_capacity: int


class PositionEntry(Value):
    position: int
    pending: int
    ahead: list[str]
    gpus_ahead: int


class RemedyEntry(Value):
    kind: RemedyKind
    gpus: int
    message: str
    objects: list[str]


class ExplainWorkloadReport(Value):
    """``kubectl runs explain workload NAME`` (and ``kaiwojob NAME``)."""

    workload: str
    kaiwo: str | None
    state: State
    priority: int
    priority_class: str | None
    created: str | None
    local_queue: str
    cluster_queue: str | None
    cohort: str | None
    pod_sets: list[PodSetEntry]
    flavors: list[FlavorEntry]
    may_use: dict[str, str]
    message: str | None
    kueue: KueueSays
    shortfalls: list[ShortfallEntry]
    beyond_capacity: list[BeyondCapacityEntry]
    never_admitted: bool  # some pod set is beyond the queue's maximum capacity in every flavor it could use
    position: PositionEntry | None
    remedies: list[RemedyEntry]
    notes: list[str]
