"""The Parquet schema of the lease archive (docs/archive.md): one row per closed GPULease, every spec and
status field, and the conversions between a row and a ``model.GPULease``, exact both ways (instants in
microseconds since the epoch, UTC).

No DuckDB here: ``Row``/``row_of`` are the row of a lease as plain values, the reference the writer's SQL
(archive/staging.py, which reads the leases' own JSON lines into rows) is tested against.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from ..model import (
    GPULease,
    GPULeaseSpec,
    GPULeaseStatus,
    LeasePreemption,
    ObjectMeta,
    ObjectRef,
    PaidBy,
    Slice,
)

SCHEMA_VERSION = 2  # 2: the column ``cluster`` (issue 30); files and manifests of version 1 are still read
READABLE_VERSIONS = (1, 2)
SCHEMA_KEY = "kubectl-runs.lease-archive.schema-version"  # Parquet key-value metadata of every file
FORMAT = "kubectl-runs/lease-archive"  # the manifest's "format"
PARTITION = "month"  # Hive partition key: month=YYYY-MM, the month (UTC) of the lease's start

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# (column, DuckDB type, what it holds) — the order of the columns in every file. Timestamps are Parquet
# TIMESTAMP(MICROS, isAdjustedToUTC=true): Spark's TimestampType, Trino's timestamp(6) with time zone.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("namespace", "VARCHAR", "metadata.namespace"),
    ("name", "VARCHAR", "metadata.name"),
    ("uid", "VARCHAR", "metadata.uid ('' when the object had none)"),
    ("owner", "VARCHAR", "spec.owner"),
    ("run_namespace", "VARCHAR", "spec.runRef.namespace"),
    ("run_name", "VARCHAR", "spec.runRef.name"),
    ("group_index", "BIGINT", "spec.group"),
    ("flavor", "VARCHAR", "spec.flavor"),
    ("slots", "VARCHAR[]", "spec.slice.slots, in order (node#ordinal; one slot = one GPU)"),
    ("role", "VARCHAR", "spec.slice.role: Active or Spare"),
    ("gpus", "INTEGER", "the number of slots"),
    ("start", "TIMESTAMPTZ", "spec.start"),
    ("reason", "VARCHAR", "spec.reason: Start, Grow or Swap"),
    ("paid_by_namespace", "VARCHAR", "spec.paidBy.namespace as written ('' = the run's namespace); NULL: no paidBy"),
    ("paid_by_budget", "VARCHAR", "spec.paidBy.budget; NULL: minted unfunded"),
    ("paid_by_envelope", "VARCHAR", "spec.paidBy.envelope; NULL: minted unfunded"),
    ("payer_namespace", "VARCHAR", "the namespace of the paying envelope (paidBy.namespace, else the run's); NULL: unfunded"),
    ("closed", "BOOLEAN", "status.closed (always true: only closed leases are archived)"),
    ("ended", "TIMESTAMPTZ", "status.ended; NULL: closed without an end (it never held a GPU)"),
    ("closure_reason", "VARCHAR", "status.closureReason"),
    ("preemption_reservation", "VARCHAR", "status.preemption.reservation; NULL: no status.preemption"),
    ("preemption_seed", "VARCHAR", "status.preemption.seed; NULL: no status.preemption"),
)
# The columns of a lease itself (every version): what the writer stages from the leases' JSON. Version 2 adds
# the cluster the archive run read them from, the same for every row it writes.
LEASE_COLUMNS = COLUMNS
LEASE_COLUMN_NAMES = tuple(name for name, _type, _doc in LEASE_COLUMNS)
COLUMNS = (*LEASE_COLUMNS, ("cluster", "VARCHAR", "the kubeconfig context the archive run read the lease from (version "
                            "2; '' when it is not known: a snapshot that records none, in-cluster config); NULL in "
                            "reports for rows of version-1 files"))
COLUMN_NAMES = tuple(name for name, _type, _doc in COLUMNS)
KEY = ("namespace", "name", "uid")  # a lease's identity in the archive: re-archiving it never adds a row


class Row(msgspec.Struct, frozen=True, gc=False):
    """One lease as an archive row (instants as epoch microseconds): what archive/staging.py's SQL makes of it."""

    namespace: str
    name: str
    uid: str
    owner: str
    run_namespace: str
    run_name: str
    group_index: int
    flavor: str
    slots: tuple[str, ...]
    role: str
    gpus: int
    start: int
    reason: str
    paid_by_namespace: str | None
    paid_by_budget: str | None
    paid_by_envelope: str | None
    payer_namespace: str | None
    closed: bool
    ended: int | None
    closure_reason: str | None
    preemption_reservation: str | None
    preemption_seed: str | None
    cluster: str = ""


