"""Snapshots from files (API.md §2): every form they come in, and every way they can be wrong.

Good input: one file, a directory, several ``--snapshot`` paths, stdin; YAML multi-document, JSON, ``List``
objects, and exactly what ``kubectl get nodes,budgets,runs,reservations,gpuleases -A -o yaml`` prints. Bad input:
each yields one line on stderr naming the file, the object and the field path, exit code 1, no traceback.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from datetime import UTC, datetime

import pytest
import yaml
from builders import budget, envelope, lease, node, run, to_manifest

from kubectl_runs.cli.main import main
from kubectl_runs.sources.files import SnapshotError, load_snapshot

# Exactly the shape kubectl prints for `kubectl get nodes,budgets,runs,reservations,gpuleases -A -o yaml`: a
# v1 List whose items carry apiVersion/kind and server-filled metadata (managedFields, uid, resourceVersion),
# node status the plugin does not read, and Budget status written by the reconciler.
KUBECTL_GET_YAML = """\
apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      node.alpha.kubernetes.io/ttl: "0"
      volumes.kubernetes.io/controller-managed-attach-detach: "true"
    creationTimestamp: "2025-10-01T00:00:00Z"
    labels:
      beta.kubernetes.io/arch: amd64
      fabric.domain: nv-a
      gpu.flavor: H100-80GB
      kubernetes.io/hostname: gpu-a-01
      region: us-west
    name: gpu-a-01
    resourceVersion: "48213"
    uid: 5d7e4f0e-0a51-4c57-9a1f-0c7b8a9d2b11
  spec:
    podCIDR: 10.244.1.0/24
    podCIDRs:
    - 10.244.1.0/24
    taints:
    - effect: NoSchedule
      key: nvidia.com/gpu
      value: present
  status:
    addresses:
    - address: 10.0.0.11
      type: InternalIP
    allocatable:
      cpu: 95500m
      ephemeral-storage: "1798792446736"
      hugepages-1Gi: "0"
      memory: 1583020Mi
      nvidia.com/gpu: "8"
      pods: "110"
    capacity:
      cpu: "96"
      nvidia.com/gpu: "8"
    conditions:
    - lastHeartbeatTime: "2025-11-20T11:59:30Z"
      lastTransitionTime: "2025-10-01T00:01:00Z"
      message: kubelet is posting ready status
      reason: KubeletReady
      status: "True"
      type: Ready
    nodeInfo:
      architecture: amd64
      kubeletVersion: v1.31.2
- apiVersion: v1
  kind: Node
  metadata:
    creationTimestamp: "2025-10-01T00:00:00Z"
    labels:
      fabric.domain: rocm-c
      gpu.flavor: MI300X
      region: us-east
    name: amd-c-01
    resourceVersion: "48214"
    uid: 1b3e1c2a-39a4-4f43-8d0e-5c1d8e7f6a20
  spec:
    taints:
    - effect: NoExecute
      key: node.kubernetes.io/out-of-service
      timeAdded: "2025-11-19T00:00:00Z"
      value: nodeshutdown
    unschedulable: true
  status:
    allocatable:
      amd.com/gpu: "8"
      cpu: "96"
- apiVersion: jobtree.dev/v1alpha1
  kind: Budget
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"jobtree.dev/v1alpha1","kind":"Budget","metadata":{"name":"rai","namespace":"rai-sys"}}
    creationTimestamp: "2025-10-30T09:00:00Z"
    generation: 3
    managedFields:
    - apiVersion: jobtree.dev/v1alpha1
      fieldsType: FieldsV1
      fieldsV1:
        f:spec:
          .: {}
          f:envelopes: {}
          f:owner: {}
      manager: kubectl-client-side-apply
      operation: Update
      time: "2025-10-30T09:00:00Z"
    name: rai
    namespace: rai-sys
    resourceVersion: "47001"
    uid: 8f0c7e62-3c1c-4b0b-9f3e-1a2b3c4d5e6f
  spec:
    envelopes:
    - concurrency: 16
      end: "2025-12-01T00:00:00Z"
      flavor: H100-80GB
      maxGPUHours: 10000
      name: west-h100
      selector:
        region: us-west
      start: "2025-11-01T00:00:00Z"
    owner: org:ai:rai:sys
  status:
    envelopes:
    - borrowedGPUs: 0
      concurrency: 16
      consumedGPUHours: 3456.5
      flavor: H100-80GB
      headroomGPUs: 8
      name: west-h100
      usedGPUs: 8
    observedGeneration: 3
    updatedAt: "2025-11-20T11:59:00Z"
