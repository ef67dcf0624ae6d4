#!/usr/bin/env python3
"""Fill in and validate the krew manifest of kubectl-runs.

    krew/manifest.py fill [--archives dist] [--base-url URL] [--version vX.Y.Z] [--only-built] [-o dist/krew/runs.yaml]
    krew/manifest.py validate MANIFEST [--archives dist] [--template]

``fill`` reads the template krew/runs.yaml and writes a manifest whose platforms each carry the ``uri`` of
their archive (``<base-url>/kubectl-runs_<os>_<arch>.tar.gz``) and its ``sha256``, computed from the archive
in ``--archives``. A platform without a built archive is an error, unless ``--only-built`` drops it (a
manifest for a local ``kubectl krew install --manifest … --archive …``).

``validate`` applies the checks of krew's validator (sigs.k8s.io/krew internal/index/validation and
cmd/validate-krew-manifest): apiVersion and kind, the plugin name safe and equal to the file name,
shortDescription, a semver version with a leading ``v``, each platform with uri, a sha256 matching
``^[a-f0-9]{64}$``, bin, well-formed ``files``, a selector using only ``os``/``arch`` that matches a platform
krew supports, no two platforms selecting the same os/arch; and, for every platform whose archive is in
``--archives``, the sha256 of that archive, and an install as krew does it (the ``files`` operations applied to
the archive's members) that yields ``bin`` and a license file. ``--template`` accepts the all-zero placeholder
sha256 of the committed template. Exit 0 when valid; otherwise each problem on stderr and exit 1.

Needs PyYAML only (the project's virtualenv has it).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import re
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "runs.yaml"
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
KIND = "Plugin"
SAFE_NAME = re.compile(r"^[\w-]+$")
WINDOWS_FORBIDDEN = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
SHA256 = re.compile(r"^[a-f0-9]{64}$")
PLACEHOLDER_SHA256 = "0" * 64
# Go's semver as krew parses it: a leading v, MAJOR.MINOR.PATCH, optional -prerelease and +build.
SEMVER = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
# The <os, arch> pairs krew supports (cmd/validate-krew-manifest allPlatforms).
KREW_PLATFORMS = [
    ("windows", "386"), ("windows", "amd64"), ("windows", "arm64"),
    ("linux", "386"), ("linux", "amd64"), ("linux", "arm"), ("linux", "arm64"), ("linux", "ppc64le"),
    ("darwin", "386"), ("darwin", "amd64"), ("darwin", "arm64"),
]
LICENSE_FILES = {"license", "license.txt", "license.md", "licenses", "licenses.txt", "licenses.md", "copying",
                 "copying.txt"}


def archive_name(os_name: str, arch: str) -> str:
    return f"kubectl-runs_{os_name}_{arch}.tar.gz"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- selectors (metav1.LabelSelector, as krew evaluates them) ----------------------------------------------------


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def selected_platforms(selector: dict[str, Any]) -> list[tuple[str, str]]:
    return [(o, a) for o, a in KREW_PLATFORMS if selector_matches(selector, {"os": o, "arch": a})]


def platform_os_arch(platform: dict[str, Any]) -> tuple[str, str] | None:
    """The one (os, arch) a platform entry is for, read from its matchLabels."""
    labels = (platform.get("selector") or {}).get("matchLabels") or {}
    if "os" in labels and "arch" in labels:
        return str(labels["os"]), str(labels["arch"])
    return None


# --- validation ----------------------------------------------------------------------------------------------------


def validate(manifest_path: Path, archives: Path | None, *, template: bool = False) -> list[str]:
    """Every problem krew would find with this manifest (empty when it is valid)."""
    problems: list[str] = []
    try:
        plugin = yaml.safe_load(manifest_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return [f"failed to read plugin file: {exc}"]
    if not isinstance(plugin, dict):
        return ["failed to read plugin file: not a YAML mapping"]
    if manifest_path.suffix != ".yaml":
        problems.append(f'expected manifest extension ".yaml" but found "{manifest_path.suffix}"')
    name = manifest_path.stem
    spec = plugin.get("spec") or {}
    if plugin.get("apiVersion") != API_VERSION:
        problems.append(f'plugin manifest has apiVersion="{plugin.get("apiVersion")}", not supported')
    if plugin.get("kind") != KIND:
        problems.append(f'plugin manifest has kind="{plugin.get("kind")}", but only "{KIND}" is supported')
    if not SAFE_NAME.match(name) or name.upper() in WINDOWS_FORBIDDEN:
        problems.append(f'the plugin name "{name}" is not allowed, must match "{SAFE_NAME.pattern}"')
    if (plugin.get("metadata") or {}).get("name") != name:
        problems.append(f'plugin should be named "{name}", not "{(plugin.get("metadata") or {}).get("name")}"')
    if not spec.get("shortDescription"):
        problems.append("should have a short description")
    elif "\n" in str(spec["shortDescription"]).strip():
        problems.append("shortDescription should be one line")
    platforms = spec.get("platforms") or []
    if not platforms:
        problems.append("should have a platform specified")
    version = spec.get("version")
    if not version:
        problems.append("should have a version specified")
    elif not SEMVER.match(str(version)):
        problems.append(f'failed to parse plugin version "{version}": must be semver with a leading v')
    for index, platform in enumerate(platforms):
        problems.extend(f"spec.platforms[{index}]: {p}" for p in _validate_platform(platform, template=template))
    # No supported <os, arch> may be selected by two platforms.
    for os_arch in KREW_PLATFORMS:
        matching = [i for i, p in enumerate(platforms) if os_arch in selected_platforms(p.get("selector") or {})]
        if len(matching) > 1:
            problems.append(f"multiple spec.platforms (at indexes {matching}) have overlapping selectors that "
                            f"select {os_arch[0]}/{os_arch[1]}")
    if archives is not None:
        for index, platform in enumerate(platforms):
            problems.extend(f"spec.platforms[{index}]: {p}" for p in _check_archive(platform, archives))
    return problems


def _validate_platform(platform: dict[str, Any], *, template: bool) -> list[str]:
    problems = []
    if not platform.get("uri"):
        problems.append("`uri` has to be set")
    sha = platform.get("sha256")
    if not sha:
        problems.append("`sha256` sum has to be set")
    elif not SHA256.match(str(sha)):
        problems.append(f"`sha256` value {sha} is not valid, must match pattern {SHA256.pattern}")
    elif sha == PLACEHOLDER_SHA256 and not template:
        problems.append("`sha256` is the template's placeholder: fill the manifest from built archives")
    if not platform.get("bin"):
        problems.append("`bin` has to be set")
    files = platform.get("files")
    if files is not None:
        if not files:
            problems.append("`files` has to be unspecified or non-empty")
        for op in files:
            if not op.get("from"):
                problems.append("`files`: `from` field has to be set")
            elif not op.get("to"):
                problems.append("`files`: `to` field has to be set")
    selector = platform.get("selector")
    if selector is None:
        problems.append("invalid platform selector: nil selector is not supported")
    else:
        match_labels, expressions = selector.get("matchLabels"), selector.get("matchExpressions")
        if match_labels is None and not expressions:
            problems.append("invalid platform selector: empty selector is not supported")
        keys = list(match_labels or {}) + [e.get("key") for e in expressions or []]
        problems.extend(f'invalid platform selector: key "{k}" not supported' for k in keys if k not in ("os", "arch"))
        if match_labels is not None and not match_labels:
            problems.append("invalid platform selector: `matchLabels` specified but empty")
        if expressions is not None and not expressions:
            problems.append("invalid platform selector: `matchExpressions` specified but empty")
        if not selected_platforms(selector):
            problems.append(f"selector ({selector}) does not match any supported platform")
    return problems


def _check_archive(platform: dict[str, Any], archives: Path) -> list[str]:
    """The sha256 of the platform's archive, when it is in ``archives``, and a dry install of it."""
    uri = str(platform.get("uri") or "")
    path = archives / PurePosixPath(uri).name
    if not uri or not path.is_file():
        return []
    problems = []
    actual = sha256_of(path)
    if platform.get("sha256") != actual:
        problems.append(f"sha256 of {path} is {actual}, the manifest says {platform.get('sha256')}")
    try:
        members = _archive_files(path)
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        return [*problems, f"cannot read {path}: {exc}"]
    installed = _install(members, platform.get("files"))
    bin_path = PurePosixPath(str(platform.get("bin") or "")).as_posix()
    if bin_path not in installed:
        problems.append(f"bin {bin_path!r} is not in the installed files of {path.name}: {sorted(installed)}")
    if not any(PurePosixPath(f).name.lower() in LICENSE_FILES for f in installed):
        problems.append(f"LICENSE (or alike) file is not extracted from {path.name}: {sorted(installed)}")
    return problems


