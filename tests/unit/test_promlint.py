"""The reconciler's /metrics text, checked by Prometheus's own Go code: the text parser
(github.com/prometheus/common/expfmt) and the linter `promtool check metrics` runs
(github.com/prometheus/client_golang/prometheus/testutil/promlint), in a small command of ours,
tests/promlint/main.go, built by scripts/promlint.sh from the versions pinned in tests/promlint/go.mod/go.sum
(cached outside the repository; the first build takes seconds once the modules are downloaded).

Skipped where Go is missing; where KUBECTL_RUNS_REQUIRE_CONTROLPLANE is set (CI) a missing Go or a failed build
fails instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from metrics_driver import driven

from kubectl_runs.reconciler.metrics import serve

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "promlint.sh"
REQUIRED = bool(os.environ.get("KUBECTL_RUNS_REQUIRE_CONTROLPLANE"))


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def promlint() -> str:
    if shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK):
        _unavailable("Go is not installed: scripts/promlint.sh cannot build the metrics linter")
    done = subprocess.run([str(SCRIPT), "build"], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        _unavailable(f"scripts/promlint.sh build failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def lint(binary: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary], input=text, capture_output=True, text=True, timeout=60)


def test_the_live_metrics_text_parses_and_lints_clean(promlint):
    """Scraped over HTTP from a registry after a real activation (every family has samples)."""
    metrics = driven()
    server = serve("127.0.0.1:0", metrics)
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
    assert "jobtree_resolver_actions_total{" in text and "jobtree_budget_headroom_gpus{" in text
    done = lint(promlint, text)
    assert done.returncode == 0, done.stdout + done.stderr
    families = int(done.stdout.split()[1])
    assert families >= 25, done.stdout


@pytest.mark.parametrize("text, code, says", [
    ("# HELP jobtree_things Things.\n# TYPE jobtree_things counter\njobtree_things 1\n", 1,
     'counter metrics should have "_total" suffix'),
    ("# TYPE jobtree_used_hours gauge\njobtree_used_hours 1\n", 1, "no help text"),
    ("# HELP jobtree_used_hours Hours.\n# TYPE jobtree_used_hours gauge\njobtree_used_hours 1\n", 1,
     'use base unit "seconds" instead of "hours"'),
    ("jobtree_x{a=\"1\" 1\n", 2, "does not parse"),
])
def test_the_linter_finds_problems(promlint, text, code, says):
    done = lint(promlint, text)
    assert done.returncode == code, done.stdout + done.stderr
    assert says in done.stdout + done.stderr
