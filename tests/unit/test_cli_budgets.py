"""``kubectl runs budgets usage`` end to end on a small snapshot, at a fixed instant: exact stdout, stderr and exit
code for every output format and flag (API.md §5).

The fleet, evaluated at T0+24h = 2025-11-02T00:00:00Z (T0 = 2025-11-01T00:00:00Z; windows [T0, 2025-12-01) unless
said otherwise):

- rai/rai (owner org:ai:rai): ``west`` H100 funds 16, maxGPUHours 1000, lends to ``org:ai:*`` at most 4 GPUs;
  ``east`` MI300X funds 8; aggregate cap ``all`` = west + east <= 20.
- rai-sys/sys (owner org:ai:rai:sys): ``west`` H100 funds 8.
- ext/ext (owner org:ext): ``west`` H100 funds 4 in [2025-12-01, 2026-01-01) — not open yet.

Leases:
- rai-sys/train-g0: org:ai:rai:sys, 8 GPUs from T0+12h, paid by rai-sys/sys west -> 8 owned; 12 h × 8 = 96 GPU-h.
- vision/v-g0: org:ai:mm:vision (a cousin: borrowed), 6 GPUs from T0, paid by rai/rai west -> lending cap 4:
  4 borrowed, 2 unfunded (Overdraft); 24 h × 6 = 144 GPU-h.
- rai-sys/big-g0: org:ai:rai:sys (a child of org:ai:rai: shared), 4 GPUs from T0+18h, paid by rai/rai west ->
  4 shared; 6 h × 4 = 24 GPU-h. So rai west: used 8 of 16, headroom 8, unfunded 2, 168 GPU-h, 832 left.
- rai/mi-g0: org:ai:rai, 2 Spare GPUs from T0+23h, paid by rai/rai east -> 2 owned, 2 spare; 1 h × 2 = 2 GPU-h.
- ext/x-g0: org:ext, 2 GPUs from T0, paid by ext/ext west whose window has not opened -> 2 unfunded (Overdraft),
  0 GPU-h, headroom 0.

Totals: open windows fund 16+8+8 = 32, used 8+2+8 = 18, headroom 8+6+0 (+0 for ext) = 14, unfunded 2+2 = 4;
aggregate ``all`` used 8+2 = 10 of 20.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from builders import at, budget, envelope, lease, to_manifest
from click.testing import CliRunner

from kubectl_runs.cli.main import cli, main

AT = "2025-11-02T00:00:00Z"

FLEET = (
    budget(
        "rai", "rai", owner="org:ai:rai",
        envelopes=[
            envelope("west", flavor="H100", concurrency=16, max_gpu_hours=1000,
                     lending={"allow": True, "to": ["org:ai:*"], "maxConcurrency": 4}),
            envelope("east", flavor="MI300X", concurrency=8),
        ],
        aggregate_caps=[{"name": "all", "envelopes": ["west", "east"], "maxConcurrency": 20}],
    ),
    budget("sys", "rai-sys", owner="org:ai:rai:sys", envelopes=[envelope("west", flavor="H100", concurrency=8)]),
    budget("ext", "ext", owner="org:ext",
           envelopes=[envelope("west", flavor="H100", concurrency=4, start="2025-12-01T00:00:00Z",
                               end="2026-01-01T00:00:00Z")]),
    lease("train-g0", "rai-sys", owner="org:ai:rai:sys", gpus=8, run_name="train", paid_by=("sys", "west"),
          start=at(hours=12)),
    lease("v-g0", "vision", owner="org:ai:mm:vision", gpus=6, run_name="v", paid_by=("rai", "rai", "west")),
    lease("big-g0", "rai-sys", owner="org:ai:rai:sys", gpus=4, run_name="big", paid_by=("rai", "rai", "west"),
          start=at(hours=18)),
    lease("mi-g0", "rai", owner="org:ai:rai", gpus=2, run_name="mi", role="Spare", flavor="MI300X",
          paid_by=("rai", "east"), start=at(hours=23)),
    lease("x-g0", "ext", owner="org:ext", gpus=2, run_name="x", paid_by=("ext", "west")),
)

TABLE = """\
Budgets at 2025-11-02 00:00Z: 4 envelopes, 2 findings
GPUs in open windows: 18 of 32 used, 14 headroom; 4 unfunded

