"""Shell completion: the committed scripts in completions/ are what ``kubectl runs completion SHELL`` prints
today (regenerate with ``completions/generate``), and the dynamic candidates — command words, flag values,
and Run / Reservation / Budget names from the snapshot or cluster the typed words point at — come back in
the format each caller reads, without ever printing a traceback.

Names come from a small snapshot file (``fleet`` below): namespace rai-sys holds the Runs train-16,
elastic-24 and pretrain-32, the Reservation pretrain-32-r1 and the Budget rai; rai-eval holds the Run eval-6;
shared-lab holds the Budgets lab-a and lab-b and the Run lab-job.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import pytest
import yaml
from builders import budget, reservation, run, to_manifest
from click.shell_completion import ShellComplete

from kubectl_runs.cli.completion import (
    COMPLETE_VAR,
    complete_budgets,
    complete_reservations,
    complete_runs,
    completion_script,
    plugin_completions,
)
from kubectl_runs.cli.main import main
from kubectl_runs.cli.options import global_options

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = {
    "bash": "kubectl-runs.bash",
    "zsh": "_kubectl-runs",
    "fish": "kubectl-runs.fish",
    "kubectl": "kubectl_complete-runs",
}


@pytest.mark.parametrize("shell", sorted(COMMITTED), ids=sorted(COMMITTED))
def test_committed_script_is_current(shell, capsys):
    """The file in completions/ equals what the command prints now; a stale one fails with the fix."""
    committed = (ROOT / "completions" / COMMITTED[shell]).read_text()
    assert main(["completion", shell]) == 0
    printed = capsys.readouterr().out
    assert printed == completion_script(shell)
    assert committed == printed, f"completions/{COMMITTED[shell]} is stale: run completions/generate"


def test_kubectl_helper_is_executable():
    helper = ROOT / "completions" / "kubectl_complete-runs"
    assert helper.stat().st_mode & 0o111, "kubectl only runs an executable kubectl_complete-runs"


@pytest.mark.parametrize(
    ("shell", "needle"),
    [
        ("bash", "complete -o nosort -F _kubectl_runs_completion kubectl-runs"),
        ("zsh", "#compdef kubectl-runs"),
        ("fish", "complete --no-files --command kubectl-runs"),
        ("kubectl", 'exec kubectl-runs completion __complete "$@"'),
    ],
    ids=["bash", "zsh", "fish", "kubectl"],
)
def test_scripts_call_back_the_executable(shell, needle):
    """Scripts complete the executable ``kubectl-runs`` (not ``kubectl runs``, two words a shell cannot bind)
    through ``_KUBECTL_RUNS_COMPLETE``."""
    script = completion_script(shell)
    assert needle in script
    if shell != "kubectl":
        assert f"{COMPLETE_VAR}={shell}_complete" in script


def test_unknown_shell_is_bad_usage(capsys):
    assert main(["completion", "tcsh"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ('error: unsupported shell "tcsh": choose one of bash, zsh, fish, kubectl\n'
                   "See 'kubectl runs completion --help' for usage.\n")


# --- kubectl_complete-runs: the words after `kubectl runs`, cobra's output format ------------------------------


def test_plugin_completion_of_command_words():
    """``kubectl runs bud<TAB>``: one candidate with its (click-shortened) description, then ``:4`` (no file
    completion)."""
    assert plugin_completions(["bud"]) == "budgets\tBudgets: how much of each envelope is used...\n:4\n"


def test_plugin_completion_of_a_flag_value():
    """``kubectl runs budgets usage -o j<TAB>`` completes the output format."""
    lines = plugin_completions(["budgets", "usage", "-o", "j"]).splitlines()
    assert [line.split("\t")[0] for line in lines] == ["json", ":4"]


def test_plugin_completion_of_a_path_leaves_it_to_the_shell():
    """``kubectl runs budgets usage --snapshot <TAB>``: no candidates and cobra's ``:0``, so the shell
    completes file names."""
    assert plugin_completions(["budgets", "usage", "--snapshot", ""]) == ":0\n"


def test_plugin_completion_through_main(capsys):
    """``kubectl-runs completion __complete WORD…`` takes the words verbatim, flags included."""
    assert main(["completion", "__complete", "budgets", "usage", "--ow"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split("\t")[0] == "--owner"
    assert out.endswith(":4\n")
    assert err == ""


def test_plugin_completion_of_nothing_yet():
    """``kubectl runs <TAB>`` lists the commands (others are being added; these are always there)."""
    words = [line.split("\t")[0] for line in plugin_completions([""]).splitlines()]
    assert {"budgets", "completion", "version"} <= set(words)
    assert words[-1] == ":4"


# --- names from the snapshot the typed words point at ----------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> str:
    objects = [
        budget("rai", "rai-sys"),
        budget("lab-a", "shared-lab"),
        budget("lab-b", "shared-lab"),
        run("train-16", "rai-sys"),
        run("elastic-24", "rai-sys"),
        run("pretrain-32", "rai-sys", phase="Pending"),
        run("eval-6", "rai-eval"),
        run("lab-job", "shared-lab"),
        reservation("pretrain-32-r1", "rai-sys", run_name="pretrain-32"),
    ]
    path = tmp_path_factory.mktemp("fleet") / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([to_manifest(o) for o in objects]))
    return str(path)


@click.command()
@global_options
@click.argument("run", shell_complete=complete_runs)
@click.argument("reservation", shell_complete=complete_reservations)
@click.argument("budget", shell_complete=complete_budgets)
def probe(run: str, reservation: str, budget: str) -> None:
    """A command with one argument of each kind, as plan / seeds verify / budgets would declare them."""


def _complete(args: list[str], incomplete: str) -> list[str]:
    return [item.value for item in ShellComplete(probe, {}, "probe", "_PROBE_COMPLETE").get_completions(args,
                                                                                                     incomplete)]


@pytest.mark.parametrize(
    ("args", "incomplete", "expected"),
    [
        (["-n", "rai-sys"], "", ["elastic-24", "pretrain-32", "train-16"]),
        (["-n", "rai-sys"], "tr", ["train-16"]),
        (["-n", "rai-eval"], "", ["eval-6"]),
        (["-n", "nobody"], "", []),
        (["-n", "rai-sys", "train-16"], "", ["pretrain-32-r1"]),
        (["-n", "shared-lab", "lab-job", "x"], "lab-", ["lab-a", "lab-b"]),
        (["-n", "rai-eval"], "rai-sys/", ["rai-sys/elastic-24", "rai-sys/pretrain-32", "rai-sys/train-16"]),
        ([], "rai-sys/tr", ["rai-sys/train-16"]),
        (["rai-sys/train-16"], "rai-sys/p", ["rai-sys/pretrain-32-r1"]),
    ],
    ids=["runs", "runs-prefix", "other-namespace", "empty-namespace", "reservations", "budgets",
         "namespace-slash-name", "namespace-slash-prefix", "reservation-namespace-slash-name"],
)
def test_names_from_the_snapshot(fleet, args, incomplete, expected):
    assert _complete(["--snapshot", fleet, *args], incomplete) == expected


def test_names_never_raise_or_print(tmp_path, capsys):
    """A snapshot that does not exist, or a file that is no snapshot: no candidates, nothing printed."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Run\nmetadata: {name: x\n")
    assert _complete(["--snapshot", str(tmp_path / "missing.yaml"), "-n", "rai-sys"], "") == []
    assert _complete(["--snapshot", str(bad), "-n", "rai-sys"], "") == []
    assert capsys.readouterr() == ("", "")


def test_names_from_an_unreachable_cluster_come_back_empty_and_fast(tmp_path, capsys):
    """A kubeconfig whose server refuses connections (127.0.0.1:1): no candidates within seconds."""
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        "clusters: [{name: dead, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: u, namespace: rai-sys}}]\n"
    )
    started = time.monotonic()
    assert _complete(["--kubeconfig", str(kubeconfig)], "") == []
    assert time.monotonic() - started < 15
    assert capsys.readouterr() == ("", "")
