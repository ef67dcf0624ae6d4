"""Pods, their verdict Events, ResourceQuotas and LimitRanges in a snapshot file (issue 29): read into the
Snapshot's ``pods`` (kubectl_runs.pods.model.PodObjects), kept by ``snapshot save --snapshot`` (the snapshot
schema allows them), and enough for the pod rows of the pending report offline."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from kubectl_runs.cli.main import main
from kubectl_runs.pods.pending import pending_pod_rows
from kubectl_runs.sources.files import load_snapshot

REPO = Path(__file__).resolve().parents[2]
FLEET = """\
apiVersion: v1
kind: Node
metadata: {name: a, labels: {gpu.flavor: H100}}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: train-0, namespace: team, creationTimestamp: "2025-11-20T10:00:00Z",
           ownerReferences: [{kind: Job, name: train, controller: true}]}
spec: {containers: [{name: main, image: x, resources: {requests: {nvidia.com/gpu: "16"}}}]}
status: {phase: Pending, conditions: [{type: PodScheduled, status: "False", reason: Unschedulable,
                                       message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}
---
apiVersion: v1
kind: Event
metadata: {name: train-0.1, namespace: team}
involvedObject: {kind: Pod, name: train-0, namespace: team}
reason: FailedScheduling
message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus, namespace: team}
spec: {hard: {requests.nvidia.com/gpu: "32"}}
status: {used: {requests.nvidia.com/gpu: "16"}}
---
apiVersion: v1
kind: LimitRange
metadata: {name: lr, namespace: team}
spec: {limits: [{type: Container, defaultRequest: {cpu: 500m}}]}
"""


def test_a_snapshot_file_carries_the_pod_reports_objects(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    loaded = load_snapshot([str(path)])
    pods = loaded.pods
    assert [p.metadata.name for p in pods.pods] == ["train-0"]
    assert pods.events[0].involved_object.name == "train-0" and pods.events[0].reason == "FailedScheduling"
    assert pods.quotas[0].spec.hard == {"requests.nvidia.com/gpu": "32"}
    assert pods.limit_ranges[0].spec.limits[0].default_request == {"cpu": "500m"}
    (row,) = pending_pod_rows(pods.pods, loaded.nodes)
    assert (row.kind, row.name, row.reason, row.gpus) == ("Job", "train", "ExceedsNodeCapacity", 16)


def test_snapshot_save_keeps_them_and_fits_the_snapshot_schema(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    assert main(["snapshot", "save", "--snapshot", str(path)]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert [(i["kind"], i["apiVersion"]) for i in saved["items"]] == [
        ("Node", "v1"), ("Pod", "v1"), ("Event", "v1"), ("ResourceQuota", "v1"), ("LimitRange", "v1")]
    schema = json.loads((REPO / "docs" / "schemas" / "snapshot.schema.json").read_text())
    jsonschema.validate(saved, schema)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(saved))
    assert load_snapshot([str(again)]).pods == load_snapshot([str(path)]).pods
