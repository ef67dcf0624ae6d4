"""Every report against a real API server: same JSON live as from a snapshot saved from it, RBAC, errors,
pagination, and no field the code reads lost to schema pruning."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest
from conftest import AT, EXAMPLE, run_plugin

from kubectl_runs.sources import Source
from kubectl_runs.sources.cluster import RESOURCES, Cluster, load_cluster
from kubectl_runs.sources.files import load_snapshot

# Report commands and their arguments; each is run live and on a saved snapshot at the same --at.
REPORTS = {
    "budgets-usage": ["budgets", "usage"],
    "budgets-usage-owner": ["budgets", "usage", "--owner", "org:ai:rai", "--flavor", "H100-80GB"],
    "plan": ["plan", "pretrain-32", "-n", "rai-sys"],
    "plan-unbound": ["plan", "lab-job", "-n", "shared-lab"],
    "explain": ["explain", "vit-probe-8", "-n", "mm-vision"],
    "leases-audit": ["leases", "audit", "--since", "60d", "--by", "owner", "--by", "flavor"],
    "leases-audit-node": ["leases", "audit", "--since", "60d", "--by", "node"],
    "seeds-verify": ["seeds", "verify"],
    "seeds-verify-one": ["seeds", "verify", "bench-16-r1", "-n", "rai-sys"],
    "pending": ["pending"],
}


def _report(stdout: str) -> dict:
    """The JSON of a report; live ``explain`` adds the run's Events, which a snapshot does not hold."""
    data = json.loads(stdout)
    data.pop("events", None)
    return data


def _wait_for_reader(cp) -> None:
    """RBAC bindings reach the authorizer through an informer: wait until the reader may list."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, _ = cp.request("GET", "/apis/jobtree.dev/v1alpha1/gpuleases?limit=1", user="reader")
        if status == 200:
            return
        time.sleep(0.2)
    raise AssertionError("the reader binding never took effect")


@pytest.fixture(scope="module")
def saved(cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("snap") / "cluster.json"
    done = run_plugin("snapshot", "save", "-f", str(path), "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    assert done.returncode == 0, done.stderr
    # no Kueue on this cluster: one note names its kinds as not installed, then the file
    note, last = done.stderr.splitlines()
    assert note.startswith("note: not installed on ") and "ClusterQueue" in note and "Budget" not in note, note
    assert last.startswith("saved ")
    return str(path)


@pytest.mark.parametrize("args", list(REPORTS.values()), ids=list(REPORTS))
def test_live_report_equals_saved_snapshot(cluster, saved, args):
    live = run_plugin(*args, "-o", "json", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    offline = run_plugin(*args, "-o", "json", "--at", AT, "--snapshot", saved)
    assert live.returncode == 0, live.stderr
    assert offline.returncode == 0, offline.stderr
    assert _report(live.stdout) == _report(offline.stdout)
    assert _report(live.stdout), "the report must not be empty"


@pytest.mark.parametrize("args", list(REPORTS.values()), ids=list(REPORTS))
def test_live_report_equals_the_source_manifests(cluster, args):
    """The objects went in from examples/fleet.yaml; what comes back gives the same report."""
    live = run_plugin(*args, "-o", "json", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    offline = run_plugin(*args, "-o", "json", "--at", AT, "--snapshot", EXAMPLE)
    assert live.returncode == offline.returncode == 0, live.stderr + offline.stderr
    assert _unstamped(_report(live.stdout)) == _unstamped(_report(offline.stdout))


def _unstamped(report: dict) -> dict:
    """`pending`'s waiting-since is a creationTimestamp, which the API server sets itself on create (the
    manifests' own are ignored): equal between live and a saved snapshot, not between live and the manifests."""
    for row in report.get("rows", ()):
        if isinstance(row, dict):
            row.pop("waitingSince", None)
    return report


def test_every_field_read_survives_the_round_trip(cluster):
    """Schema pruning would silently drop a field missing from a CRD: compare every spec and status the
    model reads, object by object, between the manifests and what the API server returns."""
    live = load_cluster(Source(kubeconfig=cluster.admin_kubeconfig))
    files = load_snapshot([EXAMPLE])
    for kind in ("budgets", "runs", "reservations", "leases", "nodes"):
        here = {o.metadata.name: o for o in getattr(files, kind)}
        there = {o.metadata.name: o for o in getattr(live, kind)}
        assert set(there) == set(here), kind
        for name, obj in here.items():
            got = there[name]
            if kind == "nodes":  # the TaintNodesByCondition admission plugin adds a not-ready taint
                assert (got.spec.unschedulable, got.out_of_service, got.gpus) == (
                    obj.spec.unschedulable, obj.out_of_service, obj.gpus), name
            else:
                assert msgspec.to_builtins(got.spec) == msgspec.to_builtins(obj.spec), f"{kind} {name} spec"
            if hasattr(obj, "status"):
                assert msgspec.to_builtins(got.status) == msgspec.to_builtins(obj.status), f"{kind} {name} status"
            assert got.metadata.labels == obj.metadata.labels


