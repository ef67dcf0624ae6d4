"""``kubectl runs leases audit`` end to end on a small snapshot at a fixed instant: exact stdout, stderr and exit
code for each output format and flag (API.md §5).

The fleet (T0 = 2025-11-01T00:00:00Z), audited over [T0+24h, T0+48h) at --at T0+48h:

- nodes n1, n2 (8 GPUs); Budget team/b (owner org:team), envelope ``west`` H100 funds 8 GPUs at once.
- team/train-g0: org:team, 8 GPUs on n1 during [T0+12h, T0+30h) -> in the window 6 h × 8 = 48 GPU-h.
- team/eval-g0: org:team, n2#0 n2#1 from T0+26h, still open -> 22 h × 2 = 44 GPU-h. At T0+26h train holds all 8
  of west: eval's 2 GPUs are an Overdraft.
- ext/ext-g0: ext:partner (not family of org:team), n2#4 during [T0+27h, T0+29h), paid by team/b west, which
  does not lend -> ACLViolation; 2 h × 1 = 2 GPU-h; its run ext/ext is not in the snapshot -> UnknownRun.

Totals 48 + 44 + 2 = 94 GPU-h, 3 leases. org:team 92 GPU-h (2 leases, peak 8 + 2 = 10 on [T0+26h, T0+30h)),
ext:partner 2 GPU-h (1 lease, peak 1). Over the 24 h window org:team holds 92/24 = 3.83 GPUs on average.
"""

from __future__ import annotations

import json

import pytest
import yaml
from builders import at, budget, envelope, lease, node, run, to_manifest
from click.testing import CliRunner

from kubectl_runs.cli.main import cli, main

AT = "2025-11-03T00:00:00Z"
SINCE = "2025-11-02T00:00:00Z"

FLEET = (
    node("n1"),
    node("n2"),
    budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=8)]),
    run("train", "team"),
    run("eval", "team"),
    lease("train-g0", "team", owner="org:team", gpus=8, node_name="n1", run_name="train", start=at(hours=12),
          ended=at(hours=30)),
    lease("eval-g0", "team", owner="org:team", slot_list=["n2#0", "n2#1"], run_name="eval", start=at(hours=26)),
    lease("ext-g0", "ext", owner="ext:partner", slot_list=["n2#4"], run_name="ext", paid_by=("team", "b", "west"),
          start=at(hours=27), ended=at(hours=29)),
)

# default tables wrap the DETAIL prose to fit 100 columns; -o wide keeps each finding on one line
FINDINGS = """\
Findings:
KIND          LEASE         DETAIL
UnknownRun    ext/ext-g0    run ext/ext is not in the snapshot but the lease held 1 GPU: check the
                            runRef
ACLViolation  ext/ext-g0    at 2025-11-02T03:00:00Z: owner ext:partner is not family of org:team and
                            team/b envelope west does not lend: 1 GPU unfunded
Overdraft     team/eval-g0  at 2025-11-02T02:00:00Z: team/b envelope west funds 8 GPUs at once: 2 of
                            its 2 GPUs are unfunded
"""

FINDINGS_WIDE = """\
Findings:
KIND          LEASE         DETAIL
UnknownRun    ext/ext-g0    run ext/ext is not in the snapshot but the lease held 1 GPU: check the runRef
ACLViolation  ext/ext-g0    at 2025-11-02T03:00:00Z: owner ext:partner is not family of org:team and team/b envelope west does not lend: 1 GPU unfunded
Overdraft     team/eval-g0  at 2025-11-02T02:00:00Z: team/b envelope west funds 8 GPUs at once: 2 of its 2 GPUs are unfunded
"""

TABLE = """\
Leases 2025-11-02 00:00Z to 2025-11-03 00:00Z: 3 leases, 94.0 GPU-hours, 3 findings

OWNER        GPU-HOURS  LEASES  PEAK-GPUS
org:team          92.0       2         10
ext:partner        2.0       1          1

""" + FINDINGS

WIDE = """\
Leases 2025-11-02 00:00Z to 2025-11-03 00:00Z: 3 leases, 94.0 GPU-hours, 3 findings

OWNER        GPU-HOURS  SHARE  AVG-GPUS  LEASES  PEAK-GPUS
org:team          92.0  97.9%       3.8       2         10
ext:partner        2.0   2.1%       0.1       1          1

""" + FINDINGS_WIDE

CSV = """\
OWNER,GPU-HOURS,SHARE,AVG-GPUS,LEASES,PEAK-GPUS
org:team,92.0,0.9787,3.83,2,10
ext:partner,2.0,0.0213,0.08,1,1
"""

JSON = {
    "since": "2025-11-02T00:00:00Z",
    "until": "2025-11-03T00:00:00Z",
    "rows": [
        {"owner": "org:team", "gpuHours": 92.0, "leases": 2, "peakGPUs": 10},
        {"owner": "ext:partner", "gpuHours": 2.0, "leases": 1, "peakGPUs": 1},
    ],
    "totals": {"gpuHours": 94.0, "leases": 3},
    "findings": [
        {"kind": "UnknownRun", "lease": "ext/ext-g0",
         "detail": "run ext/ext is not in the snapshot but the lease held 1 GPU: check the runRef"},
        {"kind": "ACLViolation", "lease": "ext/ext-g0",
         "detail": "at 2025-11-02T03:00:00Z: owner ext:partner is not family of org:team and team/b envelope west "
         "does not lend: 1 GPU unfunded"},
        {"kind": "Overdraft", "lease": "team/eval-g0",
         "detail": "at 2025-11-02T02:00:00Z: team/b envelope west funds 8 GPUs at once: 2 of its 2 GPUs are "
         "unfunded"},
    ],
}


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit") / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([to_manifest(o) for o in FLEET], sort_keys=False))
    return str(path)


