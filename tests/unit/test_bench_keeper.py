"""bench/bench_keeper.py runs the loop's passes in both trees and stops when their writes differ."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # bench/ is the repository's, not an installed package

from bench import bench_keeper  # noqa: E402


def test_the_keeper_bench_runs_both_trees_and_finds_the_same_writes(capsys):
    assert bench_keeper.main(["--runs", "100", "--repeats", "1", "--before", "HEAD"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 100 runs")]
    assert [row.split(" | ")[1] for row in rows] == list(bench_keeper.PASSES)
    assert all("(identical)" in row for row in rows)
    assert rows[-1].split(" | ")[-1].startswith("4 ")  # the new Run's 4 GPULeases
