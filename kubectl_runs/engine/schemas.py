"""The JSON Schema of each report, generated from its type (engine/reports.py, engine/run_reports.py, kueue/reports.py) into docs/schemas/.

    python -m kubectl_runs.engine.schemas            # write docs/schemas/*.schema.json
    python -m kubectl_runs.engine.schemas --check    # exit 1 when a committed file differs

tests/unit/test_schemas.py checks that the committed files are what the types generate, and that every
report's ``-o json`` validates against its schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec

from ..kueue.reports import ExplainWorkloadReport, QueuesUsageReport
from ..pods.explain import ExplainPodReport
from ..pods.pending import PendingReport
from .reports import (
    ArchiveReport,
    ArchiveVerifyReport,
    AuditHoursReport,
    AuditReport,
    PeriodsAuditReport,
    UsageReport,
    Value,
    VerifyReport,
)
from .run_reports import ExplainReport, PlanReport

# file stem -> (command, report type)
SCHEMAS: dict[str, tuple[str, type[Value]]] = {
    "budgets-usage": ("kubectl runs budgets usage -o json", UsageReport),
    "leases-audit": ("kubectl runs leases audit -o json", AuditReport),
    "leases-audit-hours": ("kubectl runs leases audit --hours-only -o json", AuditHoursReport),
    "leases-audit-every": ("kubectl runs leases audit --every day|week|month -o json", PeriodsAuditReport),
    "leases-archive": ("kubectl runs leases archive --to DIR -o json", ArchiveReport),
    "leases-archive-verify": ("kubectl runs leases archive --verify DIR -o json", ArchiveVerifyReport),
    "plan": ("kubectl runs plan -o json", PlanReport),
    "explain": ("kubectl runs explain -o json", ExplainReport),
    "seeds-verify": ("kubectl runs seeds verify -o json", VerifyReport),
    "queues-usage": ("kubectl runs queues usage -o json", QueuesUsageReport),
    "pending": ("kubectl runs pending -o json", PendingReport),
    "explain-pod": ("kubectl runs explain pod NAME -o json", ExplainPodReport),
    "explain-workload": ("kubectl runs explain workload|kaiwojob NAME -o json", ExplainWorkloadReport),
}

DIRECTORY = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema(stem: str) -> dict:
    command, report = SCHEMAS[stem]
    generated = msgspec.json.schema(report)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://jobtree.dev/kubectl-runs/schemas/{stem}.schema.json",
        "title": command,
        **generated,
    }


def text(stem: str) -> str:
    return json.dumps(schema(stem), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for stem in SCHEMAS:
        path = DIRECTORY / f"{stem}.schema.json"
        wanted = text(stem)
        if path.exists() and path.read_text() == wanted:
            continue
        if check:
            stale.append(path.name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted)
    if stale:
        print(f"stale: {', '.join(stale)} (python -m kubectl_runs.engine.schemas)", file=sys.stderr)
    from . import cluster_schemas  # the several-cluster reports embed these: written (or checked) with them

    return max(int(bool(stale)), cluster_schemas.main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