def micros(at: datetime) -> int:
    """Microseconds since the epoch, exactly: whole seconds from ``timestamp()``, the microseconds from the field."""
    if at.tzinfo is UTC and at.year >= 1970:  # int() drops the fraction: the float's error is far below 1 µs
        return int(at.timestamp()) * 1_000_000 + at.microsecond
    return (at - EPOCH) // _MICROSECOND


def instant(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def month_of(us: int) -> str:
    """``2025-11``: the partition of a lease that started at ``us``."""
    return instant(us).strftime("%Y-%m")


def row_of(lease: GPULease, cluster: str = "") -> Row:
    meta, spec, status = lease.metadata, lease.spec, lease.status
    paid, pre = spec.paid_by, status.preemption
    ended = status.ended
    return Row(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        owner=spec.owner,
        run_namespace=spec.run_ref.namespace,
        run_name=spec.run_ref.name,
        group_index=spec.group,
        flavor=spec.flavor,
        slots=spec.slice.slots,
        role=spec.slice.role,
        gpus=len(spec.slice.slots),
        start=micros(spec.start),
        reason=spec.reason,
        paid_by_namespace=None if paid is None else paid.namespace,
        paid_by_budget=None if paid is None else paid.budget,
        paid_by_envelope=None if paid is None else paid.envelope,
        payer_namespace=None if paid is None else (paid.namespace or spec.run_ref.namespace),
        closed=status.closed,
        ended=None if ended is None else micros(ended),
        closure_reason=status.closure_reason,
        preemption_reservation=None if pre is None else pre.reservation,
        preemption_seed=None if pre is None else pre.seed,
        cluster=cluster,
    )


# The columns a reader selects to rebuild leases, in the order ``lease_of`` takes them (instants as epoch µs).
LEASE_SELECT = (
    "namespace, name, uid, owner, run_namespace, run_name, group_index, flavor, slots, role, epoch_us(start), "
    "reason, paid_by_namespace, paid_by_budget, paid_by_envelope, epoch_us(ended), closure_reason, "
    "preemption_reservation, preemption_seed"
)


def lease_of(values: tuple) -> GPULease:
    """The GPULease of one row selected with ``LEASE_SELECT``: the same record the JSON path decodes."""
    (namespace, name, uid, owner, run_namespace, run_name, group_index, flavor, slots, role, start, reason,
     paid_namespace, paid_budget, paid_envelope, ended, closure_reason, pre_reservation, pre_seed) = values
    paid = None if paid_budget is None else PaidBy(budget=paid_budget, envelope=paid_envelope,
                                                    namespace=paid_namespace or "")
    pre = None
    if pre_reservation is not None or pre_seed is not None:
        pre = LeasePreemption(reservation=pre_reservation or "", seed=pre_seed or "")
    return GPULease(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid),
        spec=GPULeaseSpec(
            owner=owner,
            run_ref=ObjectRef(namespace=run_namespace, name=run_name),
            group=group_index,
            flavor=flavor,
            slice=Slice(slots=tuple(slots), role=role),
            start=instant(start),
            reason=reason,
            paid_by=paid,
        ),
        status=GPULeaseStatus(
            closed=True,
            ended=None if ended is None else instant(ended),
            closure_reason=closure_reason,
            preemption=pre,
        ),
    )
