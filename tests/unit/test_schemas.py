"""docs/schemas/: each report's JSON Schema is what its type (engine/reports.py) generates, and every report's
``-o json`` — on the example fleet and on a generated one, by every --by, with recorded draws — validates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from builders import run_cli

from kubectl_runs.engine import schemas

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "examples" / "fleet.yaml")


def validator(stem: str) -> jsonschema.protocols.Validator:
    data = json.loads((schemas.DIRECTORY / f"{stem}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(data)
    cls.check_schema(data)
    return cls(data)


@pytest.mark.parametrize("stem", sorted(schemas.SCHEMAS))
def test_the_committed_schema_is_what_the_report_type_generates(stem):
    assert (schemas.DIRECTORY / f"{stem}.schema.json").read_text() == schemas.text(stem), (
        "regenerate: python -m kubectl_runs.engine.schemas"
    )


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("fleet") / "fleet.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.generate", "--nodes", "64", "--envelopes", "46", "--leases", "800",
         "--seed", "11", "-o", str(path)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    return str(path)


def _items(path: str) -> list[dict]:
    if path.endswith(".json"):
        return json.loads(Path(path).read_text())["items"]
    import yaml

    out = []
    for doc in yaml.safe_load_all(Path(path).read_text()):
        if doc and doc.get("kind") == "List":
            out += doc.get("items") or []
        elif doc:
            out.append(doc)
    return out


def _reports(path: str, scratch: Path) -> list[tuple[str, list[str]]]:
    items = _items(path)
    runs = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items if i["kind"] == "Run"][:40]
    out = [("budgets-usage", ["budgets", "usage"]), ("seeds-verify", ["seeds", "verify", "-A"]),
           ("queues-usage", ["queues", "usage"]), ("pending", ["pending"])]
    for by in (["owner"], ["envelope", "run"], ["node", "flavor"]):
        out.append(("leases-audit", ["leases", "audit", *(x for b in by for x in ("--by", b))]))
    out.append(("leases-audit-hours", ["leases", "audit", "--hours-only", "--by", "node", "--by", "owner"]))
    out.append(("leases-audit-every", ["leases", "audit", "--every", "week", "--since", "60d", "--by", "owner",
                                       "--by", "flavor"]))
    archive = str(scratch / "archive")  # written, then verified
    out.append(("leases-archive", ["leases", "archive", "--to", archive]))
    out.append(("leases-archive-verify", ["leases", "archive", "--verify", archive]))
    for namespace, name in runs:
        out.append(("plan", ["plan", name, "-n", namespace]))
        out.append(("explain", ["explain", name, "-n", namespace]))
    return out


@pytest.mark.parametrize("which", ["example", "generated"])
def test_every_report_validates_against_its_schema(capsys, generated, which, tmp_path):
    path = EXAMPLE if which == "example" else generated
    checked = set()
    for stem, argv in _reports(path, tmp_path):
        code, out, err = run_cli(capsys, "--snapshot", path, *argv, "-o", "json")
        assert code in (0, 1), (argv, err)
        validator(stem).validate(json.loads(out))
        checked.add(stem)
    # explain-workload needs Kueue Workloads: tests/unit/test_kueue_explain.py validates it on the Kueue example.
    assert checked == set(schemas.SCHEMAS) - {"explain-workload", "explain-pod"}  # explain-pod: test_explain_pod.py


def test_a_report_with_an_unknown_field_does_not_validate(capsys):
    _, out, _ = run_cli(capsys, "--snapshot", EXAMPLE, "plan", "pretrain-32", "-n", "rai-sys", "-o", "json")
    data = json.loads(out)
    data["remedies"][0]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validator("plan").validate(data)
