"""A snapshot is held to what the API server would have stored (issue 11, "Strictness the CRDs promise"):
integers are int64, our kinds are jobtree.dev/v1alpha1 (Nodes and Lists v1), a mapping key is given once, one
object is one copy, and a Node's GPU capacity is a Kubernetes quantity that is a whole, non-negative count.
Each refusal is one line naming the file, the object and the field; tests/unit/test_bad_input_corpus.py runs
the same classes through the installed command."""

from __future__ import annotations

import json

import pytest
import yaml

from kubectl_runs.model import gpu_count, parse_quantity
from kubectl_runs.sources.files import SnapshotError, load_snapshot

INT64_MAX = 2**63 - 1
WINDOW = {"start": "2025-11-01T00:00:00Z", "end": "2025-12-01T00:00:00Z"}


def budget(concurrency=8, api_version="jobtree.dev/v1alpha1", **envelope):
    doc = {"apiVersion": api_version, "kind": "Budget", "metadata": {"name": "b", "namespace": "team"},
           "spec": {"owner": "org:a", "envelopes": [{"name": "w", "flavor": "H", "concurrency": concurrency,
                                                      **WINDOW, **envelope}]}}
    if api_version is None:
        del doc["apiVersion"]
    return doc


def run(total=8, api_version="jobtree.dev/v1alpha1", **spec):
    return {"apiVersion": api_version, "kind": "Run", "metadata": {"name": "r", "namespace": "team"},
            "spec": {"resources": {"gpuType": "H", "totalGPUs": total}, **spec}}


def lease(group=0, api_version="jobtree.dev/v1alpha1"):
    return {"apiVersion": api_version, "kind": "GPULease", "metadata": {"name": "l", "namespace": "team"},
            "spec": {"owner": "org:a", "runRef": {"namespace": "team", "name": "r"}, "group": group, "flavor": "H",
                     "slice": {"slots": ["n#0"], "role": "Active"}, "start": "2025-11-01T00:00:00Z",
                     "reason": "Start"}}


def reservation(api_version="jobtree.dev/v1alpha1", deficit=0):
    return {"apiVersion": api_version, "kind": "Reservation", "metadata": {"name": "v", "namespace": "team"},
            "spec": {"runRef": {"namespace": "team", "name": "r"}, "scope": {"flavor": "H"},
                     "earliestStart": "2025-11-01T00:00:00Z"},
            "status": {"activation": {"deficitGPUs": deficit}}}


def node(gpus="8", api_version="v1", resource="nvidia.com/gpu"):
    return {"apiVersion": api_version, "kind": "Node", "metadata": {"name": "n"},
            "status": {"allocatable": {resource: gpus}}}


def write(tmp_path, doc, form, name="s"):
    path = tmp_path / f"{name}.{form}"
    if form == "json":
        path.write_text(json.dumps(doc))
    else:
        path.write_text(yaml.safe_dump(doc))
    return str(path)


def refused(tmp_path, doc, form="json") -> str:
    path = write(tmp_path, doc, form)
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([path])
    assert "\n" not in caught.value.message
    return caught.value.message.removeprefix(f"{path}: ")


# --- integers are int64 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["json", "yaml"])
@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (budget(concurrency=2**63), "Budget team/b: spec.envelopes[0].concurrency"),
        (budget(concurrency=10**30), "Budget team/b: spec.envelopes[0].concurrency"),
        (run(total=2**63), "Run team/r: spec.resources.totalGPUs"),
        (run(sparesPerGroup=2**64), "Run team/r: spec.sparesPerGroup"),
        (run(funding={"maxBorrowGPUs": 2**63}), "Run team/r: spec.funding.maxBorrowGPUs"),
        (lease(group=2**63), "GPULease team/l: spec.group"),
        (reservation(deficit=-(2**63) - 1), "Reservation team/v: status.activation.deficitGPUs"),
        (node(gpus=2**63), "Node n: status.allocatable[...]"),
    ],
    ids=["concurrency-2^63", "concurrency-10^30", "totalGPUs", "sparesPerGroup-2^64", "maxBorrowGPUs", "group",
         "deficit-below-int64", "node-allocatable"],
)
def test_integers_beyond_int64_are_refused_with_the_field_named(tmp_path, doc, where, form):
    message = refused(tmp_path, doc, form)
    assert message.startswith(f"{where}: expected int ")
    assert "int64" in message or ">=" in message