- apiVersion: jobtree.dev/v1alpha1
  kind: Run
  metadata:
    creationTimestamp: "2025-11-18T08:00:00Z"
    generation: 1
    name: train-8
    namespace: rai-sys
    resourceVersion: "47100"
    uid: 0e6a6d1e-2f7a-4c3b-8d9e-f0a1b2c3d4e5
  spec:
    locality:
      allowCrossGroupSpread: true
      groupGPUs: 8
    resources:
      gpuType: H100-80GB
      totalGPUs: 8
  status:
    phase: Running
    width:
      allocated: 8
- apiVersion: jobtree.dev/v1alpha1
  kind: Reservation
  metadata:
    creationTimestamp: "2025-11-20T09:00:00Z"
    name: big-r1
    namespace: rai-sys
    resourceVersion: "47200"
    uid: 7c6b5a49-3827-4615-a4b3-c2d1e0f9a8b7
  spec:
    earliestStart: "2025-11-22T00:00:00Z"
    payingEnvelope:
      budget: rai
      envelope: west-h100
    runRef:
      name: big
      namespace: rai-sys
    scope:
      flavor: H100-80GB
  status:
    countdownSeconds: 129600
    state: Pending
- apiVersion: jobtree.dev/v1alpha1
  kind: GPULease
  metadata:
    creationTimestamp: "2025-11-18T08:00:00Z"
    generation: 1
    name: train-8-g0
    namespace: rai-sys
    resourceVersion: "47101"
    uid: 4a3b2c1d-0e9f-48a7-b6c5-d4e3f2a1b0c9
  spec:
    flavor: H100-80GB
    group: 0
    owner: org:ai:rai:sys
    paidBy:
      budget: rai
      envelope: west-h100
      namespace: rai-sys
    reason: Start
    runRef:
      name: train-8
      namespace: rai-sys
    slice:
      role: Active
      slots:
      - gpu-a-01#0
      - gpu-a-01#1
      - gpu-a-01#2
      - gpu-a-01#3
      - gpu-a-01#4
      - gpu-a-01#5
      - gpu-a-01#6
      - gpu-a-01#7
    start: "2025-11-18T08:00:00Z"
  status:
    closed: false
kind: List
metadata:
  resourceVersion: ""