NAMESPACE  BUDGET  ENVELOPE  FLAVOR  USED  HEADROOM  UNFUNDED  GPU-HOURS  HOURS-LEFT
ext        ext     west      H100     0/4         0         2        0.0           -
rai        rai     east      MI300X   2/8         6         0        2.0           -
rai        rai     west      H100    8/16         8         2        168         832
rai-sys    sys     west      H100     8/8         0         0       96.0           -

Aggregate caps:
NAMESPACE  BUDGET  CAP  ENVELOPES   USED  HEADROOM
rai        rai     all  west,east  10/20        10

Findings:
KIND       LEASE        DETAIL
Overdraft  ext/x-g0     charged to ext/ext envelope west outside its window [2025-12-01T00:00:00Z,
                        2026-01-01T00:00:00Z): 2 GPUs unfunded
Overdraft  vision/v-g0  rai/rai envelope west lends at most 4 GPUs (lending.maxConcurrency): 2 of
                        its 6 GPUs are unfunded
"""

WIDE_ROWS = """\
NAMESPACE  BUDGET  OWNER           ENVELOPE  FLAVOR  WINDOW            CONCURRENCY  USED  HEADROOM  OWNED  SHARED  BORROWED  UNFUNDED  SPARE  GPU-HOURS  MAX-GPU-HOURS  HOURS-LEFT
ext        ext     org:ext         west      H100    opens in a month            4   0/4         0      0       0         0         2      0        0.0              -           -
rai        rai     org:ai:rai      east      MI300X  ends in a month             8   2/8         6      2       0         0         0      2        2.0              -           -
rai        rai     org:ai:rai      west      H100    ends in a month            16  8/16         8      0       4         4         2      0        168          1,000         832
rai-sys    sys     org:ai:rai:sys  west      H100    ends in a month             8   8/8         0      8       0         0         0      0       96.0              -           -
"""

CSV = """\
NAMESPACE,BUDGET,OWNER,ENVELOPE,FLAVOR,WINDOW,CONCURRENCY,USED,HEADROOM,OWNED,SHARED,BORROWED,UNFUNDED,SPARE,GPU-HOURS,MAX-GPU-HOURS,HOURS-LEFT
ext,ext,org:ext,west,H100,false,4,0,0,0,0,0,2,0,0.0,,
rai,rai,org:ai:rai,east,MI300X,true,8,2,6,2,0,0,0,2,2.0,,
rai,rai,org:ai:rai,west,H100,true,16,8,8,0,4,4,2,0,168.0,1000.0,832.0
rai-sys,sys,org:ai:rai:sys,west,H100,true,8,8,0,8,0,0,0,0,96.0,,
"""

# API.md §5, budgets usage: the top-level keys and each envelope's keys, exactly.
TOP_KEYS = ["at", "envelopes", "aggregates", "findings"]
ENVELOPE_KEYS = [
    "namespace", "budget", "owner", "envelope", "flavor", "windowActive", "concurrency", "usedGPUs", "headroomGPUs",
    "ownedGPUs", "sharedGPUs", "borrowedGPUs", "unfundedGPUs", "spareGPUs", "consumedGPUHours", "maxGPUHours",
    "gpuHoursHeadroom",
]
FINDING_KEYS = ["kind", "lease", "detail"]


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """The fleet as a multi-document YAML file ``fleet.yaml`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump_all([to_manifest(o) for o in FLEET], sort_keys=False))
    return "fleet.yaml"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def usage(capsys, *flags: str) -> tuple[int, str, str]:
    return run_cli(capsys, "budgets", "usage", "--snapshot", "fleet.yaml", "--at", AT, *flags)


def test_table(fleet, capsys):
    assert usage(capsys) == (0, TABLE, "")
    assert max(len(line) for line in TABLE.splitlines()) <= 100  # every table fits 100 columns (findings wrap)
    assert max(len(line) for line in TABLE.splitlines()[:2]) <= 100


def test_wide(fleet, capsys):
    code, out, err = usage(capsys, "-o", "wide")
    assert (code, err) == (0, "")
    unwrapped = TABLE.replace(TABLE.split("\n\n")[1] + "\n", WIDE_ROWS).replace(
        "[2025-12-01T00:00:00Z,\n                        2026", "[2025-12-01T00:00:00Z, 2026").replace(
        "2 of\n                        its 6", "2 of its 6")  # -o wide keeps each finding on one line
    assert out == unwrapped


def test_json_has_exactly_the_api_keys(fleet, capsys):
    code, out, err = usage(capsys, "-o", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == TOP_KEYS
    assert data["at"] == AT
    assert [list(row) for row in data["envelopes"]] == [ENVELOPE_KEYS] * 4
    assert [list(f) for f in data["findings"]] == [FINDING_KEYS] * 2
    west = next(r for r in data["envelopes"] if (r["namespace"], r["envelope"]) == ("rai", "west"))
    assert west == {
        "namespace": "rai", "budget": "rai", "owner": "org:ai:rai", "envelope": "west", "flavor": "H100",
        "windowActive": True, "concurrency": 16, "usedGPUs": 8, "headroomGPUs": 8, "ownedGPUs": 0,
        "sharedGPUs": 4, "borrowedGPUs": 4, "unfundedGPUs": 2, "spareGPUs": 0, "consumedGPUHours": 168.0,
        "maxGPUHours": 1000.0, "gpuHoursHeadroom": 832.0,
    }
    ext = data["envelopes"][0]
    assert (ext["windowActive"], ext["headroomGPUs"], ext["unfundedGPUs"], ext["gpuHoursHeadroom"]) == (
        False, 0, 2, None)
    assert data["aggregates"] == [{
        "namespace": "rai", "budget": "rai", "owner": "org:ai:rai", "name": "all", "envelopes": ["west", "east"],
        "maxConcurrency": 20, "usedGPUs": 10, "headroomGPUs": 10,
    }]
    assert [(f["kind"], f["lease"]) for f in data["findings"]] == [("Overdraft", "ext/x-g0"),
                                                                   ("Overdraft", "vision/v-g0")]


def test_yaml_is_the_json_document(fleet, capsys):
    _, as_json, _ = usage(capsys, "-o", "json")
    code, out, err = usage(capsys, "-o", "yaml")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == json.loads(as_json)
    assert out.startswith("at: '2025-11-02T00:00:00Z'\nenvelopes:\n- namespace: ext\n")


def test_csv(fleet, capsys):
    assert usage(capsys, "-o", "csv") == (0, CSV, "")


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("table", "ext      ext  west  H100     0/4  0  2   0.0    -\n"
                  "rai      rai  east  MI300X   2/8  6  0   2.0    -\n"
                  "rai      rai  west  H100    8/16  8  2   168  832\n"
                  "rai-sys  sys  west  H100     8/8  0  0  96.0    -\n"),
        ("csv", CSV.split("\n", 1)[1]),
    ],
    ids=["table", "csv"],
)
def test_no_headers(fleet, capsys, fmt, expected):
    """For pipes: the rows only (no summary, header or sections)."""
    assert usage(capsys, "-o", fmt, "--no-headers") == (0, expected, "")


@pytest.mark.parametrize(
    ("flags", "rows"),
    [
        (["--owner", "org:ai:rai"], [("rai", "east"), ("rai", "west"), ("rai-sys", "west")]),
        (["--owner", "org:ai:rai:sys"], [("rai-sys", "west")]),
        (["--owner", "org:ai"], [("rai", "east"), ("rai", "west"), ("rai-sys", "west")]),
        (["--flavor", "MI300X"], [("rai", "east")]),
        (["--owner", "org:ai:rai", "--flavor", "H100"], [("rai", "west"), ("rai-sys", "west")]),
        (["-n", "rai-sys"], [("rai-sys", "west")]),
        (["--namespace=rai"], [("rai", "east"), ("rai", "west")]),
        (["-n", "rai", "-A"], [("ext", "west"), ("rai", "east"), ("rai", "west"), ("rai-sys", "west")]),
    ],
    ids=["owner-and-descendants", "owner-leaf", "owner-ancestor", "flavor", "owner-and-flavor", "namespace",
         "namespace-long", "all-namespaces-wins"],
)
def test_filters(fleet, capsys, flags, rows):
    code, out, err = usage(capsys, "-o", "json", *flags)
    assert (code, err) == (0, "")
    assert [(r["namespace"], r["envelope"]) for r in json.loads(out)["envelopes"]] == rows


def test_owner_filter_keeps_the_findings_of_kept_envelopes(fleet, capsys):
    """--owner org:ai:rai keeps rai west's lending Overdraft, not ext's window Overdraft; the aggregate of rai
    stays."""
    _, out, _ = usage(capsys, "-o", "json", "--owner", "org:ai:rai")
    data = json.loads(out)
    assert [f["lease"] for f in data["findings"]] == ["vision/v-g0"]
    assert [a["name"] for a in data["aggregates"]] == ["all"]


def test_narrowing_to_a_namespace_keeps_the_numbers(fleet, capsys):
    """-n rai: the rai rows are the same as without -n (rai west still shows the 4 borrowed + 4 shared GPUs of
    leases that live in other namespaces), and the lending finding about vision/v-g0 stays (its envelope is in
    rai)."""
    _, everything, _ = usage(capsys, "-o", "json")
    code, narrowed, err = usage(capsys, "-o", "json", "-n", "rai")
    assert (code, err) == (0, "")
    rai_rows = [r for r in json.loads(everything)["envelopes"] if r["namespace"] == "rai"]
    assert json.loads(narrowed)["envelopes"] == rai_rows
    assert [f["lease"] for f in json.loads(narrowed)["findings"]] == ["vision/v-g0"]


@pytest.mark.parametrize(
    "argv",
    [
        ["budgets", "usage", "-o", "json", "--snapshot", "fleet.yaml", "--at", AT],
        ["-o", "json", "budgets", "usage", "--snapshot", "fleet.yaml", "--at", AT],
        ["--snapshot", "fleet.yaml", "--at", AT, "-o", "json", "budgets", "usage"],
        ["budgets", "-o", "json", "--at", AT, "usage", "--snapshot", "fleet.yaml"],
        ["--at", AT, "budgets", "--snapshot=fleet.yaml", "usage", "--output=json"],
    ],
    ids=["after", "before", "all-before", "between", "mixed-equals"],
)
def test_flags_before_or_after_the_command_words(fleet, capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert (code, err) == (0, "")
    assert [r["envelope"] for r in json.loads(out)["envelopes"]] == ["west", "east", "west", "west"]
    assert json.loads(out)["at"] == AT


def test_no_budgets_in_a_namespace(fleet, capsys):
    """Like kubectl: the empty result is said on stderr, stdout stays empty, exit 0; -o json still prints the
    (empty) document."""
    assert usage(capsys, "-n", "nowhere") == (0, "", "No budgets found in nowhere namespace.\n")
    code, out, err = usage(capsys, "-n", "nowhere", "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"at": AT, "envelopes": [], "aggregates": [], "findings": []}


def test_no_budgets_at_all(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.yaml").write_text("")
    assert run_cli(capsys, "budgets", "usage", "--snapshot", "empty.yaml", "--at", AT) == (
        0, "", "No budgets found.\n")


@pytest.mark.parametrize(
    ("fmt", "allowed"),
    [("xml", "csv,json,table,wide,yaml"), ("JSON", "csv,json,table,wide,yaml"), ("name", "csv,json,table,wide,yaml")],
    ids=["unknown", "upper-case", "kubectl-only"],
)
def test_a_bad_output_format_is_a_usage_error(fleet, capsys, fmt, allowed):
    assert usage(capsys, "-o", fmt) == (
        2, "",
        f'error: unable to match a printer suitable for the output format "{fmt}", allowed formats are: {allowed}\n'
        "See 'kubectl runs budgets usage --help' for usage.\n",
    )


@pytest.mark.parametrize("value", ["yesterday", "2025-11-31T00:00:00Z", "12:00"], ids=["word", "no-such-day", "time-only"])
def test_a_bad_at_is_one_line_and_exit_1(fleet, capsys, value):
    expected = f"error: --at: {value!r} is not a time: use RFC 3339 (2025-11-01T00:15:00Z)\n"
    assert run_cli(capsys, "budgets", "usage", "--snapshot", "fleet.yaml", "--at", value) == (1, "", expected)
    # checked before anything is read: even with a snapshot that does not exist, the --at error comes first
    assert run_cli(capsys, "--at", value, "budgets", "usage", "--snapshot", "missing.yaml") == (1, "", expected)


def test_without_at_the_snapshot_stamp_is_the_clock(tmp_path, monkeypatch, capsys):
    """A List stamped 2025-11-01T10:00:00Z: evaluated then, the 6-GPU vision lease (from T0) has used
    10 h × 6 = 60 GPU-hours of rai west and the 2-GPU x lease nothing (its window is not open)."""
    monkeypatch.chdir(tmp_path)
    doc = {"apiVersion": "v1", "kind": "List",
           "metadata": {"annotations": {"jobtree.dev/snapshot-time": "2025-11-01T10:00:00Z"}},
           "items": [to_manifest(o) for o in FLEET]}
    (tmp_path / "stamped.json").write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "budgets", "usage", "--snapshot", "stamped.json", "-o", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["at"] == "2025-11-01T10:00:00Z"
    west = next(r for r in data["envelopes"] if (r["namespace"], r["envelope"]) == ("rai", "west"))
    assert (west["usedGPUs"], west["consumedGPUHours"]) == (4, 60.0)


def test_through_click_runner(fleet):
    """The same command through click's CliRunner (no error boundary): stdout and stderr kept apart."""
    result = CliRunner().invoke(cli, ["budgets", "usage", "--snapshot", "fleet.yaml", "--at", AT])
    assert result.exit_code == 0, result.output
    assert result.stdout == TABLE
    assert result.stderr == ""


def test_stdin_through_click_runner(fleet, tmp_path):
    result = CliRunner().invoke(
        cli, ["budgets", "usage", "--snapshot", "-", "--at", AT, "-o", "csv"],
        input=(tmp_path / fleet).read_text(),
    )
    assert (result.exit_code, result.stdout, result.stderr) == (0, CSV, "")


def test_the_example_fleet(capsys):
    """The README's example: it loads, every row has exactly the API keys, and stderr stays empty."""
    example = str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")
    code, out, err = run_cli(capsys, "budgets", "usage", "--snapshot", example, "-o", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == TOP_KEYS
    assert data["envelopes"] and all(list(row) == ENVELOPE_KEYS for row in data["envelopes"])
    assert all(list(f) == FINDING_KEYS for f in data["findings"])
    for row in data["envelopes"]:
        assert row["usedGPUs"] == row["ownedGPUs"] + row["sharedGPUs"] + row["borrowedGPUs"] <= row["concurrency"]
        assert 0 <= row["headroomGPUs"] <= row["concurrency"]
