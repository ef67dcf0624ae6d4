"""What the CLI says about how it is called (issue 11): a command group with nothing after it prints its help on
stdout and exits 0 (as kubectl does for `kubectl config`); every usage error is kubectl's two lines —
``error: …`` and ``See '<command> --help' for usage.`` — on stderr, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from builders import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        ([], "Usage: kubectl runs [OPTIONS] COMMAND [ARGS]..."),
        (["budgets"], "Usage: kubectl runs budgets [OPTIONS] COMMAND [ARGS]..."),
        (["snapshot"], "Usage: kubectl runs snapshot [OPTIONS] COMMAND [ARGS]..."),
        (["leases"], "Usage: kubectl runs leases [OPTIONS] COMMAND [ARGS]..."),
        (["seeds"], "Usage: kubectl runs seeds [OPTIONS] COMMAND [ARGS]..."),
        (["-n", "rai-sys", "budgets"], "Usage: kubectl runs budgets [OPTIONS] COMMAND [ARGS]..."),
    ],
    ids=["root", "budgets", "snapshot", "leases", "seeds", "flags-then-group"],
)
def test_a_bare_command_group_prints_its_help_and_exits_0(capsys, args, usage):
    code, out, err = run_cli(capsys, *args)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == usage
    # the same text as --help, not flattened into one line
    assert out.count("\n") > 10
    assert run_cli(capsys, *args, "--help") == (0, out, "")


@pytest.mark.parametrize(
    ("args", "error", "command"),
    [
        (["budgets", "usage", "-o", "xml"],
         'unable to match a printer suitable for the output format "xml", allowed formats are: '
         "csv,json,table,wide,yaml", "kubectl runs budgets usage"),
        (["-o", "xml", "budgets", "usage"],
         'unable to match a printer suitable for the output format "xml", allowed formats are: '
         "csv,json,table,wide,yaml", "kubectl runs budgets usage"),
        (["plan", "pretrain-32", "-n", "rai-sys", "-o", "csv"],
         'unable to match a printer suitable for the output format "csv", allowed formats are: '
         "json,table,wide,yaml", "kubectl runs plan"),
        (["explain", "pretrain-32", "-n", "rai-sys", "-o", "csv"],
         'unable to match a printer suitable for the output format "csv", allowed formats are: '
         "json,table,wide,yaml", "kubectl runs explain"),
        (["seeds", "verify", "-o", "csv"],
         'unable to match a printer suitable for the output format "csv", allowed formats are: '
         "json,table,wide,yaml", "kubectl runs seeds verify"),
        (["leases", "audit", "--by", "owner", "--by", "owner"],
         "--by: each dimension at most once (got owner, owner)", "kubectl runs leases audit"),
        (["budgets", "usage", "--frobnicate"], "no such option '--frobnicate'.", "kubectl runs budgets usage"),
        (["plan"], "missing argument 'RUN'.", "kubectl runs plan"),
        (["nope"], "no such command 'nope'.", "kubectl runs"),
        (["budgets", "nope"], "no such command 'nope'.", "kubectl runs budgets"),
        (["completion", "tcsh"], 'unsupported shell "tcsh": choose one of bash, zsh, fish, kubectl',
         "kubectl runs completion"),
        (["plan", "a/b/c/d"], "run 'a/b/c/d': write NAME or NAMESPACE/NAME", "kubectl runs plan"),  # a/b/c: CONTEXT/NS/NAME
        (["plan", "rai-sys/pretrain-32", "-n", "rai-eval"],
         "run rai-sys/pretrain-32 is in namespace rai-sys, but -n says rai-eval: give one of them",
         "kubectl runs plan"),
        (["budgets", "usage", "-w", "--context", "east", "--context", "west"],
         "-w/--watch follows one cluster: give one --context (or none)", "kubectl runs budgets usage"),
    ],
    ids=["o-xml", "o-xml-before-command", "plan-csv", "explain-csv", "seeds-csv", "by-twice", "unknown-flag",
         "missing-argument", "unknown-command", "unknown-subcommand", "unknown-shell", "three-part-name",
         "namespace-contradicts-n", "watch-several-clusters"],
)
def test_a_usage_error_is_an_error_line_and_where_to_read_exit_2(capsys, args, error, command):
    code, out, err = run_cli(capsys, "--snapshot", EXAMPLE, *args)
    assert (code, out, err) == (2, "", f"error: {error}\nSee '{command} --help' for usage.\n")


def test_through_the_installed_program():
    """The real process: a bare group's help on stdout with exit 0, and a usage error's two lines exit 2."""
    bare = subprocess.run([sys.executable, "-m", "kubectl_runs", "budgets"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert (bare.returncode, bare.stderr) == (0, "")
    assert bare.stdout.startswith("Usage: kubectl runs budgets [OPTIONS] COMMAND [ARGS]...\n")
    bad = subprocess.run([sys.executable, "-m", "kubectl_runs", "budgets", "usage", "-o", "xml",
                          "--snapshot", EXAMPLE], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.splitlines() == [
        'error: unable to match a printer suitable for the output format "xml", allowed formats are: '
        "csv,json,table,wide,yaml",
        "See 'kubectl runs budgets usage --help' for usage.",
    ]


@pytest.mark.parametrize(("args", "first_line"), [
    (["budgts"], "error: no such command 'budgts'. Did you mean 'budgets'?"),
    (["budget", "usage"], "error: no such command 'budget'. Did you mean 'budgets'?"),
    (["seed", "verify"], "error: no such command 'seed'. Did you mean 'seeds'?"),
    (["plans", "x"], "error: no such command 'plans'. (Did you mean one of: 'explain', 'plan'?)"),
    (["budgets", "usge"], "error: no such command 'usge'. Did you mean 'usage'?"),
    (["xyzzy"], "error: no such command 'xyzzy'."),
    (["budgets", "usage", "--flavour", "x"], "error: no such option '--flavour'. Did you mean '--flavor'?"),
    # compared without their dashes: --watch is nothing like --at (leases audit has no -w)
    (["leases", "audit", "--watch"], "error: no such option '--watch'."),
    (["budgets", "usage", "--wach"], "error: no such option '--wach'. Did you mean '--watch'?"),
])
def test_a_misspelling_gets_a_suggestion_at_every_level(capsys, args, first_line):
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == ""
    assert err.splitlines()[0] == first_line
