"""``kubectl runs plan RUN`` end to end: exact stdout, stderr and exit code on a small snapshot, and the cases of
the example fleet (API.md §3 Plan, §5).

The small fleet, evaluated at T0+10h = 2025-11-01T10:00:00Z:

- nodes n1, n2: 8 H100 GPUs each, domain d1; Budget team/b (owner org:team), envelope ``west`` funds 16;
- ``team/busy`` (Running) holds n1 (8 GPUs, paid by west) and reports completion at 2025-11-02T00:00:00Z;
- ``team/job`` (Pending) wants 16 GPUs in groups of 8.

So: need 16; n2 is free: 8 free, one group of 8 placeable; west has 16 − 8 = 8 of headroom: fundable 8; deficit
16 − min(8, 8) = 8 (capacity 8, funding 8). At 2025-11-02T00:00Z busy gives back n1 and its 8 funded GPUs:
both cover 16 — reported. Remedies: Wait for busy (8), and the lottery over busy's one group (8).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from builders import at, budget, envelope, lease, node, run, run_cli, slots, write_fleet

AT = "2025-11-01T10:00:00Z"
EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")
EXAMPLE_AT = "2025-11-20T12:00:00Z"

FLEET = (
    node("n1"), node("n2"),
    budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=16)]),
    run("busy", "team", gpus=8, eta=at(days=1)),
    lease("busy-g0", "team", owner="org:team", run_name="busy", slot_list=slots("n1", 8), start=at(hours=1)),
    run("job", "team", gpus=16, group_gpus=8, phase="Pending"),
)

TABLE = """\
team/job is short by 8 GPUs because only 8 of 16 fit and only 8 can be funded.
Earliest start: 2025-11-02 00:00 UTC (in 14 hours), by reported completion times.

           GPUS  DETAIL
NEED         16  width 16 (2 groups of 8), 0 held
PLACEABLE     8  8 free on 2 schedulable H100 nodes; groups of 8
FUNDABLE      8  own 8 (1 envelope)
DEFICIT       8  capacity 8, funding 8

Reasons:
CODE                  MESSAGE
InsufficientBudget    the H100 envelopes it may use have 8 GPUs of headroom (own 8); it needs 16
InsufficientCapacity  8 H100 GPUs are free on 2 schedulable nodes, 8 of them in whole groups of 8;
                      it needs 16

Remedies:
#  KIND     GPUS  MESSAGE
1  Wait        8  wait until 2025-11-02 00:00 UTC (in 14 hours): team/busy reports completion by
                  then, freeing 8
2  Lottery     8  when a reservation for it activates, a seeded lottery over 1 group in scope frees
                  the remaining 8 (unfunded first, then borrowed, shared, owned)

Capacity by fabric domain (most placeable first):
DOMAIN  NODES  FREE  PLACEABLE  GROUPS
d1          2     8          8       1