def test_pagination_follows_continue_tokens(cluster):
    """With 3 objects a page the 13 example leases take 5 pages, and the loaded snapshot is complete."""
    source = Source(kubeconfig=cluster.admin_kubeconfig, chunk_size=3)
    leases = next(r for r in RESOURCES if r.kind == "GPULease")
    pages = list(Cluster(source).pages(leases, None))
    total = len(load_snapshot([EXAMPLE]).leases)
    assert len(pages) == -(-total // 3)
    assert len(load_cluster(source).leases) == total
    small = run_plugin("budgets", "usage", "-o", "json", "--at", AT, "--chunk-size", "2",
                       kubeconfig=cluster.admin_kubeconfig)
    whole = run_plugin("budgets", "usage", "-o", "json", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    assert small.returncode == 0, small.stderr
    assert small.stdout == whole.stdout


def test_reader_with_readonly_clusterrole_runs_every_report(cluster):
    _wait_for_reader(cluster)
    for name, args in REPORTS.items():
        done = run_plugin(*args, "--at", AT, kubeconfig=cluster.kubeconfig_for("reader"))
        assert done.returncode == 0, f"{name}: {done.stderr}"


def test_user_without_the_role_gets_the_forbidden_line(cluster):
    done = run_plugin("budgets", "usage", kubeconfig=cluster.kubeconfig_for("nobody"))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: forbidden: ")
    assert 'User "nobody" cannot list resource' in lines[0]
    assert done.stdout == ""


def test_crds_not_installed(before_crds):
    assert before_crds.returncode == 1
    assert before_crds.stderr.strip().startswith("error: the jobtree.dev CRDs are not installed")
    assert before_crds.stderr.strip().endswith("kubectl apply -f crds/")


def test_unreachable_server(cluster, tmp_path):
    config = tmp_path / "kubeconfig"
    text = Path(cluster.admin_kubeconfig).read_text()
    port = cluster.server.rsplit(":", 1)[1]
    config.write_text(text.replace(f"127.0.0.1:{port}", "127.0.0.1:1"))
    done = run_plugin("budgets", "usage", kubeconfig=str(config))
    assert done.returncode == 1
    assert done.stderr == "error: unable to connect to the server at https://127.0.0.1:1: connection refused " \
                          "(is the cluster up, and is this the right kubeconfig context?)\n"


def test_context_flag_and_namespace_from_context(cluster):
    """The all-users kubeconfig has one context per user; --context picks the user like kubectl."""
    done = run_plugin("budgets", "usage", "--context", "nobody", kubeconfig=cluster.kubeconfig)
    assert done.returncode == 1 and "forbidden" in done.stderr
    done = run_plugin("budgets", "usage", "--context", "admin", "-o", "json", "--at", AT,
                      kubeconfig=cluster.kubeconfig)
    assert done.returncode == 0, done.stderr


def test_several_kubeconfig_files_are_merged(cluster, tmp_path):
    """$KUBECONFIG with two files (like kubectl): contexts from both are usable."""
    import os

    env = dict(os.environ)
    env["KUBECONFIG"] = os.pathsep.join([str(tmp_path / "missing"), cluster.kubeconfig_for("reader"),
                                         cluster.admin_kubeconfig])
    _wait_for_reader(cluster)
    done = run_plugin("budgets", "usage", "--context", "admin", "--at", AT, env=env)
    assert done.returncode == 0, done.stderr


def test_cel_rules_hold(cluster):
    ns = "rai-sys"
    base = f"/apis/jobtree.dev/v1alpha1/namespaces/{ns}/gpuleases"
    status, lease = cluster.request("GET", f"{base}/train-16-g0")
    assert status == 200
    lease["spec"]["group"] = 5
    status, answer = cluster.request("PUT", f"{base}/train-16-g0", lease)
    assert status == 422 and "spec is immutable" in json.dumps(answer)

    status, answer = cluster.request(
        "PATCH", f"{base}/sft-8-g0/status", {"status": {"closed": False}},
        content_type="application/merge-patch+json",
    )
    assert status == 422, answer

    budget = {
        "apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget",
        "metadata": {"name": "backwards", "namespace": ns},
        "spec": {"owner": "org:ai:rai:sys", "envelopes": [{
            "name": "e", "flavor": "H100-80GB", "concurrency": 1,
            "start": "2025-12-01T00:00:00Z", "end": "2025-11-01T00:00:00Z"}]},
    }
    status, answer = cluster.request("POST", f"/apis/jobtree.dev/v1alpha1/namespaces/{ns}/budgets", budget)
    assert status == 422, answer

    status, rsv = cluster.request("GET", f"/apis/jobtree.dev/v1alpha1/namespaces/{ns}/reservations/pretrain-32-r1")
    rsv["spec"]["earliestStart"] = "2025-11-23T00:00:00Z"
    status, answer = cluster.request("PUT", f"/apis/jobtree.dev/v1alpha1/namespaces/{ns}/reservations/pretrain-32-r1",
                                     rsv)
    assert status == 422, answer


def test_request_timeout_is_one_line(cluster):
    """A 1 ms budget cannot cover a TLS handshake: the one-line timeout error, exit 1."""
    done = run_plugin("budgets", "usage", "--request-timeout", "1ms", kubeconfig=cluster.admin_kubeconfig)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: the server at {cluster.server} did not answer within 0.001s")
    assert len(done.stderr.strip().splitlines()) == 1


def test_exec_credential_plugin(cluster, tmp_path):
    """A kubeconfig user whose token comes from an exec credential plugin (as OIDC/GKE users have)."""
    import stat

    import yaml

    plugin = tmp_path / "token-plugin"
    token = cluster.token_for("admin")
    plugin.write_text(
        "#!/bin/sh\n"
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
        f'"status": {{"token": "{token}"}}}}\'\n'
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    config = yaml.safe_load(Path(cluster.admin_kubeconfig).read_text())
    for user in config["users"]:
        user["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                                 "interactiveMode": "Never"}}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    done = run_plugin("budgets", "usage", "-o", "json", "--at", AT, kubeconfig=str(path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["envelopes"]


def test_explain_live_shows_the_runs_events(cluster):
    """Live, explain adds the run's recent Events (a snapshot holds none)."""
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "pretrain-32.waiting", "namespace": "rai-sys"},
        "involvedObject": {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "name": "pretrain-32",
                           "namespace": "rai-sys"},
        "reason": "WaitingForCapacity", "message": "short by 32 GPUs", "type": "Normal", "count": 3,
        "firstTimestamp": "2025-11-20T09:00:00Z", "lastTimestamp": "2025-11-20T11:00:00Z",
    }
    status, answer = cluster.request("POST", "/api/v1/namespaces/rai-sys/events", event)
    assert status == 201, answer
    done = run_plugin("explain", "pretrain-32", "-n", "rai-sys", "-o", "json", "--at", AT,
                      kubeconfig=cluster.admin_kubeconfig)
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)["events"]
    assert [(e["reason"], e["message"], e["count"]) for e in events] == [("WaitingForCapacity", "short by 32 GPUs", 3)]
    table = run_plugin("explain", "pretrain-32", "-n", "rai-sys", "--at", AT, kubeconfig=cluster.admin_kubeconfig)
    assert "WaitingForCapacity" in table.stdout


def test_namespace_bound_user_reads_the_namespaces_it_may(cluster):
    """A user with a RoleBinding in rai-sys only (and node access): the report covers rai-sys, and says on
    stderr which cluster-wide lists were refused, instead of failing."""
    deadline = time.monotonic() + 30
    while cluster.request("GET", "/apis/jobtree.dev/v1alpha1/namespaces/rai-sys/budgets", user="team")[0] != 200:
        assert time.monotonic() < deadline, "the team binding never took effect"
        time.sleep(0.2)
    done = run_plugin("budgets", "usage", "-n", "rai-sys", "-o", "json", "--at", AT,
                      kubeconfig=cluster.kubeconfig_for("team"))
    assert done.returncode == 0, done.stderr
    assert {e["namespace"] for e in json.loads(done.stdout)["envelopes"]} == {"rai-sys"}
    notes = done.stderr.strip().splitlines()
    assert len(notes) == 4  # budgets, runs, reservations, gpuleases
    assert all(n.startswith('note: forbidden: ') and 'User "team" cannot list resource' in n for n in notes)
    assert notes[0].endswith("reading budgets.jobtree.dev of namespace rai-sys only")
