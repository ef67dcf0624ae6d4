"""The reconciler's image, as a release builds it and an install names it: the Dockerfile's parser directive is
where Docker reads it, what it copies exists, the release workflow pushes both architectures under the name the
kustomize base uses, the tag is the package's version, and a private-registry overlay written as docs/admin.md
shows it replaces the image."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kubectl_runs import __version__

ROOT = Path(__file__).resolve().parents[2]
TAG = f"v{__version__}"
IMAGE = "ghcr.io/jobtree-dev/kubectl-runs"


def test_dockerfile_syntax_directive_is_the_first_line():
    lines = (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
    assert lines[0] == "# syntax=docker/dockerfile:1"
    assert sum(line.startswith("# syntax=") for line in lines) == 1


def test_dockerfile_copies_what_the_repository_has():
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY") and "--from=" not in line:
            *sources, _dest = line.split()[1:]
            for source in sources:
                assert (ROOT / source).exists(), f"deploy/Dockerfile copies {source}, which the repository lacks"


def test_kustomize_base_names_the_released_image():
    kustomization = yaml.safe_load((ROOT / "deploy" / "reconciler" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert (image["name"], image["newName"], image["newTag"]) == ("kubectl-runs", IMAGE, TAG)


def test_release_workflow_pushes_both_architectures_under_that_name():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    job = workflow["jobs"]["image"]
    assert job["permissions"]["packages"] == "write"
    assert job["env"]["IMAGE"] == "ghcr.io/${{ github.repository_owner }}/kubectl-runs"
    build = next(step for step in job["steps"] if str(step.get("uses", "")).startswith("docker/build-push-action"))
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["with"]["file"] == "deploy/Dockerfile"
    assert build["with"]["tags"] == "${{ env.IMAGE }}:${{ github.ref_name }}"
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as a boolean
    assert triggers["push"]["tags"] == ["v*.*.*"]


def test_krew_manifest_is_the_same_version():
    manifest = yaml.safe_load((ROOT / "krew" / "runs.yaml").read_text())
    assert manifest["spec"]["version"] == TAG


def test_private_registry_overlay_from_the_admin_guide(tmp_path):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("KUBECTL_RUNS_REQUIRE_CONTROLPLANE"):
            pytest.fail("kubectl is needed to render the kustomize base")
        pytest.skip("kubectl is not installed")
    guide = (ROOT / "docs" / "admin.md").read_text()
    start = guide.index("# my-cluster/kustomization.yaml")
    overlay = yaml.safe_load(guide[start:guide.index("```", start)])
    overlay["resources"] = [os.path.relpath(ROOT / "deploy", tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    rendered = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, check=True)
    images = {c["image"] for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] == "Deployment"
              for c in doc["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.internal/gpu/kubectl-runs:v0.1.0"}


def test_krew_text_says_what_writes():
    """krew users read this before installing: which commands write, and what."""
    description = yaml.safe_load((ROOT / "krew" / "runs.yaml").read_text())["spec"]["description"]
    assert "only read" in description
    for words in ("kubectl runs reconcile", "--manage-leases", "kubectl runs leases archive", "--prune"):
        assert words in description


def test_helm_chart_names_the_same_image_and_tag():
    chart = ROOT / "deploy" / "helm" / "kubectl-runs"
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert meta["appVersion"] == TAG
    assert values["image"]["repository"] == IMAGE
    assert values["image"].get("tag") in (None, "", TAG)  # empty: the chart's appVersion
