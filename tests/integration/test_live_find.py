"""Against the real API server: NAMESPACE/NAME and the not-found hints on live lists (issue 11), and every
report's live ``-o json`` against its JSON Schema in docs/schemas (explain's live-only ``events`` included)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import AT, run_plugin
from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def _wait_for_team(cluster) -> None:
    deadline = time.monotonic() + 30
    while cluster.request("GET", "/apis/jobtree.dev/v1alpha1/namespaces/rai-sys/runs", user="team")[0] != 200:
        assert time.monotonic() < deadline, "the team binding never took effect"
        time.sleep(0.2)


def test_namespace_slash_name_is_read_like_dash_n_by_a_namespace_bound_user(cluster):
    """``team`` may list the jobtree.dev kinds in rai-sys only: ``plan rai-sys/pretrain-32`` reads rai-sys (with
    a note per refused cluster-wide list) as ``-n rai-sys`` does, not the context's namespace."""
    _wait_for_team(cluster)
    kubeconfig = cluster.kubeconfig_for("team")
    for command in ("plan", "explain"):
        slashed = run_plugin(command, "rai-sys/pretrain-32", "-o", "json", "--at", AT, kubeconfig=kubeconfig)
        dashed = run_plugin(command, "pretrain-32", "-n", "rai-sys", "-o", "json", "--at", AT, kubeconfig=kubeconfig)
        assert slashed.returncode == 0, slashed.stderr
        assert (slashed.stdout, slashed.stderr) == (dashed.stdout, dashed.stderr)
        assert slashed.stderr.startswith("note: forbidden: ")


def test_a_name_in_another_namespace_is_pointed_at(cluster):
    """The admin's context namespace is default; the run is in rai-sys."""
    done = run_plugin("plan", "pretrain-32", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    assert (done.returncode, done.stdout, done.stderr) == (
        1, "", "error: run default/pretrain-32 not found; a run of that name is in rai-sys (use -n rai-sys)\n")
    found = run_plugin("plan", "pretrain-32", "-A", "-o", "json", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["run"] == "rai-sys/pretrain-32"


def test_live_reports_fit_their_schemas(cluster):
    checks = {
        "plan": ["plan", "rai-sys/pretrain-32"],
        "explain": ["explain", "rai-sys/pretrain-32"],
        "budgets-usage": ["budgets", "usage"],
        "leases-audit": ["leases", "audit", "--by", "owner", "--by", "node"],
        "seeds-verify": ["seeds", "verify"],
        "snapshot": ["snapshot", "save"],
    }
    for name, args in checks.items():
        done = run_plugin(*args, "-o", "json", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
        assert done.returncode == 0, (name, done.stderr)
        document = json.loads(done.stdout)
        if name == "explain":
            assert "events" in document  # live only
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft202012Validator(schema).iter_errors(document)]
        assert errors == [], (name, errors[:5])
