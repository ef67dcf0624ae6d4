"""bench/generate.py --history (bench/history.py): a lease archive written month by month, near the number of
leases asked for, deterministic, verified by ``leases archive --verify``, with exactly one planted double booking
per month and the present as a snapshot whose budgets fund every lease."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from builders import run_cli

ROOT = Path(__file__).resolve().parents[2]


def generate(out: Path, seed: int = 3) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.generate", "--history", str(out), "--leases", "3000",
                           "--years", "1", "--nodes", "64", "--seed", str(seed)], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_history(capsys, tmp_path):
    generate(tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / "archive" / "_manifest.json").read_text())
    assert 2700 <= manifest["leases"] <= 3300
    assert len(manifest["runs"]) == len(manifest["partitions"]) >= 12
    assert run_cli(capsys, "leases", "archive", "--verify", str(tmp_path / "a" / "archive"))[0] == 0
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", str(tmp_path / "a" / "fleet.json"),
                             "--archive", str(tmp_path / "a" / "archive"), "--since", "400d", "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["totals"]["leases"] >= manifest["leases"]
    double = [f for f in data["findings"] if f["kind"] == "DoubleBooked"]
    planted = [f for f in double if "planted-double" in f["lease"] or "planted-double" in f["detail"]]
    assert len(planted) == len(manifest["partitions"])
    assert {f["kind"] for f in data["findings"]} <= {"DoubleBooked"}
    generate(tmp_path / "b")
    assert [p["sha256"] for p in json.loads((tmp_path / "b" / "archive" / "_manifest.json").read_text())[
        "partitions"]] == [p["sha256"] for p in manifest["partitions"]]
