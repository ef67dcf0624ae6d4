"""The JSON Schemas of the reports over several clusters (``--context`` repeated, ``--all-contexts``, snapshots of
several clusters): ``clusters: [{context, server, report}]`` and ``errors: [{context, message}]``, where each
``report`` is exactly the one-cluster report of engine/schemas.py.

    python -m kubectl_runs.engine.cluster_schemas            # write docs/schemas/*-clusters.schema.json
    python -m kubectl_runs.engine.cluster_schemas --check    # exit 1 when a committed file differs

tests/unit/test_cluster_reports.py checks that the committed files are what this generates.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec

from .reports import Value
from .schemas import DIRECTORY, SCHEMAS


class ClusterEntry(Value):
    """One cluster that was read: its kubeconfig context (or the context its snapshot recorded), its API
    server, and its report — the same document as the report of that cluster alone."""

    context: str
    server: str | None
    report: Any


class ClusterErrorEntry(Value):
    """One cluster that could not be read, and why (the same line as on stderr)."""

    context: str
    message: str


class ClustersReport(Value):
    """A report over several clusters: each cluster's own report (no arithmetic across clusters), in the order
    the clusters were asked for, and the clusters that could not be read (exit code 4 when some were)."""

    clusters: list[ClusterEntry]
    errors: list[ClusterErrorEntry]


# file stem -> (command, the one-cluster reports (engine/schemas.py stems) a cluster's report may be)
CLUSTER_SCHEMAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "budgets-usage-clusters": ("kubectl runs budgets usage --context A --context B -o json", ("budgets-usage",)),
    "leases-audit-clusters": ("kubectl runs leases audit --context A --context B -o json",
                              ("leases-audit", "leases-audit-hours", "leases-audit-every")),
    "queues-usage-clusters": ("kubectl runs queues usage --context A --context B -o json", ("queues-usage",)),
    "pending-clusters": ("kubectl runs pending --context A --context B -o json", ("pending",)),
}


def schema(stem: str) -> dict:
    command, reports = CLUSTER_SCHEMAS[stem]
    wrapper = msgspec.json.schema(ClustersReport)
    defs = dict(wrapper.pop("$defs"))
    refs = []
    for report in reports:
        generated = msgspec.json.schema(SCHEMAS[report][1])
        defs.update(generated.get("$defs", {}))
        refs.append({"$ref": generated["$ref"]})
    entry = dict(defs["ClusterEntry"])
    entry["properties"] = {**entry["properties"], "report": refs[0] if len(refs) == 1 else {"anyOf": refs}}
    defs["ClusterEntry"] = entry
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://jobtree.dev/kubectl-runs/schemas/{stem}.schema.json",
        "title": command,
        **wrapper,
        "$defs": dict(sorted(defs.items())),
    }


def text(stem: str) -> str:
    return json.dumps(schema(stem), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for stem in CLUSTER_SCHEMAS:
        path = DIRECTORY / f"{stem}.schema.json"
        wanted = text(stem)
        if path.exists() and path.read_text() == wanted:
            continue
        if "--check" in argv:
            stale.append(path.name)
        else:
            path.write_text(wanted)
    if stale:
        print(f"stale: {', '.join(stale)} (python -m kubectl_runs.engine.cluster_schemas)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
