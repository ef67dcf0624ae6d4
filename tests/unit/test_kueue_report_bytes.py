"""The exact bytes `queues usage` and `explain workload|kaiwojob` print in JSON and YAML, for the example Kueue
fleet and a few hand-built fleets, against a record (tests/unit/data/kueue_reports.json).

The record was written by the code before the Kueue reports went through the same typed-value machinery as the
other reports: the move must not change one byte. A deliberate change of a report rewrites it:

    .venv/bin/python tests/unit/test_kueue_report_bytes.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from kueue_builders import (  # noqa: E402
    AMD,
    GPU,
    cluster_queue,
    flavor,
    group,
    local_queue,
    node,
    pod_set,
    quota,
    workload,
)

from kubectl_runs.cli.main import main  # noqa: E402

RECORD = HERE / "data" / "kueue_reports.json"
EXAMPLE = ROOT / "examples" / "kueue-fleet.yaml"
EXAMPLE_WORKLOADS = ("team-a/a-train-1", "team-a/a-train-2", "team-a/a-eval-3", "team-a/a-eval-4", "team-b/b-ft-1",
                     "team-b/b-mi-1", "team-b/b-mi-2", "team-c/c-small-1")


def _edge_fleet() -> list[dict]:
    """No cohort, a LocalQueue pointing nowhere, a workload with no queue, one too big for ever, two pod sets, a
    borrowing limit outside any cohort, a flavor that selects no node."""
    return [
        node("n1", {"gpu": "h100"}, 8),
        node("n2", {"gpu": "mi"}, 8, resource=AMD),
        flavor("h100", {"gpu": "h100"}),
        flavor("mi", {"gpu": "mi"}),
        flavor("ghost", {"gpu": "none"}),
        cluster_queue("solo", group([GPU], ("h100", [quota(GPU, 4, borrowing=2)]), ("ghost", [quota(GPU, 2)])),
                      group([AMD], ("mi", [quota(AMD, 8)]))),
        local_queue("ml", "default", "solo"),
        local_queue("ml", "broken", "nowhere"),
        workload("ml", "big", pod_set(3, {GPU: 4}), queue="default"),
        workload("ml", "two", pod_set(1, {GPU: 2}, name="a"), pod_set(1, {AMD: 4}, name="b"), queue="default"),
        workload("ml", "lost", pod_set(1, {GPU: 1}), queue="broken"),
        workload("ml", "orphan", pod_set(1, {GPU: 1}), queue="missing"),
    ]


def _commands(edge: str) -> list[tuple[str, ...]]:
    example = str(EXAMPLE)
    out: list[tuple[str, ...]] = []
    for fmt in ("json", "yaml"):
        out.append(("queues", "usage", "--snapshot", example, "-o", fmt))
        out.append(("queues", "usage", "--snapshot", edge, "-o", fmt))
        for key in EXAMPLE_WORKLOADS:
            out.append(("explain", "workload", key, "--snapshot", example, "-o", fmt))
    out.append(("queues", "usage", "--cohort", "research", "--flavor", "h100", "--snapshot", example, "-o", "json"))
    out.append(("queues", "usage", "--flavor", "nope", "--snapshot", example, "-o", "json"))
    out.append(("explain", "kaiwojob", "team-b/mi-finetune", "--snapshot", example, "-o", "json"))
    out.append(("explain", "kaiwojob", "team-b/mi-pretrain", "--snapshot", example, "-o", "json"))
    for key in ("ml/big", "ml/two", "ml/lost", "ml/orphan"):
        out.append(("explain", "workload", key, "--snapshot", edge, "-o", "json"))
    return out


def _outputs(capsys, tmp: Path) -> dict[str, str]:
    edge = tmp / "edge.json"
    edge.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": _edge_fleet()}))
    got = {}
    for args in _commands(str(edge)):
        code = main(list(args))
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), (args, err)
        got[" ".join(a if a != str(edge) else "EDGE" for a in args).replace(str(EXAMPLE), "EXAMPLE")] = out
    return got


def test_the_kueue_reports_print_the_recorded_bytes(capsys, tmp_path):
    recorded = json.loads(RECORD.read_text())
    got = _outputs(capsys, tmp_path)
    assert sorted(got) == sorted(recorded)
    for command, text in got.items():
        assert text == recorded[command], command


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    class _Capture:
        def readouterr(self):
            out, err = sys.stdout.getvalue(), sys.stderr.getvalue()
            sys.stdout.seek(0), sys.stdout.truncate(), sys.stderr.seek(0), sys.stderr.truncate()
            return out, err

    import io

    real = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            record = _outputs(_Capture(), Path(tmp))
    finally:
        sys.stdout, sys.stderr = real
    RECORD.write_text(json.dumps(record, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {len(record)} outputs to {RECORD}")
elif __name__ == "__main__":
    pytest.main([__file__, "-q"])