Funding sources:
RELATION  OWNER     BUDGET  ENVELOPE  HEADROOM  USABLE
own       org:team  team/b  west             8       8
"""

JSON = {
    "run": "team/job",
    "at": "2025-11-01T10:00:00Z",
    "need": 16,
    "width": {"min": 16, "max": 16, "desired": 16, "allocated": 0},
    "capacity": {
        "freeGPUs": 8,
        "placeableGPUs": 8,
        "domains": [{"domain": "d1", "freeGPUs": 8, "placeableGPUs": 8, "groups": 1}],
    },
    "funding": {
        "fundableGPUs": 8,
        "sources": [{"namespace": "team", "budget": "b", "envelope": "west", "owner": "org:team",
                     "relation": "own", "headroomGPUs": 8, "usableGPUs": 8}],
    },
    "deficitGPUs": 8,
    "capacityDeficitGPUs": 8,
    "fundingDeficitGPUs": 8,
    "reasons": [
        {"code": "InsufficientBudget",
         "message": "the H100 envelopes it may use have 8 GPUs of headroom (own 8); it needs 16"},
        {"code": "InsufficientCapacity",
         "message": "8 H100 GPUs are free on 2 schedulable nodes, 8 of them in whole groups of 8; it needs 16"},
    ],
    "remedies": [
        {"kind": "Wait", "target": "team/busy", "gpus": 8,
         "message": "wait until 2025-11-02 00:00 UTC (in 14 hours): team/busy reports completion by then, "
                    "freeing 8"},
        {"kind": "Lottery", "target": "team/job", "gpus": 8,
         "message": "when a reservation for it activates, a seeded lottery over 1 group in scope frees the "
                    "remaining 8 (unfunded first, then borrowed, shared, owned)"},
    ],
    "forecast": {"earliestStart": "2025-11-02T00:00:00Z", "confidence": "reported"},
    "reservation": None,  # no pending Reservation: no draw to show
}


@pytest.fixture
def fleet(tmp_path: Path) -> str:
    return write_fleet(tmp_path / "fleet.yaml", FLEET)


def test_plan_table(capsys, fleet):
    """The one-line answer, the forecast, the figures, then reasons, remedies, domains and funding sources."""
    assert run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "--at", AT) == (0, TABLE, "")


def test_plan_table_fits_100_columns_and_wide_keeps_messages_whole(capsys, fleet):
    """Default mode wraps prose to 100 columns; -o wide adds TARGET and keeps each message on one line."""
    _, out, _ = run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "--at", AT)
    assert max(len(line) for line in out.splitlines()) <= 100
    _, wide, _ = run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "--at", AT, "-o", "wide")
    assert "#  KIND     GPUS  TARGET     MESSAGE" in wide
    assert ("1  Wait        8  team/busy  wait until 2025-11-02 00:00 UTC (in 14 hours): team/busy reports "
            "completion by then, freeing 8") in wide


def test_plan_json(capsys, fleet):
    """-o json is exactly the API.md §5 plan object."""
    code, out, err = run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "--at", AT, "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == JSON
    assert list(json.loads(out)) == list(JSON)


def test_plan_yaml_is_the_same_document(capsys, fleet):
    code, out, _ = run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "--at", AT, "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(out) == JSON


def test_flags_may_stand_before_the_command(capsys, fleet):
    """``kubectl runs -n team -o json plan job`` is ``kubectl runs plan job -n team -o json``."""
    before = run_cli(capsys, "-n", "team", "-o", "json", "--snapshot", fleet, "--at", AT, "plan", "job")
    after = run_cli(capsys, "plan", "job", "-n", "team", "-o", "json", "--snapshot", fleet, "--at", AT)
    assert before == after
    assert before[0] == 0


def test_an_unknown_run_is_one_line_on_stderr_and_exit_1(capsys, fleet):
    assert run_cli(capsys, "plan", "nope", "-n", "team", "--snapshot", fleet, "--at", AT) == (
        1, "", "error: run team/nope not found\n",
    )


def test_the_run_is_looked_up_in_the_kubeconfig_context_namespace(capsys, fleet, tmp_path, monkeypatch):
    """Without -n: the namespace of the kubeconfig's current context (team), as kubectl does."""
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(config))
    code, out, _ = run_cli(capsys, "plan", "job", "--snapshot", fleet, "--at", AT, "-o", "json")
    assert (code, json.loads(out)["run"]) == (0, "team/job")


def test_an_output_format_plan_cannot_print_is_a_usage_error(capsys, fleet):
    code, out, err = run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "-o", "csv")
    assert (code, out) == (2, "")
    assert err == ('error: unable to match a printer suitable for the output format "csv", allowed formats are: '
                   "json,table,wide,yaml\nSee 'kubectl runs plan --help' for usage.\n")


def test_a_missing_run_argument_is_a_usage_error(capsys, fleet):
    code, _, err = run_cli(capsys, "plan", "--snapshot", fleet)
    assert code == 2
    assert err == "error: missing argument 'RUN'.\nSee 'kubectl runs plan --help' for usage.\n"


# --- the example fleet (examples/fleet.yaml, at its stamp 2025-11-20T12:00:00Z) -----------------------------------


def example_plan(capsys, namespace: str, name: str) -> dict:
    code, out, err = run_cli(capsys, "plan", name, "-n", namespace, "--snapshot", EXAMPLE, "-o", "json")
    assert (code, err) == (0, "")
    return json.loads(out)


