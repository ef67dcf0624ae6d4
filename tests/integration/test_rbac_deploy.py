"""The RBAC of deploy/ on the real API server: ``kubectl apply -k deploy/``, then the reconciler's ServiceAccount
(a real service-account token from the TokenRequest API) and the reports' read-only user are checked twice —
with ``kubectl auth can-i --as`` and with real requests. The reports cannot write any status; the reconciler
can patch status but cannot update or patch any object itself (a spec), cannot create or delete, and holds
only its own Lease; ``overlays/manage-leases`` adds exactly the ledger's creates and GPULease status.

Creates are sent with ``dryRun=All`` (authorized exactly like real ones, nothing stored) and status patches
re-send a value the object already has, so the example fleet the other live tests read is left as it was."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import ROOT

from kubectl_runs.reconciler.actions import ReportEvent
from kubectl_runs.reconciler.apply import report_body
from kubectl_runs.reconciler.leader import LeaderElector
from kubectl_runs.sources import Source
from kubectl_runs.sources.cluster import _api_client

NS = "kubectl-runs-system"
SA = f"system:serviceaccount:{NS}:kubectl-runs-reconciler"
API = "/apis/jobtree.dev/v1alpha1"
KINDS = ("budgets", "runs", "reservations", "gpuleases")


class Caller:
    """Raw HTTPS requests with one bearer token."""

    def __init__(self, cp, token: str):
        self.cp, self.token = cp, token
        self.ctx = ssl.create_default_context(cafile=cp.ca_file)

    def __call__(self, method: str, path: str, body=None, content_type: str = "application/json"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.cp.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode("utf-8", "replace")


MERGE = "application/merge-patch+json"


def can_i(cp, who: str, verb: str, resource: str, namespace: str | None = "rai-sys", *extra: str) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={who}", *extra]
    args += ["-n", namespace] if namespace else []
    done = cp.kubectl(*args, check=False)
    assert done.stdout.strip() in ("yes", "no"), done.stdout + done.stderr
    return done.stdout.strip() == "yes"


def wait_until(check, what: str, timeout: float = 30) -> None:
    """RBAC changes reach the authorizer through an informer: poll."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} never took effect"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def deployed(cluster):
    done = cluster.kubectl("apply", "-k", str(ROOT / "deploy"), check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    token = cluster.kubectl("create", "token", "kubectl-runs-reconciler", "-n", NS, "--duration=1h").stdout.strip()
    reconciler = Caller(cluster, token)
    wait_until(lambda: reconciler("GET", f"{API}/runs?limit=1")[0] == 200, "the reconciler's ClusterRoleBinding")
    return reconciler


def first(cp, plural: str) -> dict:
    status, body = cp.request("GET", f"{API}/{plural}?limit=1")
    assert status == 200 and body["items"], (plural, body)
    return body["items"][0]


def obj_path(obj: dict, plural: str) -> str:
    return f"{API}/namespaces/{obj['metadata']['namespace']}/{plural}/{obj['metadata']['name']}"


def same_status(obj: dict) -> dict:
    """A merge patch of the status that changes nothing (one key the object already has, else none)."""
    status = obj.get("status") or {}
    key = next(iter(sorted(status)), None)
    return {"status": {key: status[key]} if key else {}}


def test_reports_role_cannot_write_any_status(cluster, deployed):
    reader = Caller(cluster, cluster.token_for("reader"))
    for plural in KINDS:
        assert can_i(cluster, "reader", "get", f"{plural}.jobtree.dev")
        assert not can_i(cluster, "reader", "patch", f"{plural}.jobtree.dev", "rai-sys", "--subresource=status")
        assert not can_i(cluster, "reader", "update", f"{plural}.jobtree.dev", "rai-sys", "--subresource=status")
        assert not can_i(cluster, "reader", "patch", f"{plural}.jobtree.dev")
        obj = first(cluster, plural)
        assert reader("GET", obj_path(obj, plural))[0] == 200
        status, body = reader("PATCH", obj_path(obj, plural) + "/status", same_status(obj), MERGE)
        assert status == 403, body
        assert 'User "reader" cannot patch resource' in body["message"] and f"{plural}/status" in body["message"]
        status, _ = reader("PUT", obj_path(obj, plural) + "/status", obj)
        assert status == 403


def test_reconciler_can_i(cluster, deployed):
    yes = lambda *a: can_i(cluster, SA, *a)  # noqa: E731
    for plural in ("budgets", "runs", "reservations"):
        assert yes("patch", f"{plural}.jobtree.dev", "rai-sys", "--subresource=status"), plural
    for plural in KINDS:
        assert yes("list", f"{plural}.jobtree.dev", None, "--all-namespaces")
        assert yes("watch", f"{plural}.jobtree.dev")
        for verb in ("update", "patch", "create", "delete"):
            assert not yes(verb, f"{plural}.jobtree.dev"), (verb, plural)
        assert not yes("update", f"{plural}.jobtree.dev", "rai-sys", "--subresource=status"), plural
    assert not yes("patch", "gpuleases.jobtree.dev", "rai-sys", "--subresource=status")  # the ledger's only
    assert yes("list", "nodes", None) and not yes("patch", "nodes", None)
    assert yes("create", "events") and not yes("delete", "events") and not yes("patch", "events")
    assert not yes("create", "events.events.k8s.io")  # the ledger keeper's Events: overlays/manage-leases
    assert yes("get", "leases.coordination.k8s.io/kubectl-runs-reconciler", NS)
    assert yes("update", "leases.coordination.k8s.io/kubectl-runs-reconciler", NS)
    assert yes("create", "leases.coordination.k8s.io", NS)
    assert not yes("get", "leases.coordination.k8s.io/someone-elses", NS)
    assert not yes("create", "leases.coordination.k8s.io", "rai-sys")
    assert not yes("get", "secrets", NS)


def test_reconciler_patches_status_and_is_refused_every_spec_write(cluster, deployed):
    sa = deployed
    for plural in ("budgets", "runs", "reservations"):
        obj = first(cluster, plural)
        path = obj_path(obj, plural)
        status, body = sa("PATCH", path + "/status", same_status(obj), MERGE)
        assert status == 200, (plural, body)
        status, body = sa("PATCH", path, {"spec": obj["spec"]}, MERGE)
        assert status == 403, (plural, body)
        assert f'"{SA}" cannot patch resource "{plural}"' in body["message"]
        assert sa("PUT", path, obj)[0] == 403
        assert sa("DELETE", path + "?dryRun=All")[0] == 403
    lease = first(cluster, "gpuleases")
    assert sa("PATCH", obj_path(lease, "gpuleases") + "/status", same_status(lease), MERGE)[0] == 403
    new_lease = {**{k: lease[k] for k in ("apiVersion", "kind", "spec")},
                 "metadata": {"name": "rbac-probe", "namespace": lease["metadata"]["namespace"]}}
    collection = f"{API}/namespaces/{lease['metadata']['namespace']}/gpuleases"
    assert sa("POST", collection + "?dryRun=All", new_lease)[0] == 403
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "rbac-probe-", "namespace": "rai-sys"},
             "involvedObject": {"kind": "Run", "namespace": "rai-sys", "name": "x"}, "reason": "Probe",
             "message": "rbac test", "type": "Normal"}
    status, body = sa("POST", "/api/v1/namespaces/rai-sys/events?dryRun=All", event)
    assert status == 201, body


