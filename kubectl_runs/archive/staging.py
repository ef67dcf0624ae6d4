"""How the archive writer hands leases to DuckDB: the leases themselves, as the JSON lines msgspec writes of
them at C speed (no Python step per lease), and the SQL that reads those lines into the archive's rows
(schema.COLUMNS) exactly as ``schema.row_of`` makes them.

msgspec leaves out every field that holds its default (``Record`` is ``omit_defaults``), so the SQL puts the
model's defaults back: a missing ``metadata.namespace`` is ``default``, a missing ``uid`` or ``paidBy.namespace``
is ``''``, an empty ``status.preemption`` (``{}``) has ``''`` for both fields. Instants are RFC 3339 text with
their offset and microseconds, read as TIMESTAMPTZ: the same instant to the microsecond.

No DuckDB import here: only the SQL text (the tests compare its rows with ``row_of``'s).
"""

from __future__ import annotations

from .schema import LEASE_COLUMN_NAMES as COLUMN_NAMES  # staged rows: no cluster yet

# The JSON of a model.GPULease as DuckDB reads it (the wire names of model.py; other keys are skipped).
LEASE_JSON: dict[str, str] = {
    "metadata": "STRUCT(name VARCHAR, namespace VARCHAR, uid VARCHAR)",
    "spec": ('STRUCT(owner VARCHAR, "runRef" STRUCT(namespace VARCHAR, name VARCHAR), "group" BIGINT, '
             "flavor VARCHAR, slice STRUCT(slots VARCHAR[], role VARCHAR), start TIMESTAMPTZ, reason VARCHAR, "
             '"paidBy" STRUCT(budget VARCHAR, envelope VARCHAR, namespace VARCHAR))'),
    "status": ('STRUCT(closed BOOLEAN, ended TIMESTAMPTZ, "closureReason" VARCHAR, '
               "preemption STRUCT(reservation VARCHAR, seed VARCHAR))"),
}

_PAID = "spec.paidBy"
_PRE = "status.preemption"

# Each column of schema.COLUMNS from the JSON of one lease, as schema.row_of computes it.
ROW_SQL: dict[str, str] = {
    "namespace": "coalesce(metadata.namespace, 'default')",
    "name": "metadata.name",
    "uid": "coalesce(metadata.uid, '')",
    "owner": "spec.owner",
    "run_namespace": "spec.runRef.namespace",
    "run_name": "spec.runRef.name",
    "group_index": 'spec."group"',
    "flavor": "spec.flavor",
    "slots": "spec.slice.slots",
    "role": "spec.slice.role",
    "gpus": "len(spec.slice.slots)::INTEGER",
    "start": "spec.start",
    "reason": "spec.reason",
    "paid_by_namespace": f"CASE WHEN {_PAID} IS NULL THEN NULL ELSE coalesce({_PAID}.namespace, '') END",
    "paid_by_budget": f"{_PAID}.budget",
    "paid_by_envelope": f"{_PAID}.envelope",
    "payer_namespace": (f"CASE WHEN {_PAID} IS NULL THEN NULL "
                        f"ELSE coalesce(nullif({_PAID}.namespace, ''), spec.runRef.namespace) END"),
    "closed": "coalesce(status.closed, false)",
    "ended": "status.ended",
    "closure_reason": "status.closureReason",
    "preemption_reservation": f"CASE WHEN {_PRE} IS NULL THEN NULL ELSE coalesce({_PRE}.reservation, '') END",
    "preemption_seed": f"CASE WHEN {_PRE} IS NULL THEN NULL ELSE coalesce({_PRE}.seed, '') END",
}
def select_rows(source: str) -> str:
    """``SELECT`` the archive's columns, and each row's ``month`` (the UTC month of its start), from ``source``
    (a ``read_json`` of the staged lines)."""
    columns = ", ".join(f"{ROW_SQL[name]} AS {name}" for name in COLUMN_NAMES)
    return f"SELECT {columns}, strftime(spec.start AT TIME ZONE 'UTC', '%Y-%m') AS month FROM {source}"


def json_columns() -> str:
    """``read_json``'s ``columns`` argument."""
    return "{" + ", ".join(f"'{key}': '{value}'" for key, value in LEASE_JSON.items()) + "}"
