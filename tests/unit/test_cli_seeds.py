"""`kubectl runs seeds verify` end to end on the example fleet and on tampered snapshots (API.md §4, §5).

The example fleet records one activated reservation, rai-sys/bench-16-r1 (activated 2025-11-14T00:00:00Z,
seed 0x842ab08bbd07c729 = "0x" + sha256("rai-sys/bench-16-r1|2025-11-14T00:00:00Z")[:16]). The fixtures in
tests/fixtures/seeds/ are that reservation and its leases, honest or tampered one way each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kubectl_runs.cli.main import cli, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
FIXTURES = ROOT / "tests" / "fixtures" / "seeds"
AT = "2025-11-20T12:00:00Z"
SEED = "0x842ab08bbd07c729"


@pytest.fixture(autouse=True)
def no_kubeconfig(monkeypatch, tmp_path):
    """Namespace defaults come from the kubeconfig context: make sure there is none (so: default)."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def fixture(name: str) -> str:
    return str(FIXTURES / f"{name}.yaml")


def test_example_fleet_verifies(capsys):
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, "--at", AT)
    assert (code, err) == (0, "")
    assert out == (
        "RESERVATION          ACTIVATED   SEED                RESULT\n"
        f"rai-sys/bench-16-r1  6 days ago  {SEED}  verified\n"
    )


def test_example_fleet_wide_shows_run_deficit_freed_and_victims(capsys):
    """Deficit 16, freed 16 (8 reclaimed + two lottery groups of 4), 2 groups drawn."""
    code, out, _ = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, "--at", AT, "-o", "wide")
    assert code == 0
    assert out.splitlines() == [
        "RESERVATION          RUN               ACTIVATED   SEED                DEFICIT  FREED  VICTIMS  RESULT",
        f"rai-sys/bench-16-r1  rai-sys/bench-16  6 days ago  {SEED}       16     16        2  verified",
    ]


def test_example_fleet_json_with_flags_before_the_command_words(capsys):
    code, out, err = run_main(capsys, "-o", "json", "--snapshot", EXAMPLE, "seeds", "verify", "bench-16-r1",
                              "-n", "rai-sys")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "reservations": [{"name": "rai-sys/bench-16-r1", "seed": SEED, "verified": True, "differences": []}]
    }


def test_cli_runner_prints_the_same(capsys):
    result = CliRunner().invoke(cli, ["seeds", "verify", "--snapshot", EXAMPLE, "--at", AT, "-o", "yaml"])
    assert result.exit_code == 0
    assert result.stdout == (
        "reservations:\n"
        "- name: rai-sys/bench-16-r1\n"
        f"  seed: '{SEED}'\n"
        "  verified: true\n"
        "  differences: []\n"
    )


TAMPERED = [
    ("victim-swapped", [
        "wrong victim: the draw takes mm-vision/vit-probe-8 group 0 (place 2 of 4), the recorded actions do not",
        "wrong victim: the recorded actions take mm-vision/vit-probe-8 group 1 (place 3 of 4, not drawn)",
    ]),
    ("seed-edited", [
        "seed mismatch: recorded 0x842ab08bbd07c728, but rai-sys/bench-16-r1 activated at 2025-11-14T00:00:00Z "
        "derives 0x842ab08bbd07c729",
        "ticket mismatch for rai-eval/ablation-8 group 1: recorded a4f8baa771864c1d…",
        "victim lease shared-lab/lab-scratch-8-g0 names seed 0x842ab08bbd07c729, the reservation records "
        "0x842ab08bbd07c728",
        "victim lease rai-eval/ablation-8-g1 names seed 0x842ab08bbd07c729, the reservation records "
        "0x842ab08bbd07c728",
        "victim lease mm-vision/vit-probe-8-g0 names seed 0x842ab08bbd07c729, the reservation records "
        "0x842ab08bbd07c728",
    ]),
    ("lease-seed-removed", [
        "victim lease rai-eval/ablation-8-g1 does not name the seed (status.preemption.seed is missing)",
    ]),
]


@pytest.mark.parametrize(("name", "expected"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_tampered_snapshot_fails_naming_the_difference(capsys, name, expected):
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", fixture(name), "--at", AT, "-o", "json")
    assert (code, err) == (1, "")
    (report,) = json.loads(out)["reservations"]
    assert report["name"] == "rai-sys/bench-16-r1"
    assert report["verified"] is False
    for line in expected:
        assert any(d == line or d.startswith(line) for d in report["differences"]), (line, report["differences"])


def test_tampered_snapshot_table_lists_each_difference(capsys):
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", fixture("victim-swapped"), "--at", AT)
    assert (code, err) == (1, "")
    assert out == (
        "RESERVATION          ACTIVATED   SEED                RESULT\n"
        f"rai-sys/bench-16-r1  6 days ago  {SEED}  2 differences\n"
        "\n"
        "Differences in rai-sys/bench-16-r1:\n"
        "DIFFERENCE\n"
        "wrong victim: the draw takes mm-vision/vit-probe-8 group 0 (place 2 of 4), the recorded actions do not\n"
        "wrong victim: the recorded actions take mm-vision/vit-probe-8 group 1 (place 3 of 4, not drawn)\n"
    )


def test_honest_fixture_verifies(capsys):
    code, out, _ = run_main(capsys, "seeds", "verify", "bench-16-r1", "-n", "rai-sys", "--snapshot",
                            fixture("honest"), "-o", "json")
    assert code == 0
    assert json.loads(out)["reservations"][0]["verified"] is True


def test_a_namespace_without_activations_has_nothing_to_verify(capsys):
    """-n rai-eval narrows the report to a namespace without activated reservations: JSON prints an empty
    list, the table says so on stderr, exit 0."""
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, "-n", "rai-eval", "-o", "json")
    assert (code, json.loads(out), err) == (0, {"reservations": []}, "")
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, "-n", "rai-eval")
    assert (code, out, err) == (0, "", "No activated reservations found in rai-eval namespace.\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "-n", "rai-sys"], 'error: reservation rai-sys/nope not found\n'),
        (["bench-16-r1"], "error: reservation default/bench-16-r1 not found; a reservation of that name is in rai-sys "
                          "(use -n rai-sys)\n"),
        (["pretrain-32-r1", "-n", "rai-sys"],
         "error: reservation rai-sys/pretrain-32-r1 is not activated (state Pending): it has no draw to verify\n"),
    ],
    ids=["not-found", "default-namespace", "not-activated"],
)
def test_a_named_reservation_that_cannot_be_verified_is_an_error(capsys, args, message):
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, *args)
    assert (code, out, err) == (1, "", message)