"""


def _write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def _counts(snap) -> dict[str, int]:
    return {
        "nodes": len(snap.nodes),
        "budgets": len(snap.budgets),
        "runs": len(snap.runs),
        "reservations": len(snap.reservations),
        "leases": len(snap.leases),
    }


def _yaml_stream(*objects) -> str:
    return yaml.safe_dump_all([to_manifest(o) for o in objects], sort_keys=False)


FLEET = (
    node("n1"),
    budget("b", "team", owner="org:team"),
    run("r1", "team"),
    lease("r1-g0", "team", owner="org:team", gpus=2, run_name="r1", node_name="n1"),
)


# --- the forms a snapshot comes in -------------------------------------------------------------------------------


def test_exactly_what_kubectl_get_prints(tmp_path):
    """kubectl's List: 2 nodes, a Budget, a Run, a Reservation and a GPULease; the unread fields are skipped, the
    vendor GPU counts are read from status.allocatable (nvidia.com/gpu 8, amd.com/gpu 8), the out-of-service
    AMD node holds no usable slots, and the lease is the 8 slots of gpu-a-01."""
    snap = load_snapshot([_write(tmp_path, "cluster.yaml", KUBECTL_GET_YAML)])
    assert _counts(snap) == {"nodes": 2, "budgets": 1, "runs": 1, "reservations": 1, "leases": 1}
    nodes = snap.nodes_by_name
    assert (nodes["gpu-a-01"].gpus, nodes["gpu-a-01"].flavor, nodes["gpu-a-01"].domain) == (8, "H100-80GB", "nv-a")
    assert (nodes["amd-c-01"].gpus, nodes["amd-c-01"].slots, nodes["amd-c-01"].schedulable) == (8, (), False)
    [bud] = snap.budgets
    assert (bud.key, bud.spec.owner, bud.spec.envelopes[0].max_gpu_hours) == ("rai-sys/rai", "org:ai:rai:sys", 10000)
    [gl] = snap.leases
    assert (gl.key, gl.gpus, gl.payer) == ("rai-sys/train-8-g0", 8, ("rai-sys", "rai", "west-h100"))
    assert snap.notes == ()
    assert snap.taken_at is None


def test_the_same_list_as_kubectl_json(tmp_path):
    """``kubectl get … -o json`` of the same objects loads to the same snapshot."""
    as_yaml = load_snapshot([_write(tmp_path, "a.yaml", KUBECTL_GET_YAML)])
    document = yaml.safe_load(KUBECTL_GET_YAML)
    as_json = load_snapshot([_write(tmp_path, "a.json", json.dumps(document, indent=4))])
    assert as_json == as_yaml


def test_a_multi_document_yaml_stream(tmp_path):
    """Four documents (and an empty one, which is skipped) load as 1 node, 1 budget, 1 run, 1 lease."""
    text = "---\n" + _yaml_stream(*FLEET) + "---\n"
    snap = load_snapshot([_write(tmp_path, "fleet.yaml", text)])
    assert _counts(snap) == {"nodes": 1, "budgets": 1, "runs": 1, "reservations": 0, "leases": 1}
    assert snap.budgets[0] == FLEET[1]
    assert snap.leases[0] == FLEET[3]


@pytest.mark.parametrize(
    "shape",
    ["list", "array", "single-object", "typed-list-with-unknown-kind", "nested-list"],
)
def test_json_shapes(tmp_path, shape):
    """JSON as a ``List``, a bare array, one object, a List with a kind we do not read (skipped with a note), and
    a List inside a List: each gives back the same objects."""
    manifests = [to_manifest(o) for o in FLEET]
    if shape == "list":
        documents = {"apiVersion": "v1", "kind": "List", "items": manifests}
    elif shape == "array":
        documents = manifests
    elif shape == "single-object":
        documents = manifests[1]
    elif shape == "typed-list-with-unknown-kind":
        documents = {"kind": "List", "items": [*manifests, {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"name": "cm", "namespace": "team"}}]}
    else:
        documents = {"kind": "List", "items": [{"kind": "BudgetList", "items": [manifests[1]]}, *manifests[2:]]}
    path = _write(tmp_path, "fleet.json", json.dumps(documents))
    snap = load_snapshot([path])
    if shape == "single-object":
        assert snap.budgets == (FLEET[1],) and _counts(snap)["leases"] == 0
        return
    assert snap.budgets == (FLEET[1],)
    assert snap.leases == (FLEET[3],)
    if shape == "typed-list-with-unknown-kind":
        assert snap.notes == (
            f"ignored 1 object(s) of kind ConfigMap in {path}: kubectl-runs reads Node, Budget, Run, Reservation, "
            "GPULease",
        )


def test_a_directory_is_read_recursively_and_only_snapshot_suffixes(tmp_path):
    """A directory with nodes.yaml, sub/budgets.yml, sub/deeper/leases.json and a README.md: the three snapshot
    files are read (in path order), the README is not."""
    _write(tmp_path, "dir/nodes.yaml", _yaml_stream(FLEET[0]))
    _write(tmp_path, "dir/sub/budgets.yml", _yaml_stream(FLEET[1]))
    _write(tmp_path, "dir/sub/deeper/leases.json", json.dumps({"kind": "List", "items": [to_manifest(FLEET[3])]}))
    _write(tmp_path, "dir/README.md", "# not a snapshot: {{{")
    snap = load_snapshot([str(tmp_path / "dir")])
    assert _counts(snap) == {"nodes": 1, "budgets": 1, "runs": 0, "reservations": 0, "leases": 1}


def test_several_paths_merge_and_two_different_copies_of_an_object_are_refused(tmp_path):
    """Two --snapshot files both hold team/b with different content (concurrency 8 and 16): refused, naming
    both files — a snapshot holds what the API server would have stored, one copy of each object."""
    first = _write(tmp_path, "one.yaml", _yaml_stream(FLEET[0], FLEET[1]))
    newer = budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=16)])
    second = _write(tmp_path, "two.yaml", _yaml_stream(newer, FLEET[3]))
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([first, second])
    assert caught.value.message == (
        f"{second}: Budget team/b is also in {first} with different content: a snapshot holds one copy of each "
        "object (remove the copy that is wrong)")


def test_several_paths_merge_and_identical_copies_are_read_once_with_a_note(tmp_path):
    """The same file given twice, and a second file repeating one object exactly: one copy of each, one note per
    pair of files."""
    first = _write(tmp_path, "one.yaml", _yaml_stream(FLEET[0], FLEET[1]))
    second = _write(tmp_path, "two.json", json.dumps({"kind": "List", "items": [to_manifest(FLEET[1]),
                                                                                 to_manifest(FLEET[3])]}))
    snap = load_snapshot([first, first, second])
    assert _counts(snap) == {"nodes": 1, "budgets": 1, "runs": 0, "reservations": 0, "leases": 1}
    assert snap.budgets == (FLEET[1],)
    assert sorted(snap.notes) == [
        f"1 object(s) given more than once in {first} and {second} with the same content: read once",
        f"2 object(s) given more than once in {first} with the same content: read once",
    ]


def test_objects_out_of_order_are_sorted_by_namespace_and_name(tmp_path):
    """Leases of a file out of order, with no copies (the sort alone decides) and with an identical copy of one
    of them (the copies are compared): both read in (namespace, name) order, one copy of each."""
    made = [lease(name, namespace) for namespace, name in
            [("b", "l-2"), ("a", "l-9"), ("b", "l-1"), ("a", "l-10"), ("c", "l-0"), ("a", "l-1")]]
    expected = tuple(sorted(made, key=lambda x: (x.metadata.namespace, x.metadata.name)))
    items = [to_manifest(x) for x in made]
    alone = _write(tmp_path, "alone.json", json.dumps({"kind": "List", "items": items}))
    assert load_snapshot([alone]).leases == expected
    copied = _write(tmp_path, "copied.json", json.dumps({"kind": "List", "items": [*items, items[2]]}))
    snap = load_snapshot([copied])
    assert snap.leases == expected
    assert snap.notes == (f"1 object(s) given more than once in {copied} with the same content: read once",)


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_stdin(form):
    """``-`` reads stdin, YAML or JSON."""
    manifests = [to_manifest(o) for o in FLEET]
    data = (yaml.safe_dump_all(manifests) if form == "yaml" else json.dumps({"kind": "List", "items": manifests}))
    snap = load_snapshot(["-"], io.BytesIO(data.encode()))
    assert _counts(snap) == {"nodes": 1, "budgets": 1, "runs": 1, "reservations": 0, "leases": 1}


def test_an_empty_file_is_an_empty_snapshot(tmp_path):
    snap = load_snapshot([_write(tmp_path, "empty.yaml", "")])
    assert _counts(snap) == {"nodes": 0, "budgets": 0, "runs": 0, "reservations": 0, "leases": 0}


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_the_snapshot_stamp_is_the_latest_stamp_of_any_file(tmp_path, form):
    """Two Lists stamped 2025-11-20T12:00:00Z and 2025-11-20T13:30:00Z: the snapshot's time is the later one."""
    paths = []
    for index, stamp in enumerate(["2025-11-20T12:00:00Z", "2025-11-20T13:30:00Z"]):
        doc = {"apiVersion": "v1", "kind": "List", "metadata": {"annotations": {"jobtree.dev/snapshot-time": stamp}},
               "items": [to_manifest(FLEET[index])]}
        text = yaml.safe_dump(doc) if form == "yaml" else json.dumps(doc)
        paths.append(_write(tmp_path, f"s{index}.{form}", text))
    snap = load_snapshot(paths)
    assert snap.taken_at == datetime(2025, 11, 20, 13, 30, tzinfo=UTC)


