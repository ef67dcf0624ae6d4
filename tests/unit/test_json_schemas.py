"""The JSON output contract (docs/output.md), beyond tests/unit/test_schemas.py (which checks that the committed
schemas are what the report types generate): every run's plan and explain on the example fleet and on a generated
fleet, every --by of leases audit, the filters of budgets usage, tampered seed records, snapshot save (its
schema is written by hand), the live-only events of explain; the enums in the schemas are the engine's names;
and edited reports fail, so the schemas bite."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest
from builders import run_cli
from jsonschema import Draft202012Validator, ValidationError

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
SEEDS = ROOT / "tests" / "fixtures" / "seeds"
REPORTS = ("plan", "explain", "budgets-usage", "leases-audit", "seeds-verify", "snapshot",
           "queues-usage", "explain-workload",  # these two: tests/unit/test_kueue_explain.py
           "leases-archive", "leases-archive-verify",  # these two: tests/unit/test_cli_archive.py
           "leases-audit-every",  # tests/unit/test_audit_periods.py
           "leases-audit-hours",
           "pending",  # tests/unit/test_schemas.py and test_pending_command.py
           "explain-pod",  # tests/unit/test_explain_pod.py
           # reports over several clusters: tests/unit/test_cluster_reports.py
           "budgets-usage-clusters", "leases-audit-clusters", "queues-usage-clusters", "pending-clusters",
           "watch-events")  # -w --output-watch-events, written by hand: tests/unit/test_watch_text.py


@cache
def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def check(name: str, document: object) -> None:
    errors = sorted(validator(name).iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


def json_of(capsys, *args: str, codes: tuple[int, ...] = (0,)) -> object:
    code, out, err = run_cli(capsys, *args, "-o", "json")
    assert code in codes, err
    return json.loads(out)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    """A small seeded fleet with planted findings and activated reservations (~2 MB, well under a second)."""
    path = tmp_path_factory.mktemp("generated") / "fleet.json"
    subprocess.run([sys.executable, "-m", "bench.generate", "--nodes", "64", "--envelopes", "60", "--leases",
                    "1500", "--activations", "3", "--seed", "7", "-o", str(path)],
                   check=True, cwd=ROOT, capture_output=True, timeout=120)
    return str(path)


def runs_of(path: str) -> list[str]:
    """Every run that is not finished, and a few finished ones (``namespace/name``)."""
    from kubectl_runs.sources import Source, load

    snapshot = load(Source(snapshots=(path,)))
    live = [r.key for r in snapshot.runs if not r.finished]
    done = [r.key for r in snapshot.runs if r.finished][:3]
    return live + done


@pytest.fixture(params=["example", "generated"])
def fleet(request, generated) -> str:
    return EXAMPLE if request.param == "example" else generated


def test_every_schema_is_a_valid_draft_2020_12_schema():
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted(f"{r}.schema.json" for r in REPORTS)
    for name in REPORTS:
        validator(name)


def test_plan_and_explain_of_every_run(capsys, fleet):
    runs = runs_of(fleet)
    assert len(runs) >= 8
    for key in runs:
        check("plan", json_of(capsys, "plan", key, "--snapshot", fleet))
        check("explain", json_of(capsys, "explain", key, "--snapshot", fleet))


@pytest.mark.parametrize("args", [[], ["--owner", "org:ai"], ["-n", "rai-sys"], ["--flavor", "MI300X"]],
                         ids=["all", "owner", "namespace", "flavor"])
def test_budgets_usage(capsys, fleet, args):
    data = json_of(capsys, "budgets", "usage", "--snapshot", fleet, *args)
    check("budgets-usage", data)


def test_budgets_usage_has_findings_and_aggregates_to_check(capsys, fleet):
    data = json_of(capsys, "budgets", "usage", "--snapshot", fleet)
    assert data["findings"] and data["envelopes"]


@pytest.mark.parametrize(
    "by",
    [[], ["owner"], ["envelope"], ["flavor"], ["run"], ["node"], ["owner", "flavor"], ["run", "node"],
     ["envelope", "owner"]],
    ids=lambda by: "+".join(by) or "default",
)
def test_leases_audit(capsys, fleet, by):
    args = [a for d in by for a in ("--by", d)]
    data = json_of(capsys, "leases", "audit", "--snapshot", fleet, "--since", "90d", *args)
    check("leases-audit", data)
    assert data["rows"] and data["findings"]
    hours = json_of(capsys, "leases", "audit", "--snapshot", fleet, "--since", "90d", "--hours-only", *args)
    check("leases-audit-hours", hours)
    assert hours["rows"] == [{k: v for k, v in row.items() if k != "peakGPUs"} for row in data["rows"]]
    assert hours["totals"] == data["totals"]
    with pytest.raises(ValidationError):  # a row with a peak is not an --hours-only row
        validator("leases-audit-hours").validate({**hours, "rows": data["rows"]})


def test_seeds_verify(capsys, fleet):
    data = json_of(capsys, "seeds", "verify", "--snapshot", fleet, codes=(0, 1))
    assert data["reservations"]
    check("seeds-verify", data)


@pytest.mark.parametrize("fixture", sorted(p.name for p in SEEDS.glob("*.yaml")))
def test_seeds_verify_with_differences(capsys, tmp_path, fixture):
    """Tampered records (tests/fixtures/seeds: the example's activated reservation and its victims' leases, each
    edited): verified false with differences — in seeds verify, and in explain of every run of the example fleet
    with that record in place of the example's."""
    import yaml

    recorded = [d for d in yaml.safe_load_all((SEEDS / fixture).read_text()) if d]
    replaced = {(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]) for d in recorded}
    example = [d for d in yaml.safe_load_all(Path(EXAMPLE).read_text()) if d]
    kept = [d for d in example
            if (d["kind"], d["metadata"].get("namespace"), d["metadata"].get("name")) not in replaced]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump_all(kept + recorded, sort_keys=False))
    data = json_of(capsys, "seeds", "verify", "--snapshot", str(fleet), codes=(0, 1))
    check("seeds-verify", data)
    assert data["reservations"][0]["verified"] is (fixture == "honest.yaml")
    for key in runs_of(str(fleet)):
        check("explain", json_of(capsys, "explain", key, "--snapshot", str(fleet)))


