"""The documentation a user can reach (issue 11): README.md and docs/ link only to files inside the repository
(every relative link resolves, every #anchor names a heading), nothing points at ../shared or outside the
repository root, and the error lines docs/troubleshooting.md quotes are the lines the CLI prints."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from builders import budget, reservation, run, run_cli, write_fleet

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, …


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))  # code blocks are not links
    return LINK.findall(text) + HTML_LINK.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_~]|<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        base = slug(heading)
        name, n = base, 1
        while name in found:
            name, n = f"{base}-{n}", n + 1
        found.add(name)
    return found


def test_the_pages_exist():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    for page in ("docs/README.md", "docs/resources.md", "docs/arithmetic.md", "docs/commands.md", "docs/output.md",
                 "docs/exit-codes.md", "docs/admin.md", "docs/reconciler.md", "docs/troubleshooting.md"):
        assert page in names


def test_the_docs_index_links_every_page():
    """docs/README.md is where a reader starts: every page of docs/ is linked from it."""
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages - linked == set()
    assert {"architecture.md", "kueue.md"} <= linked


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves_inside_the_repository(page):
    assert link_problems(page) == []


def test_the_link_check_catches_what_it_must(tmp_path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# A title\n")
    page = root / "docs" / "index.md"
    page.write_text("[ok](a.md#a-title) [web](https://example.com) [self](#top)\n# Top\n"
                    "[shared](../../shared/API.md) [gone](b.md) [anchor](a.md#nope) [abs](/etc/passwd)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert link_problems(page, root) == [
        "../../shared/API.md: outside the repository", "b.md: no such file",
        "a.md#nope: no heading #nope in docs/a.md", "/etc/passwd: an absolute path",
    ]


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for target in links(page):
        if EXTERNAL.match(target):
            continue
        path, _, fragment = target.partition("#")
        if path.startswith("/"):
            problems.append(f"{target}: an absolute path")
            continue
        resolved = (page.parent / path).resolve() if path else page
        try:
            resolved.relative_to(root.resolve())
        except ValueError:
            problems.append(f"{target}: outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{target}: no heading #{fragment} in {resolved.relative_to(root.resolve()).as_posix()}")
    return problems


def test_the_readme_links_docs_not_shared():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/README.md" in links(ROOT / "README.md")
    assert "../shared" not in readme


def test_nothing_in_the_repository_points_at_shared():
    """No tracked file names ../shared (the helpers' notes, which exist in no user's clone)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    here = Path(__file__).resolve()
    offenders = []
    for name in tracked.decode().split("\0"):
        path = ROOT / name
        if not name or path.resolve() == here or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if "../shared" in text:
            offenders.append(name)
    assert offenders == []


def test_the_anchor_rule_is_githubs():
    assert slug("`kubectl runs seeds verify [RESERVATION]`") == "kubectl-runs-seeds-verify-reservation"
    assert slug("Snapshots: the same objects, offline") == "snapshots-the-same-objects-offline"
    assert slug("budgets usage (CSV)") == "budgets-usage-csv"


# --- the troubleshooting table quotes real lines --------------------------------------------------------------