def test_csv_is_not_an_output_of_seeds_verify(capsys):
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, "-o", "csv")
    assert (code, out) == (2, "")
    assert err == (
        'error: unable to match a printer suitable for the output format "csv", '
        "allowed formats are: json,table,wide,yaml\n"
        "See 'kubectl runs seeds verify --help' for usage.\n"
    )


def test_one_bad_reservation_among_several_fails_the_whole_report(capsys, tmp_path):
    """A copy of bench-16-r1's record under another name, ops/copied-r1, next to the example fleet: its seed
    derives from its own name, so the copy differs while the original verifies; the report exits 1."""
    import yaml

    original = next(d for d in yaml.safe_load_all(Path(fixture("honest")).read_text()) if d["kind"] == "Reservation")
    original["metadata"] = {"name": "copied-r1", "namespace": "ops"}
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump(original))
    code, out, err = run_main(capsys, "seeds", "verify", "--snapshot", EXAMPLE, "--snapshot", str(copy), "-o", "json")
    assert (code, err) == (1, "")
    reports = json.loads(out)["reservations"]
    assert [(r["name"], r["verified"]) for r in reports] == [("ops/copied-r1", False), ("rai-sys/bench-16-r1", True)]
    assert reports[0]["differences"][0].startswith(
        "seed mismatch: recorded 0x842ab08bbd07c729, but ops/copied-r1 activated at 2025-11-14T00:00:00Z derives 0x"
    )


def _hand_ticket(run_key: str, group: int) -> str:
    import hashlib

    return hashlib.sha256(f"{SEED}|{run_key}|{group}".encode()).hexdigest()


def test_explain_shows_the_runs_tickets_places_and_verdict(capsys):
    """bench-16-r1's lottery set: ablation-8/1 is borrowed (place 1); the three owned groups follow in ticket
    order. vit-probe-8's two groups are placed by their hand-computed tickets among the owned ones (places
    2–4); the lottery took one group after the borrowed one, so the owned group at place 2 was taken."""
    code, out, err = run_main(capsys, "explain", "vit-probe-8", "-n", "mm-vision", "--snapshot", EXAMPLE,
                              "--at", AT, "-o", "json")
    assert (code, err) == (0, "")
    (preemption,) = json.loads(out)["preemptions"]
    owned = sorted(
        [("mm-vision/vit-probe-8", 0), ("mm-vision/vit-probe-8", 1), ("rai-eval/ablation-8", 0)],
        key=lambda g: _hand_ticket(*g),
    )
    expected = [
        {"group": g, "ticket": _hand_ticket(r, g), "place": 2 + owned.index((r, g)), "taken": owned.index((r, g)) == 0}
        for r, g in sorted(owned, key=lambda k: k[1])
        if r == "mm-vision/vit-probe-8"
    ]
    assert sorted(preemption["tickets"], key=lambda t: t["group"]) == expected
    assert preemption | {"tickets": None} == {
        "reservation": "rai-sys/bench-16-r1", "seed": SEED, "at": "2025-11-14T00:00:00Z", "gpus": 4,
        "verified": True, "tickets": None, "conflictSetSize": 4, "differences": [],
    }


def test_explain_table_of_a_tampered_draw_says_it_differs(capsys, tmp_path):
    """The example fleet with the second lottery action edited to name vit-probe-8 group 1: vit-probe-8's
    preemption no longer verifies."""
    honest = "{kind: Lottery, run: mm-vision/vit-probe-8, group: 0, lease: mm-vision/vit-probe-8-g0, gpus: 4}"
    text = Path(EXAMPLE).read_text()
    assert text.count(honest) == 1
    tampered = tmp_path / "fleet.yaml"
    tampered.write_text(text.replace(honest, honest.replace("group: 0", "group: 1").replace("-g0", "-g1")))
    code, out, _ = run_main(capsys, "explain", "vit-probe-8", "-n", "mm-vision", "--snapshot", str(tampered),
                            "--at", AT)
    assert code == 0
    lines = out.split("Preemptions:\n", 1)[1].splitlines()
    assert lines[0].split() == ["RESERVATION", "SEED", "AT", "GPUS", "DRAW", "VERIFIED"]
    assert lines[1].startswith(f"rai-sys/bench-16-r1  {SEED}  6 days ago")
    assert lines[1].endswith("DIFFERS (seeds verify)")
