"""Pods that claim GPUs through DRA (kubectl_runs.pods.claims, claim_reasons): the three API versions read into one
shape, which DeviceClasses are GPU classes, the devices free per node, and ``pending``/``explain pod`` over
examples/pods.yaml and variations of it. The same reports are judged against the real kube-scheduler in
tests/integration/test_pod_claims_live.py."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import yaml
from builders import run_cli
from jsonschema import Draft202012Validator

from kubectl_runs.pods.claims import device_use, gpu_claims, gpu_driver
from kubectl_runs.pods.model import (
    DeviceClass,
    Pod,
    PodObjects,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from kubectl_runs.pods.verdict import parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pods.yaml"


def _claim(request: dict, allocated: list[str] = ()) -> ResourceClaim:
    status = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": d} for d in allocated]}}} \
        if allocated else {}
    return msgspec.convert({"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ns"},
                            "spec": {"devices": {"requests": [{"name": "gpus", **request}]}}, "status": status},
                           ResourceClaim)


def _pod(**claim) -> Pod:
    return msgspec.convert({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
                            "spec": {"resourceClaims": [{"name": "gpus", **claim}],
                                     "containers": [{"name": "m"}]}}, Pod)


def _slice(node: str, devices: int, generation: int = 1) -> ResourceSlice:
    return msgspec.convert({"kind": "ResourceSlice", "metadata": {"name": f"{node}-{generation}"},
                            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                                     "pool": {"name": node, "generation": generation},
                                     "devices": [{"name": f"gpu-{i}"} for i in range(devices)]}}, ResourceSlice)


@pytest.mark.parametrize("request_", [
    {"name": "gpus", "deviceClassName": "gpu.nvidia.com", "count": 4},  # v1beta1
    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 4}},
    {"name": "gpus", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
                                        {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2}]},
], ids=["v1beta1", "v1beta2-v1", "firstAvailable"])
def test_each_api_version_asks_the_same(request_):
    asks = gpu_claims(_pod(resourceClaimName="c"), PodObjects(claims=(_claim(request_),)))
    assert [(a.claim, a.device_class, a.driver, a.devices, a.allocated) for a in asks] == \
        [("ns/c", "gpu.nvidia.com", "gpu.nvidia.com", 4, ())]


def test_count_defaults_to_one_and_all_is_unknown():
    one = gpu_claims(_pod(resourceClaimName="c"), PodObjects(claims=(_claim({"deviceClassName": "gpu.nvidia.com"}),)))
    every = gpu_claims(_pod(resourceClaimName="c"), PodObjects(claims=(
        _claim({"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}),)))
    assert (one[0].devices, every[0].devices) == (1, None)


def test_a_gpu_class_is_known_by_its_driver_selector_or_its_name():
    def cls(name, expression):
        return msgspec.convert({"kind": "DeviceClass", "metadata": {"name": name},
                                "spec": {"selectors": [{"cel": {"expression": expression}}]}}, DeviceClass)

    assert gpu_driver("accelerators", cls("accelerators", 'device.driver == "gpu.amd.com"')) == "gpu.amd.com"
    assert gpu_driver("gpu.nvidia.com", None) == "gpu.nvidia.com"
    assert gpu_driver("big-gpus", cls("big-gpus", "device.attributes['x'].y")) == "big-gpus"
    assert gpu_driver("fast-nics", cls("fast-nics", "device.driver == 'nic.example.com'")) is None
    # a claim of a non-GPU class makes no GPU consumer
    nics = _claim({"deviceClassName": "fast-nics", "count": 2})
    assert gpu_claims(_pod(resourceClaimName="c"), PodObjects(claims=(nics,))) == ()


def test_a_claim_made_from_a_template_is_read_and_else_the_template():
    template = msgspec.convert({"kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "ns"},
                                "spec": {"spec": {"devices": {"requests": [
                                    {"name": "gpus", "deviceClassName": "gpu.nvidia.com", "count": 2}]}}}},
                               ResourceClaimTemplate)
    pod = _pod(resourceClaimTemplateName="t")
    asks = gpu_claims(pod, PodObjects(claim_templates=(template,)))
    assert [(a.source, a.claim, a.devices) for a in asks] == [("ResourceClaimTemplate", "ns/t", 2)]
    made = msgspec.structs.replace(pod, status=msgspec.convert(
        {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "c"}]}, type(pod.status)))
    claim = _claim({"deviceClassName": "gpu.nvidia.com", "count": 2}, ["gpu-0", "gpu-1"])
    asks = gpu_claims(made, PodObjects(claims=(claim,), claim_templates=(template,),
                                       resource_slices=(_slice("n1", 4),)))
    assert [(a.source, a.claim, a.allocated) for a in asks] == [("ResourceClaim", "ns/c", ("n1",))]


def test_devices_free_per_node_count_the_newest_generation_and_the_claims_that_hold_them():
    claim = _claim({"deviceClassName": "gpu.nvidia.com", "count": 2}, ["gpu-0", "gpu-1"])
    use = device_use(PodObjects(claims=(claim,), resource_slices=(_slice("n1", 8, 1), _slice("n1", 4, 2),
                                                                  _slice("n2", 4))))
    assert (use["n1"]["gpu.nvidia.com"].total, use["n1"]["gpu.nvidia.com"].free,
            use["n1"]["gpu.nvidia.com"].holders) == (4, 2, ("ns/c",))
    assert (use["n2"]["gpu.nvidia.com"].total, use["n2"]["gpu.nvidia.com"].free) == (4, 4)


def test_the_schedulers_dra_verdict_is_parsed():
    message = ("0/2 nodes are available: 1 cannot allocate all claims, 1 node(s) had untolerated taint "
               "{maintenance: true}. still not schedulable, preemption: 0/2 nodes are available: 2 Preemption is "
               "not helpful for scheduling.")
    assert parse(message) == (2, {"cannot allocate all claims": 1,
                                  "node(s) had untolerated taint {maintenance: true}": 1})


def _pending(capsys, path) -> dict:
    code, out, err = run_cli(capsys, "--snapshot", str(path), "pending", "-o", "json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_pending_names_the_claim_and_counts_its_devices(capsys):
    report = _pending(capsys, EXAMPLE)
    row = next(r for r in report["rows"] if r["name"] == "sim")
    assert (row["kind"], row["pods"], row["gpus"], row["gpuResource"], row["deviceClass"], row["reason"]) == \
        ("Job", 1, 4, None, "gpu.nvidia.com", "InsufficientGPU")
    assert "claim research/sim-9pq4w-gpus-h7k2m (DeviceClass gpu.nvidia.com: 4 devices)" in row["message"]
    schema = json.loads((ROOT / "docs" / "schemas" / "pending.schema.json").read_text())
    Draft202012Validator(schema).validate(report)
    assert all(r["deviceClass"] is None for r in report["rows"] if r["name"] != "sim")
    # the headline counts dra-c1's 4 published devices: 2 held by notebook-gpus, 2 free
    gpus = report["gpus"]
    assert (gpus["total"], gpus["heldByPodsOutsideLeases"], gpus["free"]) == (24 + 4, 11 + 2, 13 + 2), gpus


def _variant(tmp_path, change) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    change(doc["items"])
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_freed_devices_make_it_fit_and_a_non_gpu_class_drops_it(capsys, tmp_path):
    def free_the_notebooks_devices(items):
        items[:] = [i for i in items if i["metadata"]["name"] not in ("notebook-gpus", "notebook-0")]

    row = next(r for r in _pending(capsys, _variant(tmp_path, free_the_notebooks_devices))["rows"]
               if r["name"] == "sim")
    assert (row["reason"], row["gpus"]) == ("Fits", 4)

    def nics(items):
        for item in items:
            if item["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
                spec = item["spec"] if item["kind"] == "ResourceClaim" else item["spec"]["spec"]
                spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = "fast-nics"

    assert "sim" not in {r["name"] for r in _pending(capsys, _variant(tmp_path, nics))["rows"]}


def test_explain_pod_shows_the_claims_and_agrees_with_the_schedulers_counts(capsys):
    code, out, err = run_cli(capsys, "--snapshot", str(EXAMPLE), "explain", "pod", "research/sim", "-o", "json")
    assert (code, err) == (0, ""), err
    report = json.loads(out)
    Draft202012Validator(json.loads((ROOT / "docs" / "schemas" / "explain-pod.schema.json").read_text())) \
        .validate(report)
    assert report["claims"] == [{"claim": "research/sim-9pq4w-gpus-h7k2m", "source": "ResourceClaim",
                                 "request": "gpus", "deviceClass": "gpu.nvidia.com", "driver": "gpu.nvidia.com",
                                 "devices": 4, "allocatedOn": []}]
    assert (report["gpuResource"], report["gpus"], report["agrees"]) == ("gpu.nvidia.com", 4, True)
    assert report["deficit"] == {"asked": 4, "freeOnEligible": 2, "largestFreeBlock": 2, "largestNode": 4,
                                 "kind": "NotEnoughAnywhere"}
    assert [(r["kind"], r["message"]) for r in report["remedies"]] == [
        ("FreeGPUs", "dra-c1 has 2 of 4 devices free: 2 more held by research/notebook-gpus")]
    assert report["nodes"][0] == {"node": "dra-c1", "fits": False, "filter": "DynamicResources",
                                  "reasons": ["cannot allocate all claims"], "freeGPUs": 2, "gpus": 4,
                                  "holders": ["research/notebook-gpus"]}
