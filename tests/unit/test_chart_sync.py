"""The Helm chart (deploy/helm/kubectl-runs) and the kustomize base are one source: the chart's crds/ and its
dashboard are byte-for-byte copies of crds/ and deploy/grafana/ (Helm reads no file outside a chart), kept so by
scripts/sync-chart. tests/helm/test_helm_render.py compares what the two render."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kubectl-runs"
FIX = "out of date: run scripts/sync-chart"


def copies() -> list[tuple[Path, Path]]:
    pairs = [(crd, CHART / "crds" / crd.name) for crd in sorted((ROOT / "crds").glob("*.yaml"))]
    return [*pairs, (ROOT / "deploy" / "grafana" / "kubectl-runs-reconciler.json",
                     CHART / "dashboards" / "kubectl-runs-reconciler.json")]


def test_the_chart_has_exactly_the_four_crds():
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(p.name for p in (ROOT / "crds").glob("*.yaml")), FIX
    assert len(list((CHART / "crds").iterdir())) == 4


@pytest.mark.parametrize(("source", "copy"), copies(), ids=lambda p: p.name)
def test_the_chart_copy_is_identical(source: Path, copy: Path):
    assert copy.exists(), f"{copy.relative_to(ROOT)} is missing: {FIX}"
    assert copy.read_bytes() == source.read_bytes(), f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: {FIX}"


def test_sync_chart_check_agrees_and_names_what_drifted(tmp_path):
    """`scripts/sync-chart --check` passes on the repository; on a copy of it with a CRD changed it fails and names
    the file and the script."""
    done = subprocess.run([str(ROOT / "scripts" / "sync-chart"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    repo = tmp_path / "repo"
    for part in ("scripts", "crds", "deploy/grafana", "deploy/helm"):
        shutil.copytree(ROOT / part, repo / part)
    crd = repo / "crds" / "runs.jobtree.dev.yaml"
    crd.write_text(crd.read_text() + "# changed\n")
    done = subprocess.run([str(repo / "scripts" / "sync-chart"), "--check"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "deploy/helm/kubectl-runs/crds/runs.jobtree.dev.yaml differs from crds/runs.jobtree.dev.yaml" in done.stderr
    assert "run scripts/sync-chart" in done.stderr
    done = subprocess.run([str(repo / "scripts" / "sync-chart")], capture_output=True, text=True)
    assert done.returncode == 0 and "copied crds/runs.jobtree.dev.yaml" in done.stdout
    assert (repo / "deploy/helm/kubectl-runs/crds/runs.jobtree.dev.yaml").read_bytes() == crd.read_bytes()