def test_objects_of_other_kinds_are_ignored_with_one_note_per_kind(tmp_path):
    """Two ConfigMaps and a coordination.k8s.io Lease next to a Budget, one more ConfigMap in a second file: the
    Budget loads; one note per kind, naming the files the objects were in."""
    text = _yaml_stream(FLEET[1]) + "---\n" + "\n---\n".join(
        [
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: leader}\n",
        ]
    )
    mixed = _write(tmp_path, "mixed.yaml", text)
    other = _write(tmp_path, "other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    snap = load_snapshot([mixed, other])
    assert snap.budgets == (FLEET[1],)
    assert snap.notes == (
        f"ignored 3 object(s) of kind ConfigMap in {mixed}, {other}: kubectl-runs reads Node, Budget, Run, "
        "Reservation, GPULease",
        f"ignored 1 object(s) of kind Lease in {mixed}: kubectl-runs reads Node, Budget, Run, Reservation, GPULease",
    )


@pytest.mark.parametrize(
    ("allocatable", "gpus"),
    [
        ({"nvidia.com/gpu": "8"}, 8),
        ({"amd.com/gpu": "4"}, 4),
        ({"nvidia.com/gpu": 2}, 2),
        ({"nvidia.com/gpu": "4", "amd.com/gpu": "4"}, 8),
        ({"cpu": "96"}, 0),
    ],
    ids=["nvidia", "amd", "integer", "both-vendors", "no-gpus"],
)
def test_nodes_count_gpus_of_both_vendors(tmp_path, allocatable, gpus):
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                           "status": {"allocatable": allocatable}})
    [loaded] = load_snapshot([_write(tmp_path, "n.yaml", text)]).nodes
    assert loaded.gpus == gpus
    assert loaded.slots == tuple(f"n#{i}" for i in range(gpus))