def test_int64_max_itself_is_an_integer_like_any_other(tmp_path):
    """The bound is the bound: maxBorrowGPUs 2**63 - 1 loads (nothing says it is a sensible number)."""
    [loaded] = load_snapshot([write(tmp_path, run(funding={"maxBorrowGPUs": INT64_MAX}), "json")]).runs
    assert loaded.spec.funding.max_borrow_gpus == INT64_MAX


@pytest.mark.parametrize(("text", "message"), [
    ("1.0e+30", "expected int, got float"),  # YAML 1.1 float
    # YAML 1.1 reads these as strings; the API server (go-yaml) and YAML 1.2 read them as floats, and so do we.
    ("1e30", "expected int, got float"),
    ("1E+9", "expected int, got float"),
    ("8e0", "expected int, got float"),
    ("-5e-1", "expected int, got float"),
])
def test_a_float_for_an_integer_is_refused_in_yaml(tmp_path, text, message):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(budget()).replace("concurrency: 8", f"concurrency: {text}"))
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([str(path)])
    assert caught.value.message == f"{path}: Budget team/b: spec.envelopes[0].concurrency: {message}"


# --- apiVersion ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["json", "yaml"])
@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (budget(api_version="jobtree.dev/v9"), "Budget team/b: apiVersion 'jobtree.dev/v9' is not jobtree.dev/v1alpha1"
         " (the version of Budget kubectl-runs reads)"),
        (run(api_version="jobtree.dev/v1"), "Run team/r: apiVersion 'jobtree.dev/v1' is not jobtree.dev/v1alpha1 "
         "(the version of Run kubectl-runs reads)"),
        (reservation(api_version="other.io/v1alpha1"), "Reservation team/v: apiVersion 'other.io/v1alpha1' is not "
         "jobtree.dev/v1alpha1 (the version of Reservation kubectl-runs reads)"),
        (lease(api_version="v1"), "GPULease team/l: apiVersion 'v1' is not jobtree.dev/v1alpha1 (the version of "
         "GPULease kubectl-runs reads)"),
        (node(api_version="v2"), "Node n: apiVersion 'v2' is not v1 (the version of Node kubectl-runs reads)"),
        ({"apiVersion": "v2", "kind": "List", "items": [budget()]}, "List: apiVersion 'v2' is not v1"),
        ({"apiVersion": "jobtree.dev/v1alpha1", "kind": "List", "items": []},
         "List: apiVersion 'jobtree.dev/v1alpha1' is not v1"),
        ({"apiVersion": "v1", "kind": "BudgetList", "items": [budget()]},
         "BudgetList: apiVersion 'v1' is not jobtree.dev/v1alpha1"),
    ],
    ids=["budget", "run", "reservation", "lease", "node", "list", "list-crd-version", "budget-list"],
)
def test_an_api_version_we_do_not_read_is_refused_naming_file_and_object(tmp_path, doc, expected, form):
    assert refused(tmp_path, doc, form) == expected


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_the_right_api_versions_and_none_at_all_are_read(tmp_path, form):
    """kubectl's List (v1), the API server's typed list (jobtree.dev/v1alpha1 BudgetList), and objects without
    apiVersion (hand-written files, or items of a built-in list) all load, and as the same records."""
    docs = [
        {"apiVersion": "v1", "kind": "List", "items": [budget(), run(), lease(), reservation(), node()]},
        {"apiVersion": "jobtree.dev/v1alpha1", "kind": "BudgetList", "items": [budget()]},
        budget(api_version=None),
    ]
    budgets = []
    for index, doc in enumerate(docs):
        snap = load_snapshot([write(tmp_path, doc, form, name=f"s{index}")])
        budgets.extend(snap.budgets)
    assert len(budgets) == 3 and budgets[0] == budgets[1] == budgets[2]


# --- duplicate keys --------------------------------------------------------------------------------------------


def test_a_duplicate_mapping_key_is_refused_naming_the_key_and_line(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(budget(), sort_keys=False).replace(
        "    concurrency: 8\n", "    concurrency: 8\n    concurrency: 64\n"))
    lines = path.read_text().splitlines()
    second = lines.index("    concurrency: 64") + 1
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([str(path)])
    assert caught.value.message == (f"{path}: not valid YAML at line {second}, column 5: duplicate key "
                                    f"'concurrency' (first given at line {second - 1})")


