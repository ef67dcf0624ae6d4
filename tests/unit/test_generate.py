"""bench/generate.py, the fleet generator of the benchmarks: the same seed gives the same bytes, a generated
fleet loads cleanly with the sizes asked for, and the findings it plants on purpose — one of each kind
``leases audit`` reports — are the only findings any report (or the independent check in bench/check.py,
which looks at every instant of the history) gives. Small sizes, so that it runs in seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kubectl_runs.cli.main import main
from kubectl_runs.sources.files import load_snapshot

REPO = Path(__file__).resolve().parents[2]
SIZE = ("--nodes", "64", "--envelopes", "64", "--leases", "1500")
ALL_KINDS = {"DoubleBooked", "UnknownNode", "UnknownRun", "UnknownEnvelope", "ACLViolation", "Overdraft",
             "UnboundNamespace"}
LEDGER_KINDS = {"UnknownEnvelope", "ACLViolation", "Overdraft", "UnboundNamespace"}  # what `budgets usage` sees


def generate(path: Path, *flags: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.generate", *SIZE, "-o", str(path), *flags],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(Path(f"{path}.meta.json").read_text())


def report(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert err == ""
    return code, json.loads(out)


def planted_leases(meta: dict) -> dict[str, set[str | None]]:
    """kind -> the leases a finding of that kind may name (a double booking has two sides)."""
    return {p["kind"]: {p["lease"], p["also"] or p["lease"]} for p in meta["planted"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> tuple[str, dict]:
    path = tmp_path_factory.mktemp("fleet") / "fleet.json"
    return str(path), generate(path, "--seed", "5")


def test_the_same_seed_gives_the_same_bytes(fleet, tmp_path):
    path, meta = fleet
    again, other = tmp_path / "again.json", tmp_path / "other.json"
    assert generate(again, "--seed", "5") == meta | {"bytes": meta["bytes"]}
    generate(other, "--seed", "6")
    assert again.read_bytes() == Path(path).read_bytes()
    assert other.read_bytes() != Path(path).read_bytes()


def test_it_loads_with_the_sizes_asked_for(fleet):
    """64 nodes of 8 GPUs, exactly 64 envelopes and 1,500 leases (open and closed), stamped with the snapshot
    time; every object is of a kind kubectl-runs reads (no notes)."""
    path, meta = fleet
    snapshot = load_snapshot([path])
    assert snapshot.taken_at == datetime(2025, 11, 20, 12, tzinfo=UTC)
    assert snapshot.notes == ()
    assert len(snapshot.nodes) == 64
    assert {n.gpus for n in snapshot.nodes} == {8}
    assert {n.metadata.labels["gpu.flavor"] for n in snapshot.nodes} >= {"H100-80GB", "MI300X"}
    assert len(snapshot.envelopes_by_key) == 64
    assert len(snapshot.leases) == 1500
    assert len(snapshot.runs) == meta["counts"]["runs"]
    assert len(snapshot.reservations) == meta["counts"]["reservations"]
    reasons = {lease.status.closure_reason for lease in snapshot.leases}
    assert reasons >= {None, "Completed", "NodeFailure"}
    assert reasons & {"RandomPreempt", "ReclaimUnfunded"}  # victims of the recorded activations
    assert {lease.spec.reason for lease in snapshot.leases} >= {"Start", "Grow"}


def test_only_the_planted_findings_at_any_instant(fleet):
    path, _ = fleet
    done = subprocess.run([sys.executable, "-m", "bench.check", path], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert (done.returncode, done.stdout) == (0, f"{path}: only the planted findings\n")


def test_budgets_usage_reports_the_planted_ledger_findings(fleet, capsys):
    path, meta = fleet
    code, doc = report(capsys, "budgets", "usage", "--snapshot", path, "-o", "json")
    planted = planted_leases(meta)
    assert code == 0
    # and the slot kinds of the open leases it counts (#28): the planted UnknownNode lease is open
    assert {f["kind"] for f in doc["findings"]} == LEDGER_KINDS | {"UnknownNode"}
    for finding in doc["findings"]:
        assert finding["lease"] in planted[finding["kind"]], finding


def test_leases_audit_over_the_whole_history_finds_one_of_each_kind(fleet, capsys):
    path, meta = fleet
    code, doc = report(capsys, "leases", "audit", "--snapshot", path, "--since", "2025-01-01", "-o", "json")
    planted = planted_leases(meta)
    assert code == 0
    assert doc["totals"]["leases"] == 1500
    assert sorted(f["kind"] for f in doc["findings"]) == sorted(ALL_KINDS)
    for finding in doc["findings"]:
        assert finding["lease"] in planted[finding["kind"]], finding
    collision = next(f for f in doc["findings"] if f["kind"] == "DoubleBooked")
    other = (planted["DoubleBooked"] - {collision["lease"]}).pop()
    assert other in collision["detail"]  # the two planted leases collide with each other only


def test_seeds_verify_holds_for_every_recorded_activation(fleet, capsys):
    path, meta = fleet
    code, doc = report(capsys, "seeds", "verify", "--snapshot", path, "-o", "json")
    assert code == 0
    assert len(doc["reservations"]) == meta["counts"]["activations"] >= 1
    assert all(r["verified"] and r["differences"] == [] for r in doc["reservations"])


def test_the_plan_target_is_a_pending_run(fleet, capsys):
    path, meta = fleet
    target = meta["plan"]
    code, doc = report(capsys, "plan", target["name"], "-n", target["namespace"], "--snapshot", path, "-o", "json")
    assert code == 0
    assert doc["run"] == f"{target['namespace']}/{target['name']}"
    assert doc["need"] == doc["width"]["min"] > 0


def test_without_plants_there_is_no_finding(tmp_path, capsys):
    path = tmp_path / "clean.json"
    meta = generate(path, "--seed", "5", "--no-plants")
    assert meta["planted"] == []
    _, usage = report(capsys, "budgets", "usage", "--snapshot", str(path), "-o", "json")
    _, audit = report(capsys, "leases", "audit", "--snapshot", str(path), "--since", "2025-01-01", "-o", "json")
    assert (usage["findings"], audit["findings"], audit["totals"]["leases"]) == ([], [], 1500)
