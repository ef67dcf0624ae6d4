"""``kubectl runs explain RUN`` end to end: everything about one run on one screen, and exactly the API.md §5 keys
in JSON.

The small fleet, evaluated at T0+10h = 2025-11-01T10:00:00Z: nodes n1, n2 (8 H100 GPUs, domain d1); Budget team/b
(owner org:team), envelope ``west`` funds 16.

- ``team/busy`` (Running, 8 GPUs) holds n1 through ``busy-g0`` (open since T0+1h, paid by west: 8 owned). Its
  group 1, ``busy-g1`` on n2, was taken at T0+5h by the lottery of reservation ``other/r1`` with seed ``0xabc``
  (RandomPreempt); that reservation is not in the snapshot, so the draw cannot be checked ("no record").
- ``team/job`` (Pending) wants 16 GPUs in groups of 8 (its plan is the one of test_cli_plan.py, minus busy's ETA).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from builders import (
    at,
    budget,
    envelope,
    lease,
    node,
    preempted,
    run,
    run_cli,
    slots,
    snapshot,
    write_fleet,
)

from kubectl_runs.engine.explain import explain_run
from kubectl_runs.engine.reports import plain
from kubectl_runs.render import render
from kubectl_runs.views.explain import explain_document

AT = "2025-11-01T10:00:00Z"
EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")

FLEET = (
    node("n1"), node("n2"),
    budget("b", "team", owner="org:team", envelopes=[envelope("west", concurrency=16)]),
    run("busy", "team", gpus=8),
    lease("busy-g0", "team", owner="org:team", run_name="busy", slot_list=slots("n1", 8), start=at(hours=1)),
    preempted(
        lease("busy-g1", "team", owner="org:team", run_name="busy", group=1, slot_list=slots("n2", 8),
              start=at(hours=1)),
        ended=at(hours=5), reservation="other/r1", seed="0xabc",
    ),
    run("job", "team", gpus=16, group_gpus=8, phase="Pending"),
)

BUSY_TABLE = """\
Run:         team/busy, Running
Request:     8 H100 GPUs
Width:       min 8, max 8, desired 8, allocated 8
Funding:     owned 8, shared 0, borrowed 0, unfunded 0 (owner org:team)
Plan:        team/busy is running at full width (8 GPUs): nothing to plan.
Reservation: none

Leases:
LEASE    GROUP  ROLE    GPUS  CLASS  STARTED      STATUS
busy-g0      0  Active     8  owned  9 hours ago  open
busy-g1      1  Active     8  -      9 hours ago  closed 5 hours ago (RandomPreempt)