def sa_kubeconfig(cp, token: str, path: Path) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": cp.server, "certificate-authority": cp.ca_file}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return str(path)


def test_reconciler_holds_only_its_own_lease(cluster, deployed, tmp_path):
    api = _api_client(Source(kubeconfig=sa_kubeconfig(cluster, deployed.token, tmp_path / "sa.kubeconfig")))
    fast = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
    own = LeaderElector(api, NS, "kubectl-runs-reconciler", "rbac-test", **fast)
    own.start()
    try:
        assert own.wait(threading.Event(), timeout=10), own.last_error
        time.sleep(1.2)  # renewals (get + update) are allowed too
        assert own.is_leader()
    finally:
        own.stop(release=True)
    status, lease = cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kubectl-runs-reconciler")
    assert status == 200 and lease["spec"]["holderIdentity"] == ""  # released
    other = LeaderElector(api, NS, "someone-elses", "rbac-test", **fast)
    assert not other.try_acquire_or_renew()
    assert " 403 " in other.last_error and "someone-elses" in other.last_error
    elsewhere = LeaderElector(api, "rai-sys", "kubectl-runs-reconciler", "rbac-test", **fast)
    assert not elsewhere.try_acquire_or_renew()
    assert " 403 " in elsewhere.last_error


def test_manage_leases_overlay_adds_exactly_the_ledger_writes(cluster, deployed):
    sa = deployed
    done = cluster.kubectl("apply", "-k", str(ROOT / "deploy" / "overlays" / "manage-leases"), check=False,
                           timeout=120)
    assert done.returncode == 0, done.stderr
    try:
        lease = first(cluster, "gpuleases")
        ns = lease["metadata"]["namespace"]
        new_lease = {**{k: lease[k] for k in ("apiVersion", "kind", "spec")},
                     "metadata": {"name": "rbac-probe", "namespace": ns}}
        wait_until(lambda: sa("POST", f"{API}/namespaces/{ns}/gpuleases?dryRun=All", new_lease)[0] == 201,
                   "the ledger keeper's ClusterRoleBinding")
        rsv = first(cluster, "reservations")
        new_rsv = {**{k: rsv[k] for k in ("apiVersion", "kind", "spec")},
                   "metadata": {"name": "rbac-probe", "namespace": rsv["metadata"]["namespace"]}}
        status, body = sa("POST", f"{API}/namespaces/{rsv['metadata']['namespace']}/reservations?dryRun=All", new_rsv)
        assert status == 201, body
        assert sa("PATCH", obj_path(lease, "gpuleases") + "/status", same_status(lease), MERGE)[0] == 200
        assert can_i(cluster, SA, "patch", "gpuleases.jobtree.dev", "rai-sys", "--subresource=status")
        # an events.k8s.io/v1 Event about a decision, as the reconciler sends it (apply.report_body)
        event = report_body(ReportEvent(kind="GPULease", namespace=ns, name=lease["metadata"]["name"],
                                        uid=lease["metadata"]["uid"], event="rbac-probe.0", reason="Minted",
                                        verb="Mint", note="rbac test"), datetime.now(UTC), "rbac-test")
        status, body = sa("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events?dryRun=All", event)
        assert status == 201, body
        assert can_i(cluster, SA, "create", "events.events.k8s.io", ns)
        assert not can_i(cluster, SA, "patch", "events.events.k8s.io", ns)
        # still no spec writes, no deletes, no runs or budgets created
        assert sa("PATCH", obj_path(lease, "gpuleases"), {"spec": lease["spec"]}, MERGE)[0] == 403
        assert sa("PUT", obj_path(lease, "gpuleases"), lease)[0] == 403
        assert sa("DELETE", obj_path(lease, "gpuleases") + "?dryRun=All")[0] == 403
        for plural in ("runs", "budgets"):
            assert not can_i(cluster, SA, "create", f"{plural}.jobtree.dev")
        dep = json.loads(cluster.kubectl("get", "deployment", "kubectl-runs-reconciler", "-n", NS, "-o",
                                         "json").stdout)
        assert dep["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--manage-leases"
    finally:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", "kubectl-runs-ledger-keeper", check=False)
        cluster.kubectl("apply", "-k", str(ROOT / "deploy"), check=False, timeout=120)


def test_the_pod_passes_the_restricted_pod_security_standard_its_namespace_enforces(cluster, deployed):
    dep = json.loads(cluster.kubectl("get", "deployment", "kubectl-runs-reconciler", "-n", NS, "-o", "json").stdout)
    template = dep["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pss-probe", "namespace": NS,
                                                            "labels": template["metadata"]["labels"]},
           "spec": template["spec"]}
    status, body = cluster.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", pod)
    assert status == 201, body
    loose = json.loads(json.dumps(pod))
    del loose["spec"]["securityContext"]
    del loose["spec"]["containers"][0]["securityContext"]
    status, body = cluster.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", loose)
    assert status == 403 and 'violates PodSecurity "restricted' in body["message"], body
