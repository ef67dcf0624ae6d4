"""Helpers of the Helm chart tests (deploy/helm/kubectl-runs): the real Helm v3, built from its Go module by
scripts/helm.sh (pinned in go.mod beside this file, cached outside the repository), ``helm template`` and
``kubectl kustomize`` renderings, and the comparison of the two.

A missing Helm is a skip only where Go is absent; where KUBECTL_RUNS_REQUIRE_CONTROLPLANE is set (CI) it is a
failure, and a build that fails is always a failure."""

from __future__ import annotations

import difflib
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kubectl-runs"
DEPLOY = ROOT / "deploy"
REQUIRE_ENV = "KUBECTL_RUNS_REQUIRE_CONTROLPLANE"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"

#: What Helm adds and the kustomize base has not: its labels (wherever labels are: metadata, selectors, pod
#: templates) and the annotation that keeps the lease archive's claim through `helm uninstall`.
HELM_LABELS = frozenset({"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
                         "app.kubernetes.io/version"})
HELM_ANNOTATIONS = frozenset({"helm.sh/resource-policy"})


def _missing(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(reason)
    pytest.skip(f"{reason}; set {REQUIRE_ENV}=1 to make this an error")


@functools.cache
def _build_helm() -> tuple[str | None, str]:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        return None, done.stderr.strip()[-2000:]
    return done.stdout.strip().splitlines()[-1], ""


def helm_binary() -> str:
    """The path of Helm built by scripts/helm.sh (a skip without Go, unless CI; a failure if the build fails)."""
    if shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK):
        _missing("'go' is not on PATH (needed to build helm.sh/helm/v3 for the chart tests)")
    path, error = _build_helm()
    if path is None:
        pytest.fail(f"scripts/helm.sh failed:\n{error}")
    return path


def kubectl_binary() -> str:
    path = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.access("/usr/bin/kubectl", os.X_OK) else None)
    if path is None:
        _missing("kubectl is not on PATH (needed to render deploy/ with kustomize)")
    return path


def run(argv: list[str], timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def parse(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def helm_template(helm: str, *args: str, release: str = "kubectl-runs", namespace: str = "kubectl-runs-system",
                  crds: bool = True) -> list[dict]:
    """``helm template RELEASE deploy/helm/kubectl-runs -n NAMESPACE ARGS`` (with the CRDs unless told not)."""
    done = run([helm, "template", release, str(CHART), "-n", namespace, *(["--include-crds"] if crds else []),
                *args])
    assert done.returncode == 0, done.stderr
    return parse(done.stdout)


def kustomize(*paths: Path) -> list[dict]:
    objs = []
    for path in paths:
        done = run([kubectl_binary(), "kustomize", str(path)])
        assert done.returncode == 0, done.stderr
        objs += parse(done.stdout)
    return objs


def key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['apiVersion']} {obj['kind']} {meta.get('namespace', '-')}/{meta['name']}"


def _drop(value, keys: frozenset):
    if isinstance(value, dict):
        return {k: _drop(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_drop(v, keys) for v in value]
    return value


def comparable(objs: list[dict]) -> dict[str, dict]:
    """key -> object without Helm's own labels and annotations (an emptied map is dropped), Namespaces left out
    (the chart installs into the release namespace and has none). The same object twice (the base and an
    overlay applied beside it) counts once; two different objects under one key fail."""
    out: dict[str, dict] = {}
    for obj in objs:
        if obj["kind"] == "Namespace":
            continue
        obj = _drop(obj, HELM_LABELS)
        meta = obj["metadata"]
        if "annotations" in meta:
            meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k not in HELM_ANNOTATIONS}
        for field in ("labels", "annotations"):
            if field in meta and not meta[field]:
                del meta[field]
        assert out.get(key(obj), obj) == obj, f"two different objects {key(obj)}"
        out[key(obj)] = obj
    return out


def differences(chart: list[dict], kustomized: list[dict]) -> str:
    """'' when both render the same objects; else which objects are missing on either side and a unified diff
    of every object that differs."""
    mine, theirs = comparable(chart), comparable(kustomized)
    lines = [f"only in the chart: {k}" for k in sorted(mine.keys() - theirs.keys())]
    lines += [f"only in kustomize: {k}" for k in sorted(theirs.keys() - mine.keys())]
    for k in sorted(mine.keys() & theirs.keys()):
        if mine[k] != theirs[k]:
            dump = functools.partial(yaml.safe_dump, sort_keys=True, width=120)
            lines += difflib.unified_diff(dump(theirs[k]).splitlines(), dump(mine[k]).splitlines(),
                                          f"kustomize {k}", f"chart {k}", lineterm="")
    return "\n".join(lines)