Preemptions:
RESERVATION  SEED   AT           GPUS  DRAW  VERIFIED
other/r1     0xabc  5 hours ago     8  -     no record
"""


@pytest.fixture
def fleet(tmp_path: Path) -> str:
    return write_fleet(tmp_path / "fleet.yaml", FLEET)


def explain_json(capsys, name: str, namespace: str, *extra: str) -> dict:
    code, out, err = run_cli(capsys, "explain", name, "-n", namespace, "-o", "json", *extra)
    assert (code, err) == (0, "")
    return json.loads(out)


def test_explain_table(capsys, fleet):
    """Header lines (run, request, width, funding, plan, reservation), then leases and preemptions."""
    assert run_cli(capsys, "explain", "busy", "-n", "team", "--snapshot", fleet, "--at", AT) == (0, BUSY_TABLE, "")


def test_explain_json_keys_and_values(capsys, fleet):
    """API.md §5: run, phase, width, funding{owned, shared, borrowed, unfunded, lenders}, plan, reservation,
    preemptions (each with seed and verified), leases."""
    data = explain_json(capsys, "busy", "team", "--snapshot", fleet, "--at", AT)
    assert list(data) == ["run", "phase", "width", "funding", "plan", "reservation", "preemptions", "leases",
                          "findings"]
    assert (data["run"], data["phase"], data["reservation"]) == ("team/busy", "Running", None)
    assert data["width"] == {"min": 8, "max": 8, "desired": 8, "allocated": 8}
    assert data["funding"] == {"owned": 8, "shared": 0, "borrowed": 0, "unfunded": 0, "lenders": []}
    assert data["preemptions"] == [
        {"reservation": "other/r1", "seed": "0xabc", "at": "2025-11-01T05:00:00Z", "gpus": 8, "verified": None},
    ]
    assert data["leases"] == [
        {"name": "team/busy-g0", "group": 0, "role": "Active", "gpus": 8, "nodes": ["n1"], "paidBy": "team/b/west",
         "start": "2025-11-01T01:00:00Z", "open": True, "class": "owned", "closed": False, "ended": None,
         "closureReason": None},
        {"name": "team/busy-g1", "group": 1, "role": "Active", "gpus": 8, "nodes": ["n2"], "paidBy": "team/b/west",
         "start": "2025-11-01T01:00:00Z", "open": False, "class": None, "closed": True,
         "ended": "2025-11-01T05:00:00Z", "closureReason": "RandomPreempt"},
    ]


def test_explains_plan_is_the_plan_command(capsys, fleet):
    """The ``plan`` key is exactly what ``kubectl runs plan`` prints for the run."""
    data = explain_json(capsys, "job", "team", "--snapshot", fleet, "--at", AT)
    code, out, _ = run_cli(capsys, "plan", "job", "-n", "team", "--snapshot", fleet, "--at", AT, "-o", "json")
    assert code == 0
    assert data["plan"] == json.loads(out)


def test_an_unknown_run_is_one_line_on_stderr_and_exit_1(capsys, fleet):
    assert run_cli(capsys, "explain", "nope", "-n", "team", "--snapshot", fleet) == (
        1, "", "error: run team/nope not found\n",
    )


def test_events_show_when_given():
    """Live, the run's Events come from the cluster source as {type, reason, message, at, count}: explain
    shows them in an Events section (messages wrapped to 100 columns) and lists them under ``events``."""
    world = snapshot(*FLEET)
    events = [{"type": "Warning", "reason": "InsufficientCapacity", "at": "2025-11-01T09:30:00Z", "count": 3,
               "message": "short by 8 GPUs: " + "no free slot in domain d1 " * 5}]
    info = explain_run(world, world.runs_by_key["team/job"], at(hours=10), events=events)
    assert plain(info.report)["events"] == events
    out, err = io.StringIO(), io.StringIO()
    render(explain_document(info, "table"), "table", out, err)
    text = out.getvalue()
    assert "\nEvents:\nLAST SEEN       TYPE     REASON                COUNT  MESSAGE\n" in text
    assert "30 minutes ago  Warning  InsufficientCapacity      3  short by 8 GPUs: no free slot" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_live_explain_asks_the_cluster_for_the_runs_events(capsys, monkeypatch):
    """Without --snapshot the objects and the Events come from the cluster source (stubbed here: the real one
    is exercised by the integration tier)."""
    from kubectl_runs.sources import cluster

    asked = []
    monkeypatch.setattr(cluster, "load_cluster", lambda source: snapshot(*FLEET))

    def recent_events(source, namespace, kind, name, *, uid=""):
        asked.append((namespace, kind, name))
        return [{"type": "Normal", "reason": "Planned", "message": "waiting", "at": AT, "count": 1}]

    monkeypatch.setattr(cluster, "recent_events", recent_events)
    data = explain_json(capsys, "job", "team", "--at", AT)
    assert asked == [("team", "Run", "job")]
    assert data["events"] == [{"type": "Normal", "reason": "Planned", "message": "waiting", "at": AT, "count": 1}]


# --- the example fleet ------------------------------------------------------------------------------------------


def test_example_preempted_run_shows_the_seed_and_that_it_verifies(capsys):
    """shared-lab/lab-scratch-8's only group was reclaimed (unfunded) when rai-sys/bench-16-r1 activated at
    2025-11-14T00:00:00Z with seed 0x842ab08bbd07c729; its status.preemptions records the same. One entry, 8
    GPUs, and the recorded draw replays: verified. (Reclaimed before the lottery, it holds no ticket in the
    draw over the 4 groups left.)"""
    data = explain_json(capsys, "lab-scratch-8", "shared-lab", "--snapshot", EXAMPLE)
    entry = data["preemptions"][0]
    assert len(data["preemptions"]) == 1
    assert {k: entry[k] for k in ("reservation", "seed", "at", "gpus", "verified")} == {
        "reservation": "rai-sys/bench-16-r1", "seed": "0x842ab08bbd07c729", "at": "2025-11-14T00:00:00Z",
        "gpus": 8, "verified": True,
    }
    assert data["phase"] == "Failed"


def test_example_borrowing_run_names_its_lender(capsys):
    """rai-sys/borrow-8's 8 GPUs are paid by mm-vision/vision west-h100 (org:ai:mm:vision lends to org:ai:*)."""
    data = explain_json(capsys, "borrow-8", "rai-sys", "--snapshot", EXAMPLE)
    assert data["funding"] == {"owned": 0, "shared": 0, "borrowed": 8, "unfunded": 0,
                               "lenders": [{"owner": "org:ai:mm:vision", "gpus": 8}]}


def test_example_pending_run_shows_its_reservation(capsys):
    data = explain_json(capsys, "pretrain-32", "rai-sys", "--snapshot", EXAMPLE)
    assert data["reservation"] == {
        "name": "rai-sys/pretrain-32-r1", "state": "Pending", "scope": {"flavor": "H100-80GB", "domain": None},
        "payingEnvelope": {"budget": "rai", "envelope": "west-h100"}, "earliestStart": "2025-11-22T00:00:00Z",
        "activation": None,
    }
    assert (data["plan"]["deficitGPUs"], data["leases"], data["preemptions"]) == (32, [], [])


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("rai-sys", "pretrain-32"), ("rai-sys", "elastic-24"), ("shared-lab", "lab-job"),
     ("ai-platform", "mi-sweep"), ("shared-lab", "lab-scratch-8"), ("rai-eval", "eval-6")],
    ids=["pretrain-32", "elastic-24", "lab-job", "mi-sweep", "lab-scratch-8", "eval-6"],
)
def test_example_explain_fits_one_screen_of_100_columns(capsys, namespace, name):
    code, out, err = run_cli(capsys, "explain", name, "-n", namespace, "--snapshot", EXAMPLE)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert len(lines) <= 50