def test_snapshot_save(capsys, fleet):
    check("snapshot", json_of(capsys, "snapshot", "save", "--snapshot", fleet))


def test_live_events_fit_the_explain_schema(capsys):
    """Live, explain adds the run's Events (sources/cluster.recent_events); the schema allows them."""
    data = json_of(capsys, "explain", "rai-sys/pretrain-32", "--snapshot", EXAMPLE)
    data["events"] = [{"type": "Normal", "reason": "Planned", "message": "short by 32", "at": "2025-11-20T11:00:00Z",
                       "count": 1}]
    check("explain", data)


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("plan", lambda d: d.update(extra=1)),
        ("plan", lambda d: d["reasons"].append({"code": "NoSuchReason", "message": "x"})),
        ("plan", lambda d: d["remedies"][0].update(kind="Pray")),
        ("plan", lambda d: d["forecast"].update(confidence="guessed")),
        ("plan", lambda d: d.pop("need")),
        ("plan", lambda d: d["funding"]["sources"][0].update(relation="cousin")),
        ("explain", lambda d: d["plan"].update(deficitGPUs="32")),
        ("explain", lambda d: d["leases"][0].update({"class": "Owned"})),
        ("budgets-usage", lambda d: d["envelopes"][0].update(windowActive="yes")),
        ("budgets-usage", lambda d: d["findings"][0].update(kind="Weird")),
        ("leases-audit", lambda d: d["rows"][0].update(namespace="x")),
        ("leases-audit", lambda d: d["totals"].pop("leases")),
        ("seeds-verify", lambda d: d["reservations"][0].update(verified="true")),
    ],
    ids=["extra-key", "reason", "remedy", "confidence", "missing", "relation", "type", "class",
         "window-active", "finding-kind", "row-key", "totals", "verified"],
)
def test_the_schemas_bite(capsys, name, mutate):
    """A changed report fails its schema: what the test above guards against."""
    args = {
        "plan": ["plan", "rai-sys/pretrain-32"],
        "explain": ["explain", "rai-eval/eval-6"],
        "budgets-usage": ["budgets", "usage"],
        "leases-audit": ["leases", "audit"],
        "seeds-verify": ["seeds", "verify"],
    }[name]
    data = json_of(capsys, *args, "--snapshot", EXAMPLE)
    check(name, data)
    changed = copy.deepcopy(data)
    mutate(changed)
    assert list(validator(name).iter_errors(changed))


def enums(node: object) -> list[list]:
    """Every ``enum`` list anywhere in a schema."""
    if isinstance(node, dict):
        found = [node["enum"]] if "enum" in node else []
        return found + [e for value in node.values() for e in enums(value)]
    if isinstance(node, list):
        return [e for value in node for e in enums(value)]
    return []


def test_the_enums_are_the_engines():
    """Reason codes, remedy kinds, finding kinds, classes, relations and confidences are listed in the schemas
    with exactly the engine's values, so a new name must reach the documented contract before it ships."""
    from kubectl_runs.engine import codes

    def listed(stem: str) -> list[list]:
        return [sorted(map(str, e)) for e in enums(json.loads((SCHEMAS / f"{stem}.schema.json").read_text()))]

    def values(enum) -> list[str]:
        return sorted(m.value for m in enum)

    plan, explain = listed("plan"), listed("explain")
    for enum in (codes.ReasonCode, codes.RemedyKind, codes.Relation, codes.Confidence):
        assert values(enum) in plan and values(enum) in explain, enum.__name__
    assert values(codes.FundingClass) in explain
    for stem in ("budgets-usage", "leases-audit"):
        assert values(codes.FindingKind) in listed(stem)


def test_watch_events_documents_fit_their_schema_and_wrap_the_reports(capsys):
    """`-w --output-watch-events -o json`: the wrapper follows watch-events.schema.json, its object the report's."""
    from types import SimpleNamespace

    from kubectl_runs.cli.watch_text import block
    from kubectl_runs.sources.watchcache import Change

    report = json_of(capsys, "--snapshot", EXAMPLE, "budgets", "usage")
    changes = [Change("ADDED", "GPULease", "rai-sys/l1"), Change("MODIFIED", "Node", "gpu-1"),
               Change("DELETED", "Run", "rai-sys/old")]
    out, _ = block(SimpleNamespace(data=report, notes=[]), "json", datetime.now(UTC), changes)
    wrapped = json.loads(out)
    check("watch-events", wrapped)
    check("budgets-usage", wrapped["object"])
    first, _ = block(SimpleNamespace(data=report, notes=[]), "json", datetime.now(UTC), [])
    check("watch-events", json.loads(first))
    for bad in ({**wrapped, "events": [{**wrapped["events"][0], "type": "CHANGED"}]},
                {"events": wrapped["events"]}, {**wrapped, "extra": 1}):
        assert list(validator("watch-events").iter_errors(bad)), bad
