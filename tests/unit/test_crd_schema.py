"""Every field the code reads or writes is declared in the CRD schemas (crds/*.yaml).

The API server prunes fields its structural schema does not name, silently: a field the model reads but the
schema lacks would always come back empty from a real cluster, and a status key the code writes but the schema
lacks would be dropped. So: walk the msgspec model of each kind (msgspec.inspect) and every status shape the
engine emits, and find each wire name at the same path in the CRD's openAPIV3Schema, with a compatible type and,
for enums, every value allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
import yaml

from kubectl_runs import model
from kubectl_runs.engine.reports import envelope_row, plain
from kubectl_runs.model import Activation

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
KINDS = {"Budget": "budgets", "Run": "runs", "Reservation": "reservations", "GPULease": "gpuleases"}


def crd(kind: str) -> dict[str, Any]:
    return yaml.safe_load((CRD_DIR / f"{KINDS[kind]}.jobtree.dev.yaml").read_text())


def schema(kind: str) -> dict[str, Any]:
    [version] = [v for v in crd(kind)["spec"]["versions"] if v["name"] == model.VERSION]
    return version["schema"]["openAPIV3Schema"]


def at_path(root: dict[str, Any], path: str) -> dict[str, Any]:
    """``status.activation.conflictSet[]`` -> that node of the schema."""
    node = root
    for part in path.split("."):
        many = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if many:
            node = node["items"]
    return node


# --- the model against the schema ----------------------------------------------------------------------------

_SCALARS = {
    mi.StrType: {"string"},
    mi.IntType: {"integer"},
    mi.FloatType: {"number", "integer"},
    mi.BoolType: {"boolean"},
    mi.DateTimeType: {"string"},
    mi.LiteralType: {"string"},
}


def model_problems(t: mi.Type, node: dict[str, Any], path: str) -> list[str]:
    """Every way the model type ``t`` at ``path`` is not declared by the schema ``node``."""
    problems: list[str] = []
    if isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        for member in t.types:
            if not isinstance(member, mi.NoneType):
                problems += model_problems(member, node, path)
        return problems
    declared = node.get("type")
    if isinstance(t, mi.StructType):
        if declared != "object":
            return [f"{path}: the model reads an object, the schema says {declared!r}"]
        properties = node.get("properties", {})
        for f in t.fields:
            if path == "" and f.encode_name == "metadata":
                continue  # ObjectMeta: the API server's own schema
            where = f"{path}.{f.encode_name}" if path else f.encode_name
            if f.encode_name not in properties:
                problems.append(f"{where}: read by the model, missing from the schema")
                continue
            problems += model_problems(f.type, properties[f.encode_name], where)
        if t.tag_field and t.tag_field not in properties:
            problems.append(f"{path}.{t.tag_field}: missing from the schema")
        return problems
    if isinstance(t, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        if declared != "array" or "items" not in node:
            return [f"{path}: the model reads a list, the schema says {declared!r}"]
        return model_problems(t.item_type, node["items"], f"{path}[]")
    if isinstance(t, mi.DictType):
        extra = node.get("additionalProperties")
        if declared != "object" or not isinstance(extra, dict):
            return [f"{path}: the model reads a map, the schema has no additionalProperties"]
        return model_problems(t.value_type, extra, f"{path}{{}}")
    allowed = _SCALARS.get(type(t))
    if allowed is None:
        return [f"{path}: no schema check for {t!r}"]
    if declared not in allowed:
        problems.append(f"{path}: the model reads {sorted(allowed)}, the schema says {declared!r}")
    if isinstance(t, mi.DateTimeType) and node.get("format") != "date-time":
        problems.append(f"{path}: a time, but the schema's format is {node.get('format')!r}")
    if isinstance(t, mi.LiteralType):
        missing = set(t.values) - set(node.get("enum", t.values))
        if missing:
            problems.append(f"{path}: values {sorted(missing)} are not in the schema's enum")
    return problems


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_field_the_model_reads_is_in_the_schema(kind):
    problems = model_problems(mi.type_info(model.KINDS[kind]), schema(kind), "")
    assert problems == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_crd_names_the_kind_as_the_model_does(kind):
    names = crd(kind)["spec"]["names"]
    assert names["kind"] == kind
    assert names["plural"] == KINDS[kind]
    assert crd(kind)["spec"]["group"] == model.GROUP
    assert crd(kind)["spec"]["scope"] == "Namespaced"
    [version] = crd(kind)["spec"]["versions"]
    assert version["subresources"] == {"status": {}}


class _Spec(msgspec.Struct, rename="camel"):
    owner: str
    new_thing: int = 0


class _Thing(msgspec.Struct):
    spec: _Spec
    phase: model.RunPhase | None = None


def test_the_checker_catches_a_missing_field():
    """The walk is not vacuous: a model field the schema lacks, a wrong type and an enum value are found."""
    node = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"owner": {"type": "integer"}}},
        "phase": {"type": "string", "enum": ["Pending"]},
    }}
    assert model_problems(mi.type_info(_Thing), node, "") == [
        "spec.owner: the model reads ['string'], the schema says 'integer'",
        "spec.newThing: read by the model, missing from the schema",
        "phase: values ['Failed', 'Reserved', 'Running', 'Succeeded'] are not in the schema's enum",
    ]


# --- API.md §1: every field it lists is in the schema -----------------------------------------------------------

API_FIELDS = {
    "Budget": [
        "spec.owner", "spec.envelopes[].name", "spec.envelopes[].flavor", "spec.envelopes[].selector",
        "spec.envelopes[].concurrency", "spec.envelopes[].start", "spec.envelopes[].end",
        "spec.envelopes[].maxGPUHours", "spec.envelopes[].lending.allow", "spec.envelopes[].lending.to",
        "spec.envelopes[].lending.maxConcurrency", "spec.aggregateCaps[].name", "spec.aggregateCaps[].envelopes",
        "spec.aggregateCaps[].maxConcurrency",
        "status.observedGeneration", "status.updatedAt", "status.conditions",
        *(f"status.envelopes[].{k}" for k in (
            "name", "flavor", "concurrency", "usedGPUs", "headroomGPUs", "ownedGPUs", "sharedGPUs", "borrowedGPUs",
            "unfundedGPUs", "spareGPUs", "consumedGPUHours", "gpuHoursHeadroom")),
        "status.aggregates[].name", "status.aggregates[].usedGPUs", "status.aggregates[].headroomGPUs",
    ],
    "Run": [
        "spec.resources.gpuType", "spec.resources.totalGPUs", "spec.locality.groupGPUs",
        "spec.locality.allowCrossGroupSpread", "spec.sparesPerGroup", "spec.malleable.minTotalGPUs",
        "spec.malleable.maxTotalGPUs", "spec.malleable.stepGPUs", "spec.malleable.desiredTotalGPUs",
        "spec.funding.allowBorrow", "spec.funding.maxBorrowGPUs", "spec.funding.sponsors",
        "status.observedGeneration", "status.phase", "status.reason", "status.message",
        "status.width.min", "status.width.max", "status.width.desired", "status.width.allocated",
        "status.funding.ownedGPUs", "status.funding.sharedGPUs", "status.funding.borrowedGPUs",
        "status.funding.unfundedGPUs", "status.funding.lenders[].owner", "status.funding.lenders[].gpus",
        "status.plan.deficitGPUs", "status.plan.capacityDeficitGPUs", "status.plan.fundingDeficitGPUs",
        "status.plan.reasons", "status.plan.remedies", "status.pendingReservation", "status.earliestStart",
        "status.eta.estimatedCompletion", "status.eta.source", "status.preemptions[].reservation",
        "status.preemptions[].seed", "status.preemptions[].at", "status.preemptions[].gpus", "status.conditions",
    ],
    "Reservation": [
        "spec.runRef.namespace", "spec.runRef.name", "spec.scope.flavor", "spec.scope.domain",
        "spec.payingEnvelope.budget", "spec.payingEnvelope.envelope", "spec.earliestStart",
        "status.state", "status.reason", "status.countdownSeconds", "status.forecast.deficitGPUs",
        "status.forecast.confidence", "status.forecast.remedies", "status.activation.at",
        "status.activation.seed", "status.activation.deficitGPUs", "status.activation.freedGPUs",
        *(f"status.activation.conflictSet[].{k}" for k in ("run", "group", "owner", "class", "gpus", "ticket")),
        *(f"status.activation.actions[].{k}" for k in ("kind", "run", "group", "lease", "gpus")),
        "status.conditions",
    ],
    "GPULease": [
        "spec.owner", "spec.runRef.namespace", "spec.runRef.name", "spec.group", "spec.flavor",
        "spec.slice.slots", "spec.slice.role", "spec.paidBy.namespace", "spec.paidBy.budget",
        "spec.paidBy.envelope", "spec.start", "spec.reason", "status.closed", "status.ended",
        "status.closureReason", "status.preemption.reservation", "status.preemption.seed",
    ],
}

API_ENUMS = {
    ("Run", "status.phase"): {"Pending", "Reserved", "Running", "Succeeded", "Failed"},
    ("Reservation", "status.state"): {"Pending", "Activated", "Released", "Failed"},
    ("Reservation", "status.forecast.confidence"): {"reported", "window-aligned", "unknown"},
    ("Reservation", "status.activation.conflictSet[].class"): {"owned", "shared", "borrowed", "unfunded"},
    ("GPULease", "spec.slice.role"): {"Active", "Spare"},
    ("GPULease", "spec.reason"): {"Start", "Grow", "Swap"},
    ("GPULease", "status.closureReason"): {
        "Completed", "Shrink", "DropSpare", "ReclaimUnfunded", "RandomPreempt", "NodeFailure", "RunDeleted",
        "Orphaned"},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_field_api_md_lists_is_in_the_schema(kind):
    missing = []
    for path in API_FIELDS[kind]:
        try:
            at_path(schema(kind), path)
        except KeyError:
            missing.append(path)
    assert missing == []


@pytest.mark.parametrize(("kind", "path"), list(API_ENUMS), ids=[f"{k}:{p}" for k, p in API_ENUMS])
def test_enums_are_exactly_the_api_values(kind, path):
    assert set(at_path(schema(kind), path)["enum"]) == API_ENUMS[(kind, path)]


# --- what the engine writes into status ---------------------------------------------------------------------------

_JSON_TYPES = {str: {"string"}, bool: {"boolean"}, int: {"integer", "number"}, float: {"number"}}


def value_problems(value: Any, node: dict[str, Any], path: str) -> list[str]:
    """Every key of ``value`` (a status patch the code writes) that the schema ``node`` does not declare."""
    if value is None:
        return []  # a null in a non-nullable field is pruned by the API server, never an error
    declared = node.get("type")
    if isinstance(value, dict):
        if declared != "object":
            return [f"{path}: the code writes an object, the schema says {declared!r}"]
        properties = node.get("properties", {})
        problems = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key not in properties:
                problems.append(f"{where}: written by the code, missing from the schema (pruned)")
            else:
                problems += value_problems(item, properties[key], where)
        return problems
    if isinstance(value, list):
        if declared != "array":
            return [f"{path}: the code writes a list, the schema says {declared!r}"]
        return [p for i, item in enumerate(value) for p in value_problems(item, node["items"], f"{path}[{i}]")]
    if declared not in _JSON_TYPES[type(value)]:
        return [f"{path}: the code writes {type(value).__name__}, the schema says {declared!r}"]
    if "enum" in node and value not in node["enum"]:
        return [f"{path}: {value!r} is not in the schema's enum"]
    return []


def test_the_lease_closure_the_resolver_writes_is_in_the_schema():
    resolver = pytest.importorskip("kubectl_runs.engine.resolver")
    for reason, seed in (("RandomPreempt", "0x0123456789abcdef"), ("ReclaimUnfunded", "0x1"), ("Shrink", None)):
        closure = resolver.LeaseClosure(lease="team/l", closure_reason=reason,
                                        reservation="team/r" if seed else None, seed=seed)
        patch = closure.status_patch("2025-11-01T00:15:00Z")
        assert value_problems(patch, schema("GPULease"), "") == []


def test_the_activation_record_is_in_the_schema():
    lottery = pytest.importorskip("kubectl_runs.engine.lottery")
    activation = msgspec.convert(
        {
            "at": "2025-11-01T00:15:00Z",
            "seed": "0x0123456789abcdef",
            "deficitGPUs": 8,
            "conflictSet": [{"run": "team/r", "group": 0, "owner": "org:team", "class": "borrowed", "gpus": 8,
                             "ticket": "ab" * 32}],
            "actions": [{"kind": "Lottery", "run": "team/r", "group": 0, "lease": "team/r-g0", "gpus": 8},
                        {"kind": "DropSpare", "run": "team/s", "lease": "team/s-g0-spare", "gpus": 2}],
            "freedGPUs": 10,
        },
        Activation,
    )
    record = {"status": {"activation": lottery.activation_json(activation)}}
    assert value_problems(record, schema("Reservation"), "") == []


def test_the_budget_status_shape_of_api_md_is_in_the_schema():
    """The per-envelope status the reconciler writes (API.md §1), with the numbers of one ledger row."""
    from builders import at, budget, lease, snapshot

    from kubectl_runs.engine.accounting import ledger

    book = ledger(snapshot(budget(), lease("l", owner="org:team", gpus=2)), at(hours=1))
    row = plain(envelope_row(book.envelopes[("team", "b", "west")]))
    status_keys = [k for k in API_FIELDS["Budget"] if k.startswith("status.envelopes[].")]
    entry = {k.split(".")[-1]: row.get(k.split(".")[-1]) for k in status_keys}
    entry["name"] = row["envelope"]
    assert value_problems({"status": {"envelopes": [entry]}}, schema("Budget"), "") == []


def test_the_status_checker_catches_a_pruned_key():
    patch = {"status": {"closed": "yes", "endedAt": "2025-11-01T00:00:00Z", "closureReason": "Evicted"}}
    assert value_problems(patch, schema("GPULease"), "") == [
        "status.closed: the code writes str, the schema says 'boolean'",
        "status.endedAt: written by the code, missing from the schema (pruned)",
        "status.closureReason: 'Evicted' is not in the schema's enum",
    ]


def test_the_plan_shapes_the_reconciler_writes_are_in_the_schema():
    """Run status.width and status.plan (reasons, remedies) and Reservation status.forecast.remedies, as the plan
    engine writes them."""
    plan = pytest.importorskip("kubectl_runs.engine.plan")
    width = plain(plan.Width(min=8, max=32, desired=24, allocated=16))
    reason = plain(plan.Reason(code="InsufficientBudget", message="short by 8 GPUs"))
    remedy = plain(plan.Remedy(kind="Shrink", target="team/r", gpus=8, message="shrink team/r by one step"))
    run_status = {"status": {"width": width, "plan": {
        "deficitGPUs": 8, "capacityDeficitGPUs": 0, "fundingDeficitGPUs": 8, "reasons": [reason], "remedies": [remedy],
    }}}
    assert value_problems(run_status, schema("Run"), "") == []
    forecast = {"status": {"forecast": {"deficitGPUs": 8, "confidence": "reported", "remedies": [remedy]}}}
    assert value_problems(forecast, schema("Reservation"), "") == []
