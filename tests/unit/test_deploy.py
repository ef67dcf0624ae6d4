"""deploy/: the kustomize base and overlays render with kubectl's embedded kustomize, and what they render is
the least-privilege reconciler the docs describe. The Grafana dashboard only queries series the reconciler
exports. (tests/integration/test_rbac_deploy.py applies the same RBAC to the real API server and checks it with
real requests.)

Skipped where kubectl is absent; that skip is a failure where KUBECTL_RUNS_REQUIRE_CONTROLPLANE is set (CI)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NS = "kubectl-runs-system"
JOBTREE = ("budgets", "runs", "reservations", "gpuleases")


def kubectl() -> str:
    path = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.access("/usr/bin/kubectl", os.X_OK) else None)
    if path is None:
        if os.environ.get("KUBECTL_RUNS_REQUIRE_CONTROLPLANE"):
            pytest.fail("kubectl is not on PATH (needed to render deploy/)")
        pytest.skip("kubectl is not on PATH (needed to render deploy/)")
    return path


def render(path: Path) -> list[dict]:
    done = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def find(objs, kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind: str, name: str | None = None) -> dict:
    found = find(objs, kind, name)
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


def granted(objs, subject: str) -> list[tuple[str, str, str, str, tuple]]:
    """(namespace or '*', apiGroup, resource, verb, resourceNames) granted to a ServiceAccount by the rendered
    (Cluster)RoleBindings."""
    roles = {(o["kind"], o["metadata"].get("namespace", "*"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    out = []
    for binding in objs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and f"{s['namespace']}/{s['name']}" == subject
                   for s in binding["subjects"]):
            continue
        ns = binding["metadata"].get("namespace", "*")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ns if ref["kind"] == "Role" else "*", ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.append((ns, group, resource, verb, tuple(rule.get("resourceNames", ()))))
    return out


SA = f"{NS}/kubectl-runs-reconciler"


def test_base_renders_crds_reader_role_and_reconciler():
    objs = render(DEPLOY)
    assert {o["metadata"]["name"] for o in find(objs, "CustomResourceDefinition")} == {
        f"{p}.jobtree.dev" for p in JOBTREE}
    one(objs, "ClusterRole", "kubectl-runs-reader")
    one(objs, "Namespace", NS)
    one(objs, "ServiceAccount", "kubectl-runs-reconciler")
    assert not find(objs, "ServiceMonitor")  # only with the prometheus-operator component
    for o in objs:
        if o["kind"] in ("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget"):
            assert o["metadata"]["namespace"] == NS, o["metadata"]


def test_base_rbac_is_least_privilege():
    rules = granted(render(DEPLOY), SA)
    jobtree = {(r, v) for ns, g, r, v, _ in rules if g == "jobtree.dev"}
    assert jobtree == (
        {(k, v) for k in JOBTREE for v in ("get", "list", "watch")}
        | {(f"{k}/status", v) for k in ("budgets", "runs", "reservations") for v in ("get", "patch")}
        | {("reservations", "preempt")}  # what the preemption policy checks before its Reservation status patches
    )
    # nothing that can change a spec or make or delete an object of the four kinds (`preempt` is no API verb: it
    # grants no request, the admission policy only reads it)
    assert not {v for _, g, r, v, _ in rules if g == "jobtree.dev" and "/" not in r} - {"get", "list", "watch",
                                                                                       "preempt"}
    assert {(g, r, v) for ns, g, r, v, _ in rules if r == "nodes"} == {("", "nodes", v) for v in ("get", "list", "watch")}
    # core/v1 Events (InvalidObject warnings): created, never changed (deterministic names; 409 = already said);
    # the ledger keeper's events.k8s.io/v1 Events come with its overlay
    assert {(g, v) for _, g, r, v, _ in rules if r == "events"} == {("", "create")}
    leases = [(ns, v, names) for ns, g, r, v, names in rules if g == "coordination.k8s.io"]
    assert sorted(leases) == sorted([(NS, "create", ()), (NS, "get", ("kubectl-runs-reconciler",)),
                                     (NS, "update", ("kubectl-runs-reconciler",))])
    assert {r for _, _, r, _, _ in rules} <= {*JOBTREE, *(f"{k}/status" for k in JOBTREE), "nodes", "events", "leases"}
    assert "*" not in {v for *_, v, _ in rules} and "*" not in {r for _, _, r, _, _ in rules}


def deployment(objs) -> dict:
    return one(objs, "Deployment", "kubectl-runs-reconciler")


def test_deployment_runs_two_replicas_with_leader_election_probes_limits_and_no_root():
    objs = render(DEPLOY)
    dep = deployment(objs)
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kubectl-runs-reconciler"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    assert c["image"] == "ghcr.io/jobtree-dev/kubectl-runs:v0.1.0"
    assert c["args"][0] == "reconcile"
    assert "--leader-elect" in c["args"] and "--manage-leases" not in c["args"]
    assert "--metrics-addr=:8080" in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 8080}
    assert set(c["resources"]) == {"requests", "limits"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp"}
    svc = one(objs, "Service", "kubectl-runs-reconciler-metrics")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert one(objs, "PodDisruptionBudget")["spec"]["selector"] == dep["spec"]["selector"]


def test_manage_leases_overlay_adds_the_flag_and_only_the_ledger_rights():
    base = render(DEPLOY)
    objs = render(DEPLOY / "overlays" / "manage-leases")
    args = deployment(objs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [*deployment(base)["spec"]["template"]["spec"]["containers"][0]["args"], "--manage-leases"]
    extra = set(granted(objs, SA)) - set(granted(base, SA))
    assert {(g, r, v) for _, g, r, v, _ in extra} == {
        ("jobtree.dev", "gpuleases", "create"), ("jobtree.dev", "reservations", "create"),
        ("jobtree.dev", "gpuleases/status", "get"), ("jobtree.dev", "gpuleases/status", "patch"),
        ("events.k8s.io", "events", "create"), ("jobtree.dev", "gpuleases", "preempt")}
    assert {o["metadata"]["name"] for o in find(objs, "CustomResourceDefinition")} == {
        f"{p}.jobtree.dev" for p in JOBTREE}


def test_prometheus_operator_overlay_adds_a_service_monitor_for_the_metrics_port():
    objs = render(DEPLOY / "overlays" / "prometheus-operator")
    sm = one(objs, "ServiceMonitor", "kubectl-runs-reconciler")
    svc = one(objs, "Service", "kubectl-runs-reconciler-metrics")
    assert sm["metadata"]["namespace"] == NS
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [svc["spec"]["ports"][0]["name"]]


def test_dockerfile_runs_reconcile_as_non_root():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["kubectl-runs"\]$', text, re.M)
    assert re.search(r'^CMD \["reconcile"\]$', text, re.M)
    user = re.findall(r"^USER (\d+)", text, re.M)
    assert user and int(user[-1]) != 0
    deployment_user = deployment(render(DEPLOY))["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert int(user[-1]) == deployment_user


def test_every_flag_the_deployments_pass_is_a_reconcile_flag():
    import sys

    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "reconcile", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for path in (DEPLOY, DEPLOY / "overlays" / "manage-leases"):
        args = deployment(render(path))["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[0] == "reconcile"
        for arg in args[1:]:
            flag = arg.split("=", 1)[0]
            assert re.search(rf"(^|[\s/,]){re.escape(flag)}([\s=,/]|$)", done.stdout, re.M), flag


ARCHIVER = f"{NS}/kubectl-runs-archiver"


def test_lease_archive_overlay_is_a_nightly_cronjob_onto_a_pvc_with_only_read_and_delete_rights():
    objs = render(DEPLOY / "overlays" / "lease-archive")
    cron = one(objs, "CronJob", "kubectl-runs-lease-archive")
    assert cron["metadata"]["namespace"] == NS
    minute, hour, *rest = cron["spec"]["schedule"].split()
    assert rest == ["*", "*", "*"] and minute.isdigit() and hour.isdigit()  # once a day
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kubectl-runs-archiver"
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["image"].startswith("ghcr.io/jobtree-dev/kubectl-runs:")
    args = container["args"]
    assert args[:2] == ["leases", "archive"] and "--prune" in args
    to = next(a.split("=", 1)[1] for a in args if a.startswith("--to="))
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == to)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claim = one(objs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["metadata"]["namespace"] == NS
    # the flags parse as the command's own (a typo would fail every night)
    from kubectl_runs.cli.leases import archive_command

    archive_command.make_context("archive", list(args[2:]))
    rights = {(g, r, v) for _, g, r, v, _ in granted(objs, ARCHIVER)}
    assert rights == {("", "nodes", "get"), ("", "nodes", "list"),
                      *{("jobtree.dev", k, v) for k in JOBTREE for v in ("get", "list")},
                      ("jobtree.dev", "gpuleases", "delete"), ("jobtree.dev", "gpuleases", "preempt")}


def test_the_image_has_the_archive_extra():
    assert re.search(r'pip install [^\n]*"\.\[archive\]"', (DEPLOY / "Dockerfile").read_text())


# --- who may preempt: the ValidatingAdmissionPolicy (tests/integration/test_preemption_policy.py applies it) ----

GUARDED = ("reservations", "gpuleases")
POLICY = "kubectl-runs-preemption"
WRITES = ("create", "update", "patch", "delete", "deletecollection", "*")
WITH_RECONCILER = (DEPLOY, DEPLOY / "overlays" / "manage-leases", DEPLOY / "overlays" / "prometheus-operator")


@pytest.mark.parametrize("path", WITH_RECONCILER, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_deployment_of_the_reconciler_ships_the_preemption_policy_bound_to_deny(path):
    objs = render(path)
    policy = one(objs, "ValidatingAdmissionPolicy", POLICY)
    binding = one(objs, "ValidatingAdmissionPolicyBinding", POLICY)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert "namespace" not in policy["metadata"] and "namespace" not in binding["metadata"]  # cluster-scoped
    assert binding["spec"]["policyName"] == POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "paramRef" not in binding["spec"] and "matchResources" not in binding["spec"]  # everywhere
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["jobtree.dev"] and rule["apiVersions"] == ["*"]
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    assert sorted(rule["resources"]) == sorted([*GUARDED, *(f"{r}/status" for r in GUARDED)])
    assert "namespaceSelector" not in spec["matchConstraints"] and "objectSelector" not in spec["matchConstraints"]
    (check,) = spec["validations"]
    expr = " ".join(check["expression"].split())
    assert expr == ("authorizer.group('jobtree.dev').resource(request.resource.resource)"
                    ".namespace(request.namespace) .check('preempt').allowed()")
    assert check["reason"] == "Forbidden"
    for text in (check["message"], check["messageExpression"]):
        assert "only the kubectl-runs reconciler and cluster admins may create" in text
        assert "ask an admin" in text
    assert "let the reconciler create one" in check["messageExpression"]


def test_the_policy_exempts_only_namespace_deletion_and_garbage_collection():
    """The exemptions are kube-controller-manager's: DELETE by the namespace controller and the garbage collector,
    UPDATE (metadata: ownerReferences, finalizers) of the objects themselves by the garbage collector."""
    policy = one(render(DEPLOY), "ValidatingAdmissionPolicy", POLICY)
    (cond,) = policy["spec"]["matchConditions"]
    expr = cond["expression"]
    names = set(re.findall(r"'(system:[^']+)'", expr))
    assert names == {"system:serviceaccount:kube-system:namespace-controller",
                     "system:serviceaccount:kube-system:generic-garbage-collector",
                     "system:kube-controller-manager"}
    assert set(re.findall(r"request\.operation == '(\w+)'", expr)) == {"DELETE", "UPDATE"}
    assert "CREATE" not in expr
    update = expr[expr.index("'UPDATE'"):]
    assert "namespace-controller" not in update and "subResource" in update  # the GC's UPDATEs: not of /status


def preempters(objs) -> dict[str, set[str]]:
    """ServiceAccount -> the guarded resources it holds `preempt` on."""
    out: dict[str, set[str]] = {}
    for binding in objs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        for s in binding["subjects"]:
            if s["kind"] == "ServiceAccount":
                who = f"{s['namespace']}/{s['name']}"
                out.setdefault(who, set()).update(
                    r for ns, g, r, v, _ in granted(objs, who) if g == "jobtree.dev" and v == "preempt")
    return out


@pytest.mark.parametrize("path", [*WITH_RECONCILER, DEPLOY / "overlays" / "lease-archive"],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_policy_lets_every_writer_deploy_ships_through_and_no_one_else_gets_preempt(path):
    """Whoever deploy/ lets write a Reservation or a GPULease (or its status) holds `preempt` on it, so the policy
    never refuses our own components; and `preempt` goes to nobody who cannot write that resource."""
    objs = render(path)
    holders = preempters(objs)
    for who, preempt in holders.items():
        rules = granted(objs, who)
        writes = {r.split("/")[0] for _, g, r, v, _ in rules
                  if g == "jobtree.dev" and r.split("/")[0] in GUARDED and v in WRITES}
        assert writes == preempt, (who, writes, preempt)
        assert preempt <= set(GUARDED)
    if path in WITH_RECONCILER:
        assert holders[SA] >= {"reservations"}


def test_the_preempt_example_grants_only_the_verb():
    """deploy/rbac-preempt.example.yaml (docs/admin.md#who-may-preempt): the ClusterRole an admin binds to whom
    may write Reservations by hand: preempt and the writes on reservations, nothing on gpuleases."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / "rbac-preempt.example.yaml").read_text()) if d]
    role = one(docs, "ClusterRole", "kubectl-runs-preempter")
    verbs = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
             for v in rule["verbs"]}
    assert ("jobtree.dev", "reservations", "preempt") in verbs
    assert {r for _, r, _ in verbs} <= {"reservations"}
    binding = one(docs, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "kubectl-runs-preempter"}
    assert binding["metadata"].get("namespace")