def test_duplicate_keys_in_metadata_and_at_the_top(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("apiVersion: jobtree.dev/v1alpha1\nkind: Run\nkind: Budget\nmetadata: {name: r}\n")
    with pytest.raises(SnapshotError, match=r"line 3, column 1: duplicate key 'kind' \(first given at line 2\)$"):
        load_snapshot([str(path)])
    path.write_text("kind: Run\nmetadata: {name: r, name: s}\n")
    with pytest.raises(SnapshotError, match=r"line 2, column 21: duplicate key 'name' \(first given at line 2\)$"):
        load_snapshot([str(path)])


def test_a_merge_key_may_be_overridden(tmp_path):
    """``<<: *anchor`` then an explicit key of the merged mapping is an override, not a duplicate."""
    path = tmp_path / "b.yaml"
    path.write_text(
        "defaults: &w {name: w, flavor: H, concurrency: 1, start: '2025-11-01T00:00:00Z', end: '2025-12-01T00:00:00Z'}\n"
        "apiVersion: jobtree.dev/v1alpha1\nkind: Budget\nmetadata: {name: b, namespace: team}\n"
        "spec:\n  owner: org:a\n  envelopes:\n  - <<: *w\n    concurrency: 4\n")
    [loaded] = load_snapshot([str(path)]).budgets
    assert loaded.spec.envelopes[0].concurrency == 4


# --- GPU capacity ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), ("0", 0), ("+8", 8), ("8k", 8000), ("1Ki", 1024), ("0.5Ki", 512), ("8e0", 8), ("80e-1", 8),
     ("1E3", 1000), ("2.0", 2), (".5k", 500), ("500m", None), ("1.5", None), ("-8", None), ("abc", None),
     ("8 ", None), ("", None), ("١", None), ("8Kb", None), ("1e999999999", None)],
)
def test_kubernetes_quantities(text, value):
    quantity = parse_quantity(text)
    if value is None:
        with pytest.raises(ValueError, match=r"is not a whole non-negative number of GPUs"):
            gpu_count(text)
    else:
        assert quantity == value
        assert gpu_count(text) == value


@pytest.mark.parametrize("form", ["json", "yaml"])
@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ("abc", "'abc' is not a whole non-negative number of GPUs"),
        ("-8", "'-8' is not a whole non-negative number of GPUs"),
        ("500m", "'500m' is not a whole non-negative number of GPUs"),
        (-1, "-1 is not a whole non-negative number of GPUs"),
        ("1Mi", "'1Mi' is 1,048,576 GPUs, more than one node can hold (kubectl-runs reads at most 65,536)"),
    ],
    ids=["abc", "negative", "milli", "negative-int", "implausible"],
)
def test_a_gpu_capacity_that_is_not_a_count_is_refused_naming_the_node(tmp_path, gpus, expected, form):
    for resource in ("nvidia.com/gpu", "amd.com/gpu"):
        assert refused(tmp_path, node(gpus=gpus, resource=resource), form) == (
            f"Node n: status: allocatable {resource}: {expected}")


@pytest.mark.parametrize(("gpus", "count"), [("8k", 8000), ("1Ki", 1024), ("8e0", 8), ("16", 16), (4, 4)])
def test_quantities_count_as_gpus(tmp_path, gpus, count):
    [loaded] = load_snapshot([write(tmp_path, node(gpus=gpus), "json")]).nodes
    assert loaded.gpus == count
    assert len(loaded.slots) == count


def test_other_resources_are_not_judged(tmp_path):
    """cpu: 95500m and memory: 1583020Mi are quantities of other resources: not GPU counts, not checked."""
    doc = node()
    doc["status"]["allocatable"].update({"cpu": "95500m", "memory": "1583020Mi", "example.com/foo": "x"})
    [loaded] = load_snapshot([write(tmp_path, doc, "yaml")]).nodes
    assert loaded.gpus == 8


def test_exponent_numbers_read_as_the_api_server_reads_them():
    """sigs.k8s.io/yaml's float grammar: an exponent without a dot or a sign is a float (YAML 1.1 said a
    string); integers, strings that only look close, and 1.1's other forms are unchanged."""
    from kubectl_runs.sources.strict_yaml import StrictLoader

    def read(text):
        return yaml.load(f"v: {text}", Loader=StrictLoader)["v"]

    assert [read(t) for t in ("1e30", "1E+9", "5e-1", "-1e3", ".5e1")] == [1e30, 1e9, 0.5, -1000.0, 5.0]
    assert [read(t) for t in ("8", "1_000", "1.5", "1.0e+30")] == [8, 1000, 1.5, 1e30]
    assert [read(t) for t in ("1e", "e5", "1.2.3", "1e3x", "'1e30'")] == ["1e", "e5", "1.2.3", "1e3x", "1e30"]
    assert yaml.safe_load("v: 1e30") == {"v": "1e30"}  # PyYAML's own loaders are left as they are
