"""What the API server would refuse, a snapshot refuses too (issue #28): every bound the CRDs put on a field
the model reads — maxLength, minLength, maxItems, minItems, minimum, maximum — is the model's own bound on it
(msgspec.Meta), so a file is held to the schema the API server holds an object to. Walked from the CRDs: a bound
added to crds/*.yaml (then `scripts/sync-chart`) fails here until kubectl_runs/model.py carries it."""

from __future__ import annotations

from typing import Any

import msgspec.inspect as mi
import pytest
from test_crd_schema import KINDS, schema

from kubectl_runs import model

_BOUNDS = {"maxLength": "max_length", "minLength": "min_length", "maxItems": "max_length", "minItems": "min_length",
           "minimum": "ge", "maximum": "le"}


def _meta(t: mi.Type) -> tuple[mi.Type, dict[str, Any]]:
    found: dict[str, Any] = {}
    while isinstance(t, mi.Metadata):
        found.update(t.extra_json_schema or {})
        t = t.type
    return t, found


def _constraints(t: mi.Type) -> dict[str, Any]:
    found = {k: getattr(t, k) for k in ("max_length", "min_length", "ge", "le", "gt")
             if getattr(t, k, None) is not None}
    if isinstance(found.get("gt"), int):  # an integer > 0 is an integer >= 1
        found["ge"] = found.pop("gt") + 1
    return found


def bound_problems(t: mi.Type, node: dict[str, Any], path: str) -> list[str]:
    if isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        return [p for member in t.types if not isinstance(member, mi.NoneType)
                for p in bound_problems(member, node, path)]
    problems = []
    want = {_BOUNDS[k]: v for k, v in node.items() if k in _BOUNDS}
    if "ge" in want and want["ge"] == model.INT64_MIN:
        del want["ge"]
    have = _constraints(t)
    if node.get("format") == "int64":  # every integer is an int64 (model.Int64): the schema need not say so
        have = {k: v for k, v in have.items() if not (k == "le" and v == model.INT64_MAX and "le" not in want)}
        have = {k: v for k, v in have.items() if not (k == "ge" and v == model.INT64_MIN)}
    if want != have:
        problems.append(f"{path}: the CRD bounds it by {want}, the model by {have}")
    if isinstance(t, mi.StructType):
        for f in t.fields:
            if path == "" and f.encode_name == "metadata":
                continue
            sub = node.get("properties", {}).get(f.encode_name)
            if sub is not None:
                problems += bound_problems(f.type, sub, f"{path}.{f.encode_name}" if path else f.encode_name)
    elif isinstance(t, (mi.ListType, mi.VarTupleType)) and "items" in node:
        problems += bound_problems(t.item_type, node["items"], f"{path}[]")
    elif isinstance(t, mi.DictType) and isinstance(node.get("additionalProperties"), dict):
        problems += bound_problems(t.value_type, node["additionalProperties"], f"{path}{{}}")
    return problems


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_model_bounds_every_field_as_the_crd_does(kind):
    assert bound_problems(mi.type_info(model.KINDS[kind]), schema(kind), "") == []


def test_the_walk_sees_a_bound_the_model_lacks():
    node = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "owner": {"type": "string", "maxLength": 7}}}}}
    t = mi.type_info(model.GPULease)
    assert any("spec.owner" in p for p in bound_problems(t, node, ""))


# --- files held to it ------------------------------------------------------------------------------------------

LEASE = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease", "metadata": {"name": "l", "namespace": "team"},
         "spec": {"owner": "org:a", "runRef": {"namespace": "team", "name": "r"}, "group": 0, "flavor": "H",
                  "slice": {"slots": ["n#0", "n#1"], "role": "Active"}, "start": "2025-11-01T00:00:00Z",
                  "reason": "Start"}}
BUDGET = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "b", "namespace": "team"},
          "spec": {"owner": "org:a", "envelopes": [{"name": "w", "flavor": "H", "concurrency": 1,
                                                    "start": "2025-11-01T00:00:00Z", "end": "2025-12-01T00:00:00Z"}]}}
RESERVATION = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Reservation",
               "metadata": {"name": "v", "namespace": "team"},
               "spec": {"runRef": {"namespace": "team", "name": "r"}, "scope": {"flavor": "H"},
                        "earliestStart": "2025-11-01T00:00:00Z"}}


def _with(obj: dict, path: str, value: Any) -> dict:
    import copy

    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node[part][0] if part == "envelopes" else node[part]
    node[last] = value
    return out