def _archive_files(path: Path) -> list[str]:
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            return [n.rstrip("/") for n in archive.namelist() if not n.endswith("/")]
    with tarfile.open(path, "r:*") as archive:
        return [PurePosixPath(m.name).as_posix().removeprefix("./") for m in archive.getmembers() if m.isfile()]


def _install(members: list[str], files: list[dict[str, str]] | None) -> set[str]:
    """The paths krew's install leaves, relative to the plugin's directory: without ``files`` the whole
    archive; with it, each ``from`` glob moved into ``to``."""
    if not files:
        return set(members)
    installed: set[str] = set()
    for op in files:
        pattern = PurePosixPath(op["from"]).as_posix().removeprefix("./")
        target = PurePosixPath(op["to"])
        for member in members:
            if fnmatch.fnmatchcase(member, pattern):
                installed.add((target / PurePosixPath(member).name).as_posix().removeprefix("./"))
            elif member.startswith(pattern.rstrip("/") + "/"):  # a directory moves with its contents
                installed.add((target / member).as_posix())
    return installed


# --- fill -------------------------------------------------------------------------------------------------------


def fill(archives: Path, base_url: str | None, version: str | None, only_built: bool, out: Path) -> list[str]:
    text = TEMPLATE.read_text(encoding="utf-8")
    plugin = yaml.safe_load(text)
    spec = plugin["spec"]
    template_version = spec["version"]
    if version is None:
        sys.path.insert(0, str(HERE.parent))
        from kubectl_runs import __version__

        version = f"v{__version__}"
    if not version.startswith("v"):
        version = f"v{version}"
    spec["version"] = version
    problems, kept = [], []
    for platform in spec["platforms"]:
        os_arch = platform_os_arch(platform)
        if os_arch is None:
            problems.append(f"platform {platform.get('selector')} has no os and arch labels to name its archive")
            continue
        name = archive_name(*os_arch)
        path = archives / name
        if not path.is_file():
            if not only_built:
                problems.append(f"no archive {path} for {os_arch[0]}/{os_arch[1]} (build it there: scripts/dist)")
            continue
        if base_url:
            platform["uri"] = f"{base_url.rstrip('/')}/{name}"
        else:
            platform["uri"] = str(platform["uri"]).replace(f"/{template_version}/", f"/{version}/")
        platform["sha256"] = sha256_of(path)
        kept.append(platform)
    if not kept:
        problems.append(f"no archive in {archives} for any platform of {TEMPLATE}")
    if problems:
        return problems
    spec["platforms"] = kept
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "# Generated by krew/manifest.py fill from krew/runs.yaml and the built archives.\n"
        + yaml.safe_dump(plugin, sort_keys=False, width=120),
        encoding="utf-8",
    )
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="krew/manifest.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fill_p = sub.add_parser("fill", help="write the release manifest from the template and built archives")
    fill_p.add_argument("--archives", type=Path, default=Path("dist"))
    fill_p.add_argument("--base-url", help="where the archives are published (default: the template's uri)")
    fill_p.add_argument("--version", help="vX.Y.Z (default: kubectl_runs.__version__)")
    fill_p.add_argument("--only-built", action="store_true", help="drop platforms with no archive here")
    fill_p.add_argument("-o", "--output", type=Path, default=Path("dist/krew/runs.yaml"))
    val_p = sub.add_parser("validate", help="check a manifest as krew's validator does")
    val_p.add_argument("manifest", type=Path)
    val_p.add_argument("--archives", type=Path, help="check the sha256 and contents of archives found here")
    val_p.add_argument("--template", action="store_true", help="accept the placeholder sha256 of the template")
    args = parser.parse_args(argv)

    if args.command == "fill":
        if args.output.name != TEMPLATE.name:
            print(f"error: the manifest must be named {TEMPLATE.name} (krew: name = file name)", file=sys.stderr)
            return 2
        problems = fill(args.archives, args.base_url, args.version, args.only_built, args.output)
        if not problems:
            problems = validate(args.output, args.archives)
        if not problems:
            print(args.output)
    else:
        problems = validate(args.manifest, args.archives, template=args.template)
        if not problems:
            print(f"{args.manifest}: valid")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
