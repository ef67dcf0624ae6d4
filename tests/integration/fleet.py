"""Put a snapshot's objects into a real API server: create each object, then write its status through the
status subresource (the API server ignores status on create for kinds with a status subresource)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import yaml

PLURALS = {"Budget": "budgets", "Run": "runs", "Reservation": "reservations", "GPULease": "gpuleases"}


def read_objects(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    docs = [json.loads(text)] if text.lstrip().startswith(("{", "[")) else list(yaml.safe_load_all(text))
    out: list[dict] = []
    for doc in docs:
        if not doc:
            continue
        if doc.get("kind") == "List" or "items" in doc:
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return [_plain(o) for o in out]


def _plain(value):
    """YAML timestamps back to RFC 3339 strings, as the API expects."""
    import datetime

    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def path_of(obj: dict) -> tuple[str, str]:
    """(collection path, object path) of an object."""
    kind = obj["kind"]
    meta = obj["metadata"]
    if kind == "Node":
        return "/api/v1/nodes", f"/api/v1/nodes/{meta['name']}"
    ns = meta.get("namespace", "default")
    base = f"/apis/jobtree.dev/v1alpha1/namespaces/{ns}/{PLURALS[kind]}"
    return base, f"{base}/{meta['name']}"


def ensure_namespaces(cp, namespaces: Iterable[str]) -> None:
    for ns in sorted(set(namespaces)):
        status, body = cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": ns}})
        if status not in (201, 409):
            raise RuntimeError(f"create namespace {ns}: {status} {body}")


def upload(cp, objects: list[dict], threads: int = 16) -> None:
    """Create every object (namespaces first) and then write each status; raises on any failure."""
    objects = [o for o in objects if o.get("kind") in ("Node", *PLURALS)]
    ensure_namespaces(cp, (o["metadata"].get("namespace", "default") for o in objects if o["kind"] != "Node"))

    def one(obj: dict) -> None:
        collection, item = path_of(obj)
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {k: v for k, v in obj["metadata"].items()
                            if k in ("name", "namespace", "labels", "annotations")}
        status, answer = cp.request("POST", collection, body)
        if status != 201:
            raise RuntimeError(f"create {item}: {status} {answer}")
        if obj.get("status"):
            patch = {"status": obj["status"]}
            status, answer = cp.request("PATCH", item + "/status", patch, content_type="application/merge-patch+json")
            if status != 200:
                raise RuntimeError(f"status of {item}: {status} {answer}")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(one, objects):
            pass


def install_example(cp, root) -> None:
    """The state every live test starts from: crds/ applied and Established, the read-only ClusterRole of
    deploy/ bound to the user ``reader``, and examples/fleet.yaml loaded (objects, then their status)."""
    cp.kubectl("apply", "-f", str(root / "crds"))
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    cp.kubectl("apply", "-f", str(root / "deploy" / "rbac-readonly.yaml"))
    cp.kubectl("create", "clusterrolebinding", "reader-reads-runs", "--clusterrole=kubectl-runs-reader",
               "--user=reader")
    upload(cp, read_objects(str(root / "examples" / "fleet.yaml")))
