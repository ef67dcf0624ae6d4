"""Kueue's real CRDs (from the sigs.k8s.io/kueue Go module, scripts/kueue.sh) and the small Kaiwo test CRD
(tests/kueue/kaiwo-crds.yaml) on a real API server, and a snapshot's Kueue/Kaiwo objects put into it: create
each object, then write its status through the status subresource."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fleet import ensure_namespaces, read_objects

ROOT = Path(__file__).resolve().parents[2]
KAIWO_CRDS = ROOT / "tests" / "kueue" / "kaiwo-crds.yaml"

# kind -> (apiVersion, plural, namespaced)
KINDS = {
    "ResourceFlavor": ("kueue.x-k8s.io/v1beta1", "resourceflavors", False),
    "ClusterQueue": ("kueue.x-k8s.io/v1beta1", "clusterqueues", False),
    "Cohort": ("kueue.x-k8s.io/v1alpha1", "cohorts", False),
    "LocalQueue": ("kueue.x-k8s.io/v1beta1", "localqueues", True),
    "Workload": ("kueue.x-k8s.io/v1beta1", "workloads", True),
    "WorkloadPriorityClass": ("kueue.x-k8s.io/v1beta1", "workloadpriorityclasses", False),
    "KaiwoJob": ("kaiwo.silogen.ai/v1alpha1", "kaiwojobs", True),
    "KaiwoService": ("kaiwo.silogen.ai/v1alpha1", "kaiwoservices", True),
    "Node": ("v1", "nodes", False),
}


def kueue_crd_dir() -> Path:
    """Kueue's CRDs in the Go module cache (downloaded on first use; an error, never a skip, if that fails)."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "kueue.sh"), "crds"], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/kueue.sh crds failed: {proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def install_crds(cp) -> None:
    """Kueue's CRDs server-side (they are too large for a client-side apply's annotation), and Kaiwo's."""
    cp.kubectl("apply", "--server-side", "-f", str(kueue_crd_dir()), timeout=120)
    cp.kubectl("apply", "-f", str(KAIWO_CRDS))
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def paths(obj: dict) -> tuple[str, str]:
    api_version, plural, namespaced = KINDS[obj["kind"]]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        base += f"/namespaces/{obj['metadata'].get('namespace', 'default')}"
    collection = f"{base}/{plural}"
    return collection, f"{collection}/{obj['metadata']['name']}"


def upload(cp, objects: list[dict], threads: int = 8) -> None:
    objects = [o for o in objects if o.get("kind") in KINDS]
    ensure_namespaces(cp, (o["metadata"].get("namespace", "default") for o in objects if KINDS[o["kind"]][2]))
    # Flavors and priority classes before what names them (nothing checks it, but it is the order a user takes).
    order = {kind: i for i, kind in enumerate(KINDS)}
    objects.sort(key=lambda o: order[o["kind"]])

    def one(obj: dict) -> None:
        collection, item = paths(obj)
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels",
                                                                               "annotations")}
        status, answer = cp.request("POST", collection, body)
        if status != 201:
            raise RuntimeError(f"create {item}: {status} {answer}")
        if obj.get("status"):
            status, answer = cp.request("PATCH", item + "/status", {"status": obj["status"]},
                                        content_type="application/merge-patch+json")
            if status != 200:
                raise RuntimeError(f"status of {item}: {status} {answer}")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(one, objects):
            pass


def install_example(cp, path: Path) -> None:
    install_crds(cp)
    upload(cp, read_objects(str(path)))
