"""bench/generate.py's reconciler fleet (issue 27's 10,000-run preset, ``reconciler_fleet(runs)``): up to 1,000
runs it is bench/bench_reconcile.py's fleet object for object; larger, it keeps 20 leases a run and one
namespace per 100 runs, so no envelope is overdrawn (a bigger fleet is the same fleet, not a broken one)."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # bench/ is the repository's, not an installed package

from bench import bench_reconcile  # noqa: E402
from bench.generate import RECONCILER_NOW, reconciler_blocks, reconciler_fleet  # noqa: E402
from kubectl_runs.engine.accounting import ledger  # noqa: E402
from kubectl_runs.sources.files import load_snapshot  # noqa: E402


def test_up_to_1000_runs_it_is_the_reconciler_benchmarks_fleet(monkeypatch):
    monkeypatch.setattr(bench_reconcile, "NOW", RECONCILER_NOW)
    assert reconciler_fleet(1000) == bench_reconcile.fleet(0, 10, 0)[0]
    assert reconciler_blocks(1, 9, 20) == bench_reconcile.fleet(1, 9, 20)  # its second piece, on later nodes


def test_2000_runs_carry_40000_leases_and_no_envelope_is_overdrawn(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_bytes(msgspec.json.encode({"apiVersion": "v1", "kind": "List", "items": reconciler_fleet(2000)}))
    snap = load_snapshot([str(path)])
    assert (len(snap.runs), len(snap.leases), len(snap.budgets)) == (2000, 40_000, 20)
    book = ledger(snap, RECONCILER_NOW)
    assert book.findings == []
    assert all(u.used == 1300 and u.headroom == 1700 for u in book.envelopes.values())


def test_runs_come_in_blocks_of_100():
    with pytest.raises(ValueError, match="multiple of 100"):
        reconciler_fleet(150)