def test_unquoted_yaml_timestamps_are_times(tmp_path):
    """Hand-written YAML may leave RFC 3339 times unquoted (YAML reads them as timestamps): same object."""
    quoted = _yaml_stream(FLEET[1])
    unquoted = quoted.replace("'2025-11-01T00:00:00Z'", "2025-11-01T00:00:00Z").replace(
        "'2025-12-01T00:00:00Z'", "2025-12-01T00:00:00Z")
    assert unquoted != quoted
    snap = load_snapshot([_write(tmp_path, "b.yaml", unquoted)])
    assert snap.budgets == (FLEET[1],)


# --- bad input ------------------------------------------------------------------------------------------------------

BUDGET_HEAD = "apiVersion: jobtree.dev/v1alpha1\nkind: Budget\nmetadata: {name: b, namespace: team}\n"
WINDOW = 'start: "2025-11-01T00:00:00Z", end: "2025-12-01T00:00:00Z"'


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("broken.yaml", BUDGET_HEAD + "spec: {owner: org:a\n",
         "broken.yaml: not valid YAML at line 5, column 1: did not find expected ',' or '}'"),
        ("broken.json", '{"kind": "List", "items": [',
         "broken.json: not valid JSON: Input data was truncated"),
        ("missing.yaml", BUDGET_HEAD + f"spec:\n  envelopes:\n  - {{name: w, flavor: H, concurrency: 1, {WINDOW}}}\n",
         "missing.yaml: Budget team/b: spec.owner: required field is missing"),
        ("missing.json", json.dumps({"kind": "GPULease", "metadata": {"name": "l", "namespace": "team"},
                                     "spec": {"owner": "o", "runRef": {"namespace": "team", "name": "r"},
                                              "group": 0, "flavor": "H", "start": "2025-11-01T00:00:00Z",
                                              "reason": "Start"}}),
         "missing.json: GPULease team/l: spec.slice: required field is missing"),
        ("zero.yaml", BUDGET_HEAD + f"spec:\n  owner: org:a\n  envelopes:\n  - {{name: w, flavor: H, concurrency: 1, "
         f"{WINDOW}}}\n  - {{name: e, flavor: H, concurrency: 0, {WINDOW}}}\n",
         "zero.yaml: Budget team/b: spec.envelopes[1].concurrency: expected int >= 1"),
        ("type.json", json.dumps({"kind": "List", "items": [to_manifest(FLEET[0]), {
            "kind": "Budget", "metadata": {"name": "b", "namespace": "team"},
            "spec": {"owner": "o", "envelopes": [{"name": "w", "flavor": "H", "concurrency": "lots",
                                                  "start": "2025-11-01T00:00:00Z", "end": "2025-12-01T00:00:00Z"}]}}]}),
         "type.json: Budget team/b: spec.envelopes[0].concurrency: expected int, got str"),
        ("time.yaml", BUDGET_HEAD + 'spec:\n  owner: org:a\n  envelopes:\n  - {name: w, flavor: H, concurrency: 1, '
         'start: "last tuesday", end: "2025-12-01T00:00:00Z"}\n',
         "time.yaml: Budget team/b: spec.envelopes[0].start: invalid RFC3339 encoded datetime"),
        ("role.yaml", _yaml_stream(FLEET[3]).replace("role: Active", "role: Hot"),
         "role.yaml: GPULease team/r1-g0: spec.slice.role: invalid enum value 'Hot'"),
        ("unnamed.yaml", "kind: Run\nmetadata: {namespace: team}\nspec: {resources: {gpuType: H, totalGPUs: 1}}\n",
         "unnamed.yaml: Run <unnamed>: metadata.name: required field is missing"),
        ("node.json", json.dumps({"kind": "Node", "metadata": {"name": "n1", "labels": {"a": 1}}}),
         "node.json: Node n1: metadata.labels[...]: expected str, got int"),
        ("scalar.yaml", "- just\n- a list\n",
         "scalar.yaml: document 1: not a Kubernetes object (a mapping with kind and metadata)"),
        ("stamp.yaml", "kind: List\nmetadata: {annotations: {jobtree.dev/snapshot-time: soon}}\nitems: []\n",
         "stamp.yaml: annotation jobtree.dev/snapshot-time: 'soon' is not an RFC 3339 time"),
    ],
    ids=["malformed-yaml", "malformed-json", "missing-field-yaml", "missing-field-json", "bad-value",
         "wrong-type-in-list", "bad-time", "bad-enum", "unnamed", "node-label-type", "not-an-object",
         "bad-stamp"],
)
def test_bad_manifests_say_file_object_and_field_path(tmp_path, monkeypatch, capsys, name, text, message):
    """The loader raises one line naming file, object and field path; through the CLI that is ``error: …`` on
    stderr, nothing on stdout, exit code 1, no traceback."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, name, text)
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([name])
    assert caught.value.message == message
    code = main(["budgets", "usage", "--snapshot", name, "--at", "2025-11-02T00:00:00Z"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (1, "", f"error: {message}\n")


@pytest.mark.parametrize(
    ("setup", "path", "message"),
    [
        (None, "nowhere.yaml", "nowhere.yaml: no such file or directory"),
        ("file", "plain.yaml/inside.yaml", "plain.yaml/inside.yaml: cannot read: Not a directory"),
        ("empty-dir", "emptydir", "emptydir: no .json, .yaml or .yml files in this directory"),
    ],
    ids=["missing", "not-a-directory", "directory-without-snapshots"],
)
def test_unreadable_paths(tmp_path, monkeypatch, capsys, setup, path, message):
    monkeypatch.chdir(tmp_path)
    if setup == "file":
        _write(tmp_path, "plain.yaml", "")
    elif setup == "empty-dir":
        (tmp_path / "emptydir").mkdir()
        _write(tmp_path, "emptydir/notes.txt", "hello")
    code = main(["budgets", "usage", "--snapshot", path])
    out, err = capsys.readouterr()
    assert (code, out, err) == (1, "", f"error: {message}\n")


def test_an_unknown_kind_is_a_note_on_stderr_not_an_error(tmp_path, monkeypatch, capsys):
    """A file with one ConfigMap and one Budget: exit 0, the note on stderr, the Budget's row on stdout (JSON)."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "x.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n---\n" + _yaml_stream(FLEET[1]))
    code = main(["budgets", "usage", "--snapshot", "x.yaml", "--at", "2025-11-02T00:00:00Z", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert err == (
        "note: ignored 1 object(s) of kind ConfigMap in x.yaml: kubectl-runs reads Node, Budget, Run, Reservation, "
        "GPULease\n"
    )
    assert [e["budget"] for e in json.loads(out)["envelopes"]] == ["b"]


def test_stdin_through_the_cli(monkeypatch, capsys):
    """``--snapshot -`` reads standard input."""
    data = json.dumps({"kind": "List", "items": [to_manifest(o) for o in FLEET]}).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code = main(["budgets", "usage", "--snapshot", "-", "--at", "2025-11-02T00:00:00Z", "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    [row] = json.loads(out)["envelopes"]
    assert (row["usedGPUs"], row["consumedGPUHours"]) == (2, 48.0)



_WINDOW = {"flavor": "H100", "concurrency": 2, "start": "2025-11-01T00:00:00Z", "end": "2025-11-02T00:00:00Z"}


@pytest.mark.parametrize(
    ("envelopes", "message"),
    [
        ([{**_WINDOW, "name": "e", "start": "2025-11-02T00:00:00Z", "end": "2025-11-01T00:00:00Z"}],
         "spec.envelopes[0]: envelope e: end must be after start"),
        ([{**_WINDOW, "name": "e", "maxGPUHours": 49}],  # 2 GPUs × 24 h = 48 GPU-hours at most
         "spec.envelopes[0]: envelope e: maxGPUHours 49 is more than concurrency × window (2 × 24 h)"),
        ([{**_WINDOW, "name": "e"}, {**_WINDOW, "name": "e"}],
         "spec: envelope names must be unique within a Budget: e given twice"),
    ],
    ids=["end-before-start", "cap-above-window", "duplicate-names"],
)
@pytest.mark.parametrize("form", ["yaml", "json"])
def test_the_crd_rules_hold_for_snapshots_too(tmp_path, envelopes, message, form):
    """What the API server's CEL rules refuse, a snapshot file may not smuggle in: one line, exit 1."""
    doc = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "b", "namespace": "ns"},
           "spec": {"owner": "org:a", "envelopes": envelopes}}
    path = tmp_path / f"b.{form}"
    path.write_text(yaml.safe_dump(doc) if form == "yaml" else json.dumps({"kind": "List", "items": [doc]}))
    with pytest.raises(SnapshotError) as caught:
        load_snapshot([str(path)])
    assert str(caught.value) == f"{path}: Budget ns/b: {message}"


def test_a_quoted_number_is_refused_in_yaml_as_in_json(tmp_path):
    """``concurrency: "8"`` is a string: the API server's schema refuses it, and so do we, in either form."""
    doc = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "b", "namespace": "ns"},
           "spec": {"owner": "org:a", "envelopes": [{**_WINDOW, "name": "e", "concurrency": "8"}]}}
    for path, text in ((tmp_path / "b.yaml", yaml.safe_dump(doc)), (tmp_path / "b.json", json.dumps(doc))):
        path.write_text(text)
        with pytest.raises(SnapshotError) as caught:
            load_snapshot([str(path)])
        assert str(caught.value) == f"{path}: Budget ns/b: spec.envelopes[0].concurrency: expected int, got str"