def test_example_pretrain_32_is_short_on_capacity_and_funding(capsys):
    """rai-sys/pretrain-32 wants 32 in groups of 16. Every schedulable H100 slot is held (gpu-a-04 is out of
    service, gpu-b-04 cordoned): placeable 0. Funding: own west-h100 is full (32/32), the ancestor pool has 8,
    the sibling eval 8, the sponsor vision 8 (24 − 16 used; lending room 16 − 8 borrowed): 24. Deficit 32
    (capacity 32, funding 8). train-16 reports completion at 11-21 06:00 and elastic-24 at 11-22 00:00, when
    32 are free in two whole groups of 16: reported 2025-11-22T00:00:00Z."""
    data = example_plan(capsys, "rai-sys", "pretrain-32")
    assert (data["at"], data["need"], data["capacity"]["placeableGPUs"], data["funding"]["fundableGPUs"]) == (
        EXAMPLE_AT, 32, 0, 24,
    )
    assert (data["deficitGPUs"], data["capacityDeficitGPUs"], data["fundingDeficitGPUs"]) == (32, 32, 8)
    assert [r["code"] for r in data["reasons"]] == ["InsufficientBudget", "InsufficientCapacity"]
    assert [(r["kind"], r["target"], r["gpus"]) for r in data["remedies"]] == [
        ("DropSpare", "rai-eval/eval-6-g0-spare", 2),
        ("Shrink", "rai-sys/elastic-24", 8),
        ("Wait", "rai-sys/elastic-24", 32),
        ("Lottery", "rai-sys/pretrain-32-r1", 22),
    ]
    assert data["forecast"] == {"earliestStart": "2025-11-22T00:00:00Z", "confidence": "reported"}


def test_example_lab_job_is_in_an_unbound_namespace(capsys):
    """shared-lab has Budgets of org:ai:lab:a and org:ai:lab:b: UnboundNamespace, nothing fundable, no remedy."""
    data = example_plan(capsys, "shared-lab", "lab-job")
    assert [r["code"] for r in data["reasons"]] == ["UnboundNamespace", "InsufficientCapacity"]
    assert (data["funding"]["fundableGPUs"], data["remedies"]) == (0, [])
    assert data["forecast"] == {"earliestStart": None, "confidence": "unknown"}


def test_example_mi_sweep_waits_for_its_window(capsys):
    """ai-platform/mi-sweep (owner org:ai:rai) wants 8 MI300X; its own dec-mi300 opens 2025-12-01: WindowNotOpen.
    4 are free (ext-4 holds 4 of amd-c-01, unfunded: reclaimable). Window-aligned 2025-12-01T00:00:00Z."""
    data = example_plan(capsys, "ai-platform", "mi-sweep")
    assert [r["code"] for r in data["reasons"]] == ["WindowNotOpen", "InsufficientCapacity"]
    assert [(r["kind"], r["target"], r["gpus"]) for r in data["remedies"]] == [
        ("ReclaimUnfunded", "partner/ext-4", 4), ("Wait", "org:ai:rai", 16),
    ]
    assert data["forecast"] == {"earliestStart": "2025-12-01T00:00:00Z", "confidence": "window-aligned"}


def test_example_elastic_24_plans_toward_its_desired_width(capsys):
    """rai-sys/elastic-24 runs 16 of desired 24: need 8; train-16's completion frees room at 11-21 06:00."""
    data = example_plan(capsys, "rai-sys", "elastic-24")
    assert (data["need"], data["width"]) == (8, {"min": 8, "max": 32, "desired": 24, "allocated": 16})
    assert data["forecast"] == {"earliestStart": "2025-11-21T06:00:00Z", "confidence": "reported"}


def test_every_example_plan_table_fits_100_columns(capsys):
    for namespace, name in [("rai-sys", "pretrain-32"), ("shared-lab", "lab-job"), ("ai-platform", "mi-sweep"),
                            ("rai-sys", "elastic-24"), ("rai-sys", "train-16"), ("rai-sys", "sft-8")]:
        code, out, err = run_cli(capsys, "plan", name, "-n", namespace, "--snapshot", EXAMPLE)
        assert (code, err) == (0, "")
        assert max(len(line) for line in out.splitlines()) <= 100, name