def run_main(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("output", "expected"),
    [("table", TABLE), ("wide", WIDE), ("csv", CSV)],
    ids=["table", "wide", "csv"],
)
def test_formats(capsys, fleet_file, output, expected):
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", SINCE,
                              "-o", output)
    assert (code, out, err) == (0, expected, "")


def test_json_and_yaml_carry_the_same_document(capsys, fleet_file):
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", SINCE,
                              "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == JSON
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", SINCE,
                              "-o", "yaml")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == JSON


def test_relative_since_counts_back_from_at(capsys, fleet_file):
    """--since 24h at T0+48h is T0+24h; --until defaults to --at: the same window as above."""
    code, out, _ = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", "24h",
                            "-o", "json")
    assert code == 0
    assert json.loads(out) == JSON


def test_default_window_is_the_last_30_days(capsys, fleet_file):
    """[T0+48h − 30 d, T0+48h): all of train (18 h × 8 = 144), eval 44, ext 2 = 190 GPU-h."""
    code, out, _ = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "-o", "json")
    document = json.loads(out)
    assert code == 0
    assert (document["since"], document["until"]) == ("2025-10-04T00:00:00Z", AT)
    assert document["totals"] == {"gpuHours": 190.0, "leases": 3}


def test_two_level_breakdown(capsys, fleet_file):
    """--by owner --by node: org:team on n1 (train 48 GPU-h) and n2 (eval 44), ext:partner on n2 (2)."""
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", SINCE,
                              "--by", "owner", "--by", "node", "-o", "csv")
    assert (code, err) == (0, "")
    assert out == (
        "OWNER,NODE,GPU-HOURS,SHARE,AVG-GPUS,LEASES,PEAK-GPUS\n"
        "org:team,n1,48.0,0.5106,2.0,1,8\n"
        "org:team,n2,44.0,0.4681,1.83,1,2\n"
        "ext:partner,n2,2.0,0.0213,0.08,1,1\n"
    )


def test_strict_exits_3_on_findings(capsys, fleet_file):
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", SINCE,
                              "--strict")
    assert (code, out, err) == (3, TABLE, "")


def test_strict_exits_0_without_findings(capsys, fleet_file):
    """Only namespace team, and only before eval starts: [T0+24h, T0+26h) holds train alone (2 h × 8 = 16)."""
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "-n", "team", "--at", AT,
                              "--since", SINCE, "--until", "2025-11-02T02:00:00Z", "--strict", "-o", "csv",
                              "--no-headers")
    assert (code, out, err) == (0, "org:team,16.0,1.0,8.0,1,8\n", "")


def test_empty_window(capsys, fleet_file):
    """Nothing ran in October: no rows; stderr says so, -o json still prints the empty document."""
    args = ("leases", "audit", "--snapshot", fleet_file, "--at", AT, "--since", "2025-10-01", "--until", "2025-10-02")
    assert run_main(capsys, *args) == (
        0, "", "No leases found between 2025-10-01T00:00:00Z and 2025-10-02T00:00:00Z.\n"
    )
    code, out, _ = run_main(capsys, *args, "-o", "json")
    assert code == 0
    assert json.loads(out) == {"since": "2025-10-01T00:00:00Z", "until": "2025-10-02T00:00:00Z", "rows": [],
                               "totals": {"gpuHours": 0.0, "leases": 0}, "findings": []}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        # a time that cannot be read is a bad value, exit 1 like --at (issue 2: bad input exits 1)
        (("--since", "yesterday"), 1, "error: --since: 'yesterday' is not a time: use RFC 3339 "
         "(2025-11-01T00:15:00Z), a date, or a duration back from --at (7d, 24h)\n"),
        (("--since", "2025-11-03", "--until", "2025-11-02"), 1,
         "error: --since (2025-11-03T00:00:00Z) must be before --until (2025-11-02T00:00:00Z)\n"),
        (("--since", "99999999d"), 1, "error: --since: '99999999d' reaches back before 1970\n"),
        # flags used wrongly are bad usage, exit 2
        (("--by", "owner", "--by", "owner"), 2, "error: --by: each dimension at most once (got owner, owner)\n"
                                                 "See 'kubectl runs leases audit --help' for usage.\n"),
    ],
    ids=["bad-time", "empty-window", "out-of-range", "repeated-by"],
)
def test_bad_flag_values(capsys, fleet_file, args, code, message):
    assert run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--at", AT, *args) == (code, "", message)


def test_unknown_dimension_is_a_click_usage_error(capsys, fleet_file):
    code, out, err = run_main(capsys, "leases", "audit", "--snapshot", fleet_file, "--by", "rack")
    assert (code, out) == (2, "")
    assert err == ("error: invalid value for '--by': 'rack' is not one of 'owner', 'envelope', 'flavor', 'run', "
                   "'node'.\nSee 'kubectl runs leases audit --help' for usage.\n")


def test_global_flags_before_the_command_words(fleet_file):
    """kubectl habits: -o and --at may stand before ``leases audit``."""
    result = CliRunner().invoke(cli, ["-o", "json", "--at", AT, "leases", "audit", "--snapshot", fleet_file,
                                      "--since", SINCE])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == JSON