EXAMPLE = str(ROOT / "examples" / "fleet.yaml")


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """Files named as the table names them; no kubeconfig, so the context namespace is ``default``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    (tmp_path / "fleet.json").write_text("{")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "fleet.yaml").write_text(
        "kind: Budget\nmetadata: {name: b, namespace: n}\nspec: {owner: 'org:x', envelopes: [{name: e, flavor: H, "
        "concurrency: 0, start: '2025-11-01T00:00:00Z', end: '2025-12-01T00:00:00Z'}]}\n")
    objects = [budget("b", ns, owner=f"org:{ns}") for ns in ("a", "b", "c")] + [run("job", ns) for ns in "abc"]
    objects.append(reservation("job-r1", "b", run_name="job"))
    write_fleet(tmp_path / "twins.yaml", objects)
    return tmp_path


CASES = [
    ["plan", "pretrain-32", "--snapshot", EXAMPLE],
    ["plan", "job", "-n", "d", "--snapshot", "twins.yaml"],
    ["plan", "nowhere", "--snapshot", EXAMPLE],
    ["plan", "job", "-A", "--snapshot", "twins.yaml"],
    ["plan", "nowhere", "-A", "--snapshot", EXAMPLE],
    ["plan", "a/b/c/d", "--snapshot", EXAMPLE],
    ["plan", "a/b/c", "--snapshot", EXAMPLE],
    ["plan", "rai-sys/pretrain-32", "-n", "rai-eval", "--snapshot", EXAMPLE],
    ["seeds", "verify", "rai-sys/pretrain-32-r1", "--snapshot", EXAMPLE],
    ["budgets", "usage", "--snapshot", "fleet.yaml"],
    ["budgets", "usage", "--snapshot", "fleet.json"],
    ["budgets", "usage", "-n", "nobody", "--snapshot", EXAMPLE],
    ["budgets", "usage", "--at", "yesterday", "--snapshot", EXAMPLE],
    ["leases", "audit", "--since", "2026-01-01", "--snapshot", EXAMPLE],
    ["budgets", "usage", "--request-timeout", "abc", "--snapshot", EXAMPLE],
    ["plan", "pretrain-32", "-n", "rai-sys", "-o", "csv", "--snapshot", EXAMPLE],
    ["budgets", "usage", "--frobnicate", "--snapshot", EXAMPLE],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a[:3]) for a in CASES])
def test_troubleshooting_quotes_the_lines_the_cli_prints(capsys, workdir, args):
    if args[-1] == "fleet.yaml":
        (workdir / "fleet.yaml").unlink(missing_ok=True)
    _, _, err = run_cli(capsys, *args)
    first = err.splitlines()[0]
    table = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert f"`{first}`" in table, f"docs/troubleshooting.md does not quote what the CLI prints now: {first!r}"


def test_troubleshooting_quotes_the_snapshot_error_line(capsys, workdir, monkeypatch):
    monkeypatch.chdir(workdir / "bad")
    _, _, err = run_cli(capsys, "budgets", "usage", "--snapshot", "fleet.yaml")
    assert f"`{err.strip()}`" in (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


def test_troubleshooting_quotes_the_ignored_kind_note(capsys, workdir, monkeypatch):
    (workdir / "other").mkdir()
    (workdir / "other" / "fleet.yaml").write_text("kind: ConfigMap\nmetadata: {name: c, namespace: n}\n")
    monkeypatch.chdir(workdir / "other")
    _, _, err = run_cli(capsys, "budgets", "usage", "--snapshot", "fleet.yaml")
    note = err.splitlines()[0]
    assert note.startswith("note: ignored")
    assert f"`{note}`" in (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


# A file named in prose (``API.md``, ``reconciler/ledger.py``) must be one a reader of the repository can open:
# relative to the page, to the repository root, or the tail of a tracked path. These name files the commands
# write, a user's own script in an example (get-token.sh), a Python module (msgspec.json) or an upstream source, not files of the repository; bench/out/ is what the
# benchmarks generate and dist/ what `make dist` builds.
NAMED_ELSEWHERE = {"fleet.json", "_manifest.json", "._manifest.json", "manifest.json", "pkg/cache/resource_node.go", "msgspec.json", "get-token.sh", "x.json"}
FILE_NAME = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.(?:md|py|yaml|yml|json|sh|toml|go))(?![\w/])")


def files_named_in_prose(page: Path) -> list[str]:
    text = re.sub(r"https?://\S+", "", FENCE.sub("", page.read_text(encoding="utf-8")))
    return FILE_NAME.findall(text)


def _missing_files(pages: list[Path], tracked: list[str]) -> list[tuple[str, str]]:
    missing = []
    for page in pages:
        for name in files_named_in_prose(page):
            if (name in NAMED_ELSEWHERE or name.startswith(("bench/out/", "dist/")) or (page.parent / name).exists()
                    or (ROOT / name).exists()):
                continue
            if not any(path.endswith("/" + name) for path in tracked):
                missing.append((page.name, name))
    return missing


def test_every_file_named_in_the_docs_is_in_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pages = [*PAGES, ROOT / "crds" / "README.md", ROOT / "bench" / "RESULTS.md"]
    assert _missing_files(pages, tracked) == []


def test_the_file_name_check_catches_a_contract_outside_the_repository(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("The seed is the one of API.md §4 (see `kubectl_runs/model.py`, `cache.py` and fleet.json).\n"
                    "```\nnot-prose.md\n```\n")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert files_named_in_prose(page) == ["API.md", "kubectl_runs/model.py", "cache.py", "fleet.json"]
    assert _missing_files([page], tracked) == [("page.md", "API.md")]
