"""Fast start (DESIGN.md): ``kubectl runs --help`` and ``version`` never import the kubernetes client, and the
root help imports none of the heavier layers either (the subcommands' one-line help lives in COMMANDS).

Each case runs in a fresh interpreter, so the modules it reports are exactly what the command imported.
bench/bench_startup.py measures what this saves.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import io, json, sys, contextlib
from kubectl_runs.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def imported_by(*args: str) -> tuple[int, str, set[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return result["code"], result["out"], set(result["modules"])


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize(
    "args",
    [["--help"], ["-h"], ["version"], ["version", "-o", "json"], ["budgets", "--help"], ["completion", "bash"]],
    ids=["help", "h", "version", "version-json", "group-help", "completion-script"],
)
def test_no_kubernetes_client(args):
    code, out, modules = imported_by(*args)
    assert code == 0
    assert out
    assert "kubernetes" not in top_level(modules)
    assert not {"urllib3", "requests", "pydantic"} & top_level(modules)


def test_root_help_imports_only_the_root():
    """``--help`` loads click and the root command, not the model, renderer, sources or any subcommand."""
    code, out, modules = imported_by("--help")
    assert code == 0
    assert out.startswith("Usage: kubectl runs")
    ours = {m for m in modules if m.startswith("kubectl_runs")}
    assert ours <= {"kubectl_runs", "kubectl_runs.cli", "kubectl_runs.cli.main", "kubectl_runs.cli.options",
                    "kubectl_runs.errors", "kubectl_runs.formats", "kubectl_runs.timeutil"}, sorted(ours)
    assert not {"msgspec", "yaml", "tabulate", "humanize"} & top_level(modules)


def test_version_skips_the_model_and_sources():
    code, out, modules = imported_by("version")
    assert code == 0
    assert out.startswith("kubectl-runs ")
    assert not {"kubectl_runs.model", "kubectl_runs.sources", "kubectl_runs.engine"} & modules
    assert not {"msgspec", "yaml"} & top_level(modules)


EXAMPLE = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["version"],
        ["leases", "--help"],
        ["leases", "audit", "--snapshot", EXAMPLE, "-o", "json"],
        ["budgets", "usage", "--snapshot", EXAMPLE, "-o", "json"],
        ["plan", "--snapshot", EXAMPLE, "-A", "pretrain-32", "-o", "json"],
        ["explain", "--snapshot", EXAMPLE, "-A", "pretrain-32", "-o", "json"],
        ["seeds", "verify", "--snapshot", EXAMPLE, "-o", "json"],
        ["snapshot", "save", "--snapshot", EXAMPLE],
    ],
    ids=["help", "version", "leases-help", "leases-audit", "budgets-usage", "plan", "explain", "seeds-verify",
         "snapshot-save"],
)
def test_no_duckdb(args):
    """DuckDB (~0.2 s to import, ~25 MB unpacked in the executable) is the lease archive's alone: only
    ``leases archive`` and ``leases audit --archive`` import it (docs/archive.md)."""
    code, out, modules = imported_by(*args)
    assert code == 0, (args, code)
    assert out
    assert not {"duckdb", "pyarrow"} & top_level(modules), args


WATCH_MODULES = {"kubectl_runs.cli.watching", "kubectl_runs.cli.watch_text", "kubectl_runs.sources.informer",
                 "kubectl_runs.sources.watchcache"}


@pytest.mark.parametrize(
    "args",
    [
        ["budgets", "usage", "--snapshot", EXAMPLE, "-o", "json"],
        ["plan", "--snapshot", EXAMPLE, "-A", "pretrain-32", "-o", "json"],
        ["explain", "--snapshot", EXAMPLE, "-A", "pretrain-32", "-o", "json"],
        ["pending", "--snapshot", EXAMPLE, "-o", "json"],
        ["queues", "usage", "--snapshot", EXAMPLE, "-o", "json"],
        ["plan", "--help"],
    ],
    ids=["budgets-usage", "plan", "explain", "pending", "queues-usage", "plan-help"],
)
def test_the_watch_machinery_is_imported_only_with_w(args):
    """``-w`` (cli/watching.py, the informers, the kubernetes client) costs nothing to a command without it."""
    code, out, modules = imported_by(*args)
    assert code == 0, (args, code)
    assert out
    assert not WATCH_MODULES & modules, sorted(WATCH_MODULES & modules)
    assert "kubernetes" not in top_level(modules)
