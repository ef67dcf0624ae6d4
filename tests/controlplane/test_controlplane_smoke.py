"""Smoke test of the real API server used by the integration tests (tests/controlplane)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane, skip_reason

GROUP = "smoke.kubectl-runs.test"
CRD_NAME = f"widgets.{GROUP}"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {"rule": "self.spec == oldSelf.spec", "message": "widget spec is immutable"}
                        ],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer"}, "owner": {"type": "string"}},
                            },
                            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                        },
                    }
                },
            }
        ],
    },
}

WIDGET = {
    "apiVersion": f"{GROUP}/v1",
    "kind": "Widget",
    "metadata": {"name": "w1"},
    "spec": {"size": 1, "owner": "alice"},
}


@pytest.fixture(scope="module")
def cp():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    plane = ControlPlane()
    t0 = time.monotonic()
    plane.start()
    sys.stderr.write(
        f"\ncontrol plane up at {plane.server} in {time.monotonic() - t0:.1f}s "
        f"(processes started and ready in {plane.startup_seconds:.1f}s)\n"
    )
    procs = [plane._apiserver, plane._etcd]
    workdir = plane.dir
    try:
        yield plane
    finally:
        plane.stop()
    # stop() must leave nothing behind
    assert all(p.poll() is not None for p in procs)
    assert not workdir.exists()


def test_readyz_and_api_resources(cp):
    kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
    assert os.path.exists(kubectl)
    out = cp.kubectl("get", "--raw", "/readyz").stdout
    assert out.strip() == "ok"
    resources = cp.kubectl("api-resources", "-o", "name").stdout.split()
    assert "customresourcedefinitions.apiextensions.k8s.io" in resources
    assert "namespaces" in resources
    assert "leases.coordination.k8s.io" in resources


def test_users_and_kubeconfigs(cp):
    for user, groups in (("admin", ["system:masters"]), ("reader", []), ("nobody", [])):
        cfg = json.loads(Path(cp.kubeconfig_for(user)).read_text())
        assert cfg["current-context"] == user
        assert cfg["contexts"][0]["context"]["namespace"] == "default"
        assert cfg["clusters"][0]["cluster"]["server"] == cp.server
        review = json.loads(cp.kubectl("auth", "whoami", "-o", "json", user=user).stdout)
        info = review["status"]["userInfo"]
        assert info["username"] == user
        assert set(info["groups"]) == set(groups) | {"system:authenticated"}
    # the combined kubeconfig has one context per user
    out = cp.kubectl("--kubeconfig", cp.kubeconfig, "config", "get-contexts", "-o", "name").stdout.split()
    assert sorted(out) == ["admin", "nobody", "reader"]
    assert cp.admin_kubeconfig == cp.kubeconfig_for("admin")
    assert Path(cp.ca_file).read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_crd_with_cel_transition_rule_and_rbac(cp):
    cp.kubectl("apply", "-f", "-", input=json.dumps(CRD))
    cp.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")

    # Discovery of a new CRD can lag behind Established for a moment.
    deadline = time.monotonic() + 30
    while True:
        created = cp.kubectl("create", "-f", "-", input=json.dumps(WIDGET), check=False)
        if created.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert created.returncode == 0, created.stderr

    got = json.loads(cp.kubectl("get", "widget", "w1", "-o", "json").stdout)
    assert got["spec"] == {"size": 1, "owner": "alice"}

    # the CEL transition rule rejects a change of spec ...
    patched = cp.kubectl("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":2}}', check=False)
    assert patched.returncode != 0
    assert "widget spec is immutable" in patched.stderr, patched.stderr
    assert "Invalid" in patched.stderr, patched.stderr

    # ... but a status update through the status subresource passes it
    cp.kubectl(
        "patch", "widget", "w1", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Ready"}}'
    )
    got = json.loads(cp.kubectl("get", "widget", "w1", "-o", "json").stdout)
    assert got["status"] == {"phase": "Ready"}
    assert got["spec"]["size"] == 1

    # RBAC: users without bindings are forbidden
    for user in ("nobody", "reader"):
        listed = cp.kubectl("get", "widgets", user=user, check=False)
        assert listed.returncode != 0
        assert "Forbidden" in listed.stderr, listed.stderr
        assert f'User "{user}" cannot list resource "widgets"' in listed.stderr, listed.stderr

    # the raw request helper agrees
    status, body = cp.request("GET", f"/apis/{GROUP}/v1/namespaces/default/widgets", user="nobody")
    assert status == 403 and body["reason"] == "Forbidden"
    status, body = cp.request("GET", f"/apis/{GROUP}/v1/namespaces/default/widgets")
    assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["w1"]
