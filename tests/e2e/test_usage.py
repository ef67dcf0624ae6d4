"""Through the real kubectl with the single-file build (issue 11): a bare command group prints its help on stdout
and exits 0, a usage error is kubectl's two lines with exit 2, and NAMESPACE/NAME and the not-found hint work in
the frozen executable as in the package."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")


@pytest.mark.parametrize("words", [[], ["budgets"], ["leases"], ["seeds"], ["snapshot"]],
                         ids=["root", "budgets", "leases", "seeds", "snapshot"])
def test_a_bare_group_prints_its_help(plugin, words):
    done = plugin.kubectl_runs(*words)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"Usage: kubectl runs {' '.join([*words, ''])}[OPTIONS] COMMAND [ARGS]...\n")


def test_a_usage_error_is_two_lines_and_exit_2(plugin):
    done = plugin.kubectl_runs("plan", "rai-sys/pretrain-32", "-o", "csv", "--snapshot", EXAMPLE)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        'error: unable to match a printer suitable for the output format "csv", allowed formats are: '
        "json,table,wide,yaml",
        "See 'kubectl runs plan --help' for usage.",
    ]


def test_namespace_slash_name_and_the_hint(plugin):
    found = plugin.kubectl_runs("explain", "rai-sys/pretrain-32", "--snapshot", EXAMPLE, "-o", "json")
    assert found.returncode == 0, found.stderr
    missing = plugin.kubectl_runs("plan", "pretrain-32", "--snapshot", EXAMPLE)
    assert (missing.returncode, missing.stdout, missing.stderr) == (
        1, "", "error: run default/pretrain-32 not found; a run of that name is in rai-sys (use -n rai-sys)\n")