@pytest.mark.parametrize(("obj", "path", "value", "expected"), [
    (LEASE, "spec.slice.slots", ["n#0"] * 5_000, "GPULease team/l: spec.slice.slots: expected array of length "
                                                     "<= 4096"),
    (LEASE, "spec.slice.slots", ["n#0", "n#1", "n#0"], "GPULease team/l: spec.slice.slots: 'n#0' is given 2 times: "
                                                       "each slot once"),
    (LEASE, "spec.slice.slots", ["n#1"] * 4096, "spec.slice.slots: 'n#1' is given 4,096 times"),
    (LEASE, "spec.owner", "a" * 100_000, "GPULease team/l: spec.owner: expected str of length <= 253"),
    (LEASE, "spec.owner", "", "GPULease team/l: spec.owner: expected str of length >= 1"),
    (LEASE, "spec.flavor", "F" * 64, "GPULease team/l: spec.flavor: expected str of length <= 63"),
    (LEASE, "spec.slice.slots", ["n" * 300 + "#0"], "spec.slice.slots[0]: expected str of length <= 264"),
    (LEASE, "spec.runRef", {"namespace": "", "name": "r"}, "spec.runRef.namespace: expected str of length >= 1"),
    (LEASE, "spec.paidBy", {"budget": "b" * 254, "envelope": "w"}, "spec.paidBy.budget: expected str of length <= 253"),
    (LEASE, "spec.start", "0001-01-01T00:00:00Z", "GPULease team/l: spec.start: 0001-01-01T00:00:00+00:00 is out of "
                                                  "range: a time between 1970 and 9000"),
    (LEASE, "spec.start", "9999-12-31T23:59:59Z", "spec.start: 9999-12-31T23:59:59+00:00 is out of range"),
    (BUDGET, "spec.envelopes.start", "0001-01-01T00:00:00Z", "Budget team/b: spec.envelopes[0]: envelope w: start: "
                                                             "0001-01-01T00:00:00+00:00 is out of range"),
    (BUDGET, "spec.envelopes.end", "9999-01-01T00:00:00Z", "envelope w: end: 9999-01-01T00:00:00+00:00 is out of range"),
    (BUDGET, "spec.envelopes.flavor", "x" * 100, "spec.envelopes[0].flavor: expected str of length <= 63"),
    (BUDGET, "spec.envelopes.selector", {"region": "r" * 64}, "spec.envelopes[0].selector[...]: expected str of length "
                                                              "<= 63"),
    (BUDGET, "spec.envelopes.concurrency", 0, "spec.envelopes[0].concurrency: expected int >= 1"),
    (RESERVATION, "spec.earliestStart", "0001-01-01T00:00:00Z", "Reservation team/v: spec: earliestStart: "
                                                                "0001-01-01T00:00:00+00:00 is out of range"),
])
@pytest.mark.parametrize("form", ["json", "yaml", "lean-json"])
def test_a_file_is_refused_what_the_api_server_refuses(tmp_path, obj, path, value, expected, form):
    import json

    import yaml

    from kubectl_runs.sources.files import SnapshotError, load_snapshot

    document = {"apiVersion": "v1", "kind": "List", "items": [_with(obj, path, value)]}
    file = tmp_path / ("fleet.yaml" if form == "yaml" else "fleet.json")
    file.write_text(yaml.safe_dump(document) if form == "yaml" else json.dumps(document))
    with pytest.raises(SnapshotError) as refused:
        load_snapshot([str(file)], lean=form == "lean-json")
    assert refused.value.message.startswith(f"{file}: "), refused.value.message
    assert expected in refused.value.message
    assert len(refused.value.message) < 400


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("spec.slice.slots", ["n#0"] * 1_000_000, "spec.slice.slots: expected array of length <= 4096"),
    ("spec.owner", "a" * 50_000_000, "spec.owner: expected str of length <= 253"),
])
def test_the_named_cases_through_the_command(tmp_path, path, value, expected):
    """Issue #28's own: 1,000,000 repeated slots were 1,000,000 GPUs; a 50 MB owner was read."""
    import json
    import subprocess
    import sys

    file = tmp_path / "fleet.json"
    file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [_with(LEASE, path, value)]}))
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "leases", "audit", "--snapshot", str(file)],
                          capture_output=True, timeout=120)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"error: {file}: GPULease team/l: {expected}\n"
