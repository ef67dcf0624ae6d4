"""Every pass of the ledger keeper over a fairness simulation (bench/fairness.py), told as one digest per pass:
the fixture of test_ledger_incremental.py, recorded from the keeper before the pass was made incremental.

    PYTHONPATH=<tree> python tests/unit/ledger_passes.py > tests/unit/data/ledger_passes.json

records the keeper of ``<tree>`` (the fixture holds the keeper of c389874, main when issue 27's ledger work began,
the last keeper that rebuilt its view per write). Each case is a simulation; each pass that wrote something is
``[pass number, writes, sha256 of the writes' JSON (kind, name, body or status, cause)]``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import timedelta
from pathlib import Path

import msgspec

CASES = (
    {"days": 1.5, "seed": 2, "fleet": "small", "drain_days": 1.5},
    {"days": 1.0, "seed": 5, "fleet": "small", "drain_days": 1.0,
     "options": {"min_run_time": timedelta(minutes=30), "victim_protection": timedelta(hours=1)}},
    {"days": 0.75, "seed": 1, "fleet": "default", "drain_days": 0.5},
    {"days": 2.0, "seed": 3, "fleet": "default", "drain_days": 1.0},
)


def digest(writes) -> str:
    return hashlib.sha256(msgspec.json.encode(writes)).hexdigest()[:20]


def passes(case: dict, stats: dict | None = None) -> list[list]:
    """``[pass number, writes, digest]`` of every pass of the simulation ``case`` that wrote something; ``stats``
    gets ``passes`` and, when the simulation runs the keeper as the reconciler's loop does (``Keeper``), ``reused``:
    the passes that started from the previous pass's Evaluation."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import fairness

    recorded: list[list] = []
    count = 0
    stats = {} if stats is None else stats

    def record(writes):
        nonlocal count
        count += 1
        if writes:
            recorded.append([count, len(writes), digest(writes)])
        return writes

    keeper = getattr(fairness, "Keeper", None)
    if keeper is not None:  # the loop's keeper (after issue 27)
        real = keeper.__call__

        def recording(self, snapshot, at):
            writes = record(real(self, snapshot, at))
            stats["reused"] = self.memory.reused
            return writes

        keeper.__call__ = recording
        try:
            fairness.Simulation(**case).run()
        finally:
            keeper.__call__ = real
    else:  # the tree the fixture was recorded from
        real_plan = fairness.plan_ledger
        fairness.plan_ledger = lambda snapshot, at, options=None: record(real_plan(snapshot, at, options))
        try:
            fairness.Simulation(**case).run()
        finally:
            fairness.plan_ledger = real_plan
    stats["passes"] = count
    return recorded


def _jsonable(case: dict) -> dict:
    out = dict(case)
    if "options" in out:
        out["options"] = {k: v.total_seconds() for k, v in out["options"].items()}
    return out


if __name__ == "__main__":
    print(json.dumps({"cases": [{"case": _jsonable(case), "passes": passes(case)} for case in CASES]}))
