"""The krew manifest: the committed template is valid as a template, a manifest filled from the archive built
here passes krew's checks (name = file name, semver, sha256, selectors, bin and LICENSE in the archive), and
each check catches what krew would reject."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "krew" / "manifest.py"
TEMPLATE = ROOT / "krew" / "runs.yaml"
ARCHIVE = "kubectl-runs_linux_amd64.tar.gz"

_spec = importlib.util.spec_from_file_location("krew_manifest", SCRIPT)
manifest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(manifest)


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_template_is_valid_as_a_template():
    assert manifest.validate(TEMPLATE, None, template=True) == []


def test_template_covers_linux_and_darwin_on_amd64_and_arm64():
    plugin = yaml.safe_load(TEMPLATE.read_text())
    assert plugin["metadata"]["name"] == TEMPLATE.stem == "runs"
    pairs = {manifest.platform_os_arch(p) for p in plugin["spec"]["platforms"]}
    assert pairs == {("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")}
    for platform in plugin["spec"]["platforms"]:
        assert platform["bin"] == "kubectl-runs"
        assert {op["from"] for op in platform["files"]} == {"kubectl-runs", "LICENSE"}


def test_template_is_not_a_release_manifest():
    """Its placeholder sha256 values are refused unless --template says so."""
    done = run_script("validate", str(TEMPLATE))
    assert done.returncode == 1
    assert "placeholder" in done.stderr


@pytest.fixture(scope="module")
def archives(built_binary) -> Path:
    directory = built_binary.parent
    if not (directory / ARCHIVE).is_file():
        pytest.skip(f"no {ARCHIVE} here (built on another os/arch)")
    return directory


def test_archive_holds_the_binary_and_the_license(archives, built_binary):
    with tarfile.open(archives / ARCHIVE) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-runs"]
        binary = tar.extractfile("kubectl-runs").read()
        assert tar.getmember("kubectl-runs").mode & 0o111
    assert hashlib.sha256(binary).hexdigest() == hashlib.sha256(built_binary.read_bytes()).hexdigest()


def test_filled_manifest_passes_krews_checks(archives, tmp_path):
    out = tmp_path / "runs.yaml"
    done = run_script("fill", "--archives", str(archives), "--only-built", "--version", "v1.2.3",
                      "--base-url", "https://example.invalid/releases/v1.2.3", "-o", str(out))
    assert done.returncode == 0, done.stderr
    plugin = yaml.safe_load(out.read_text())
    assert plugin["spec"]["version"] == "v1.2.3"
    [platform] = plugin["spec"]["platforms"]
    assert platform["uri"] == f"https://example.invalid/releases/v1.2.3/{ARCHIVE}"
    assert platform["sha256"] == hashlib.sha256((archives / ARCHIVE).read_bytes()).hexdigest()
    done = run_script("validate", str(out), "--archives", str(archives))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{out}: valid\n", "")


def test_fill_refuses_missing_platforms(archives, tmp_path):
    """Without --only-built, every platform of the template needs its archive (the release workflow)."""
    done = run_script("fill", "--archives", str(archives), "-o", str(tmp_path / "runs.yaml"))
    assert done.returncode == 1
    assert "kubectl-runs_darwin_arm64.tar.gz" in done.stderr


def test_a_wrong_checksum_is_caught(archives, tmp_path):
    out = tmp_path / "runs.yaml"
    assert run_script("fill", "--archives", str(archives), "--only-built", "-o", str(out)).returncode == 0
    out.write_text(out.read_text().replace(manifest.sha256_of(archives / ARCHIVE), "a" * 64))
    problems = manifest.validate(out, archives)
    assert problems == [f"spec.platforms[0]: sha256 of {archives / ARCHIVE} is "
                        f"{manifest.sha256_of(archives / ARCHIVE)}, the manifest says {'a' * 64}"]


def _plugin(**spec_changes) -> dict:
    plugin = yaml.safe_load(TEMPLATE.read_text())
    plugin["spec"].update(spec_changes)
    return plugin


def _write(tmp_path: Path, plugin: dict, name: str = "runs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(plugin))
    return path


def _first_platform(**changes) -> list[dict]:
    plugin = yaml.safe_load(TEMPLATE.read_text())
    platforms = plugin["spec"]["platforms"]
    platforms[0].update(changes)
    return platforms


@pytest.mark.parametrize(
    ("plugin", "file_name", "expected"),
    [
        (_plugin(), "kubectl-runs.yaml", 'plugin should be named "kubectl-runs", not "runs"'),
        (_plugin(version="0.1.0"), "runs.yaml", 'failed to parse plugin version "0.1.0"'),
        (_plugin(shortDescription=""), "runs.yaml", "should have a short description"),
        (_plugin(platforms=[]), "runs.yaml", "should have a platform specified"),
        (_plugin(platforms=_first_platform(sha256="ABC")), "runs.yaml", "`sha256` value ABC is not valid"),
        (_plugin(platforms=_first_platform(bin="")), "runs.yaml", "`bin` has to be set"),
        (_plugin(platforms=_first_platform(selector={"matchLabels": {"os": "linux", "cpu": "x"}})), "runs.yaml",
         'key "cpu" not supported'),
        (_plugin(platforms=_first_platform(selector={"matchLabels": {"os": "linux"}})), "runs.yaml",
         "overlapping selectors that select linux/arm64"),
        (_plugin(platforms=_first_platform(files=[{"from": "kubectl-runs"}])), "runs.yaml",
         "`to` field has to be set"),
    ],
    ids=["name", "version", "short-description", "no-platform", "sha256-format", "bin", "selector-key",
         "overlap", "files"],
)
def test_validator_catches_what_krew_rejects(tmp_path, plugin, file_name, expected):
    problems = manifest.validate(_write(tmp_path, plugin, file_name), None, template=True)
    assert any(expected in p for p in problems), problems


# --- the README's install line works as written after `make dist` ---------------------------------------------

README_INSTALL = re.compile(r"^kubectl krew install --manifest=(\S+) --archive=(\S+)", re.M)


def readme_install_line() -> tuple[str, str]:
    found = README_INSTALL.search((ROOT / "README.md").read_text())
    assert found, "README.md has no `kubectl krew install --manifest=… --archive=…` line"
    return found.group(1), found.group(2)


@pytest.fixture(scope="module")
def dist_manifest(built_binary) -> Path:
    """scripts/dist (`make dist`; the e2e tier runs it with --reuse) leaves dist/krew/runs.yaml."""
    if built_binary.parent != ROOT / "dist":
        pytest.skip("the binary under test was built elsewhere (KUBECTL_RUNS_E2E_BINARY)")
    return ROOT / "dist" / "krew" / "runs.yaml"


def test_make_dist_leaves_the_manifest_the_readme_names(dist_manifest, archives):
    manifest_path, archive_path = readme_install_line()
    assert ROOT / manifest_path == dist_manifest
    assert dist_manifest.is_file()
    assert (ROOT / archive_path).parent == archives and (ROOT / archive_path).name == ARCHIVE
    assert manifest.validate(dist_manifest, archives) == []
    plugin = yaml.safe_load(dist_manifest.read_text())
    [platform] = plugin["spec"]["platforms"]
    assert platform["sha256"] == manifest.sha256_of(archives / ARCHIVE)
    assert platform["uri"].endswith("/" + ARCHIVE)


def krew_path(kubectl: str) -> str:
    """PATH on which ``kubectl krew`` works: the machine's own krew, else krew built from the Go module proxy by
    scripts/krew.sh (cached outside the repo). Without either, a skip — a failure in CI."""
    path = os.environ.get("PATH", "")
    if subprocess.run([kubectl, "krew", "version"], capture_output=True).returncode == 0:
        return path
    built = subprocess.run(["bash", str(ROOT / "scripts" / "krew.sh")], capture_output=True, text=True, timeout=1800)
    if built.returncode != 0:
        reason = f"no krew here and scripts/krew.sh failed: {built.stderr.strip()[-500:]}"
        if os.environ.get("KUBECTL_RUNS_REQUIRE_CONTROLPLANE"):
            pytest.fail(reason)
        pytest.skip(reason)
    return os.pathsep.join([built.stdout.strip().splitlines()[-1], path])


def test_krew_installs_the_readme_line(dist_manifest, archives, tmp_path):
    """The README's line, run as written by krew itself (the machine's, else krew v0.4.4 built by
    scripts/krew.sh) in a throwaway KREW_ROOT, installs a plugin that kubectl runs."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed here")
    manifest_path, archive_path = readme_install_line()
    env = {**os.environ, "KREW_ROOT": str(tmp_path / "krew"), "PATH": krew_path(kubectl)}
    assert subprocess.run([kubectl, "krew", "version"], capture_output=True, env=env).returncode == 0
    done = subprocess.run([kubectl, "krew", "install", f"--manifest={manifest_path}", f"--archive={archive_path}"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    env["PATH"] = os.pathsep.join([str(tmp_path / "krew" / "bin"), os.path.dirname(kubectl), "/usr/bin", "/bin"])
    version = subprocess.run([kubectl, "runs", "version"], capture_output=True, text=True, env=env, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip()
