"""bench/generate.py's reconciler fleet (issue 27's 10,000-run preset, ``reconciler_fleet(runs)``): up to 1,000
runs it is the fleet bench/bench_reconcile.py measures (built from it); larger, it keeps 20 leases a run and one
namespace per 100 runs, so no envelope is overdrawn (a bigger fleet is the same fleet, not a broken one)."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # bench/ is the repository's, not an installed package

from bench.generate import RECONCILER_NOW, reconciler_fleet  # noqa: E402
from kubectl_runs.engine.accounting import ledger  # noqa: E402
from kubectl_runs.sources.files import load_snapshot  # noqa: E402


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