def test_load_file_apart_is_load_file_with_one_kind_left_as_given(tmp_path):
    """``load_file_apart`` (the archive writer's child): the snapshot ``load_file`` gives, without the leases,
    and the leases as the file gives them, out of order and with a copy (which ``load_file`` reads once)."""
    from kubectl_runs.model import snapshot_document
    from kubectl_runs.sources.files import load_file, load_file_apart

    objects = [lease(f"l{i}", namespace=f"ns{i % 3}") for i in (5, 2, 9, 2, 7)]
    document = snapshot_document([to_manifest(o) for o in objects], "2025-11-01T00:00:00Z")
    data = json.dumps(document).encode()
    whole = load_file("s.json", data)
    apart, leases = load_file_apart("s.json", data, "GPULease")
    assert [(x.metadata.namespace, x.metadata.name) for x in leases] == [
        (o.metadata.namespace, o.metadata.name) for o in objects]
    assert len(whole.leases) == 4 and whole.notes  # the copy is read once, with a note
    assert apart == dataclasses.replace(whole, leases=(), notes=())


def test_load_file_apart_leaves_copies_that_differ_to_its_caller_and_sorts_the_rest():
    """A copy that differs: ``load_file`` refuses it, ``load_file_apart`` returns both (the archive writer then
    sends the file to ``load_file``); the other kinds are still put in order."""
    from kubectl_runs.model import snapshot_document
    from kubectl_runs.sources.files import load_file, load_file_apart

    first, second = lease("same", owner="org:a"), lease("same", owner="org:b")
    nodes = [node("n2"), node("n1")]
    document = snapshot_document([to_manifest(o) for o in (*nodes, first, second)], "2025-11-01T00:00:00Z")
    data = json.dumps(document).encode()
    with pytest.raises(SnapshotError, match="different content"):
        load_file("s.json", data)
    apart, leases = load_file_apart("s.json", data, "GPULease")
    assert [x.spec.owner for x in leases] == ["org:a", "org:b"]
    assert [x.metadata.name for x in apart.nodes] == ["n1", "n2"]
