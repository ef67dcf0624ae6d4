"""Finding the one object of ``plan RUN``, ``explain RUN`` and ``seeds verify RESERVATION`` (issue 11):
``NAMESPACE/NAME`` is accepted; a name not in the namespace looked in says where else it is; ``-A`` searches every
namespace and takes the one match (several: exit 1 listing them). docs/commands.md documents the rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import budget, reservation, run, run_cli, write_fleet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = "2025-11-20T12:00:00Z"


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> str:
    """``job`` in three namespaces (a, b, c), ``solo`` in b only; reservations likewise."""
    objects = [budget("b", ns, owner=f"org:{ns}") for ns in ("a", "b", "c")]
    objects += [run("job", ns) for ns in ("a", "b", "c")] + [run("solo", "b")]
    objects += [reservation("job-r1", ns, run_name="job") for ns in ("b", "c")]
    return write_fleet(tmp_path_factory.mktemp("twins") / "fleet.yaml", objects)


@pytest.mark.parametrize("command", [["plan"], ["explain"]], ids=["plan", "explain"])
def test_namespace_slash_name_is_the_same_as_dash_n(capsys, command):
    slashed = run_cli(capsys, *command, "rai-sys/pretrain-32", "--snapshot", EXAMPLE, "-o", "json")
    dashed = run_cli(capsys, *command, "pretrain-32", "-n", "rai-sys", "--snapshot", EXAMPLE, "-o", "json")
    assert slashed == dashed
    assert slashed[0] == 0
    assert json.loads(slashed[1])["run"] in ("rai-sys/pretrain-32", {"namespace": "rai-sys", "name": "pretrain-32"})


def test_namespace_slash_name_agreeing_with_dash_n_is_fine(capsys):
    assert run_cli(capsys, "plan", "rai-sys/pretrain-32", "-n", "rai-sys", "--snapshot", EXAMPLE, "-o", "json")[0] == 0


def test_seeds_verify_takes_namespace_slash_name(capsys):
    code, out, err = run_cli(capsys, "seeds", "verify", "rai-sys/bench-16-r1", "--snapshot", EXAMPLE, "-o", "json")
    assert (code, err) == (0, "")
    assert [r["name"] for r in json.loads(out)["reservations"]] == ["rai-sys/bench-16-r1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "pretrain-32"],
         "run default/pretrain-32 not found; a run of that name is in rai-sys (use -n rai-sys)"),
        (["explain", "pretrain-32", "-n", "mm-vision"],
         "run mm-vision/pretrain-32 not found; a run of that name is in rai-sys (use -n rai-sys)"),
        (["seeds", "verify", "bench-16-r1"],
         "reservation default/bench-16-r1 not found; a reservation of that name is in rai-sys (use -n rai-sys)"),
        (["plan", "nowhere"], "run default/nowhere not found"),
        (["plan", "rai-eval/pretrain-32"],
         "run rai-eval/pretrain-32 not found; a run of that name is in rai-sys (use -n rai-sys)"),
    ],
    ids=["plan-default-namespace", "explain-other-namespace", "seeds-verify", "nowhere", "slashed"],
)
def test_not_found_says_where_the_name_is(capsys, args, message):
    assert run_cli(capsys, *args, "--snapshot", EXAMPLE) == (1, "", f"error: {message}\n")


def test_not_found_lists_every_namespace_that_has_the_name(capsys, twins):
    assert run_cli(capsys, "plan", "job", "-n", "d", "--snapshot", twins, "--at", AT) == (
        1, "", "error: run d/job not found; runs of that name are in a, b, c (use -n NAMESPACE or NAMESPACE/NAME)\n")
    assert run_cli(capsys, "seeds", "verify", "job-r1", "-n", "a", "--snapshot", twins) == (
        1, "", "error: reservation a/job-r1 not found; reservations of that name are in b, c "
               "(use -n NAMESPACE or NAMESPACE/NAME)\n")


def test_all_namespaces_takes_the_one_match(capsys, twins):
    found = run_cli(capsys, "plan", "solo", "-A", "--snapshot", twins, "--at", AT, "-o", "json")
    named = run_cli(capsys, "plan", "b/solo", "--snapshot", twins, "--at", AT, "-o", "json")
    assert found == named
    assert found[0] == 0
    assert run_cli(capsys, "explain", "pretrain-32", "-A", "--snapshot", EXAMPLE, "-o", "json") == run_cli(
        capsys, "explain", "pretrain-32", "-n", "rai-sys", "--snapshot", EXAMPLE, "-o", "json")
    assert run_cli(capsys, "seeds", "verify", "bench-16-r1", "-A", "--snapshot", EXAMPLE)[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "job"], "3 runs are named job: a/job, b/job, c/job (name one as NAMESPACE/NAME)"),
        (["explain", "job"], "3 runs are named job: a/job, b/job, c/job (name one as NAMESPACE/NAME)"),
        (["seeds", "verify", "job-r1"],
         "2 reservations are named job-r1: b/job-r1, c/job-r1 (name one as NAMESPACE/NAME)"),
        (["plan", "nowhere"], "run nowhere not found in any namespace"),
    ],
    ids=["plan-several", "explain-several", "seeds-several", "none"],
)
def test_all_namespaces_with_several_or_no_matches_fails(capsys, twins, args, message):
    assert run_cli(capsys, *args, "-A", "--snapshot", twins, "--at", AT) == (1, "", f"error: {message}\n")


def test_all_namespaces_with_namespace_slash_name_is_that_object(capsys, twins):
    assert run_cli(capsys, "plan", "c/job", "-A", "--snapshot", twins, "--at", AT, "-o", "json") == run_cli(
        capsys, "plan", "job", "-n", "c", "--snapshot", twins, "--at", AT, "-o", "json")


def test_a_malformed_name_fails_before_loading(capsys):
    """Usage, not a load error: the snapshot named does not even exist."""
    assert run_cli(capsys, "plan", "a//b", "--snapshot", "/nonexistent.yaml") == (
        2, "", "error: run 'a//b': write NAME or NAMESPACE/NAME\nSee 'kubectl runs plan --help' for usage.\n")
