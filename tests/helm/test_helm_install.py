"""The Helm chart installed with the real Helm v3 on the real API server of the test tier, beside the kustomize
base: ``helm install --dry-run=server`` of every ci/*-values.yaml and each rendering admitted by a server-side dry
run, then a real ``helm install`` (release helmtest in kubectl-runs-helm, the CRDs already there), the reconciler
run as the chart's ServiceAccount (a real token from the TokenRequest API) with the Deployment's own flags: it
takes the Lease in the release namespace and writes Run and Budget status; ``helm upgrade`` to manageLeases and it
mints GPULeases with their Events; ``helm uninstall`` removes the release's objects and nothing else. Last, on a
control plane without the CRDs, the CRD upgrade story of docs/admin.md (Helm creates crds/ once, never upgrades).

The reconciler writes status to every object it sees, so this module has a control plane of its own (with a small
fleet), not the session's example fleet. The tests run in file order and build on each other."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helm_chart import CHART, DEPLOY, ROOT, helm_binary, kubectl_binary, parse, run

sys.path.insert(0, str(ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from reconciler_harness import API, Reconciler, budget, control_plane, create, get, node, wait_for
from reconciler_harness import run as a_run

pytestmark = pytest.mark.integration

RELEASE, NS = "helmtest", "kubectl-runs-helm"
FULL = f"{RELEASE}-kubectl-runs"
SA = f"{FULL}-reconciler"
LEASE = f"{FULL}-reconciler"
TEAM, FLAVOR = "team", "H100"
CI = sorted((CHART / "ci").glob("*-values.yaml"))
CRDS = ("budgets", "runs", "reservations", "gpuleases")


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


@pytest.fixture(scope="module")
def cp(helm):
    """A control plane with the CRDs (kubectl apply -f crds/), the kustomize base applied (its objects carry the
    default names) and a small fleet: two 8-GPU nodes, a 16-GPU budget, a 4-GPU run and an 8-GPU run."""
    kubectl_binary()
    with control_plane() as plane:
        done = plane.kubectl("apply", "-k", str(DEPLOY), check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        create(plane, [node("n1", flavor=FLAVOR), node("n2", flavor=FLAVOR),
                       budget("b", TEAM, owner="org:team", flavor=FLAVOR, concurrency=16)])
        create(plane, [a_run("small", TEAM, flavor=FLAVOR, gpus=4), a_run("wide", TEAM, flavor=FLAVOR, gpus=8, group=8)])
        yield plane


def helm_do(cp, helm: str, *args: str) -> subprocess.CompletedProcess:
    return run([helm, "--kubeconfig", cp.admin_kubeconfig, *args], timeout=300)


def crd_versions(cp) -> dict[str, str]:
    return {plural: get(cp, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.jobtree.dev")
            ["metadata"]["resourceVersion"] for plural in CRDS}


def exists(cp, obj: dict) -> bool:
    meta = obj["metadata"]
    args = ["get", f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else obj["kind"],
            meta["name"], "-o", "name"]
    if "namespace" in meta:
        args += ["-n", meta["namespace"]]
    done = cp.kubectl(*args, check=False)
    assert done.returncode == 0 or "NotFound" in done.stderr, done.stderr
    return done.returncode == 0


def release_objects(cp, helm: str) -> list[dict]:
    done = helm_do(cp, helm, "get", "manifest", RELEASE, "-n", NS)
    assert done.returncode == 0, done.stderr
    return parse(done.stdout)


def sa_kubeconfig(cp, path: Path) -> str:
    token = cp.kubectl("create", "token", SA, "-n", NS, "--duration=1h").stdout.strip()
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": cp.server, "certificate-authority": cp.ca_file}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return str(path)


def as_the_deployment_runs(cp, tmp_path: Path, identity: str) -> Reconciler:
    """`kubectl-runs reconcile` with the flags of the release's Deployment, as its ServiceAccount. Two changes for
    a process outside a pod: the Lease's namespace is given (a pod reads its own) and no metrics server."""
    dep = json.loads(cp.kubectl("get", "deployment", SA, "-n", NS, "-o", "json").stdout)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "reconcile"
    flags = [a for a in args[1:] if not a.startswith("--metrics-addr=")]
    kubeconfig = sa_kubeconfig(cp, tmp_path / f"{identity}.kubeconfig")
    who = f"--as=system:serviceaccount:{NS}:{SA}"
    wait_for("the chart's ClusterRoleBinding", lambda: cp.kubectl("auth", "can-i", "list", "runs.jobtree.dev", who,
                                                                  check=False).stdout.strip() == "yes", timeout=30)
    return Reconciler(cp, *flags, f"--leader-election-namespace={NS}", "--metrics-addr=0", f"--identity={identity}",
                      log_dir=tmp_path, name=identity, kubeconfig=kubeconfig)


def lease_holder(cp) -> str | None:
    code, body = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")
    return body["spec"].get("holderIdentity") if code == 200 else None


def status_of(cp, plural: str, name: str) -> dict:
    return get(cp, f"{API}/namespaces/{TEAM}/{plural}/{name}").get("status") or {}


def refusals(proc: Reconciler) -> list[str]:
    return [line for line in proc.lines() if " 403" in line or "orbidden" in line]


@pytest.mark.parametrize("path", CI, ids=lambda p: p.stem)
def test_helm_install_dry_run_server_of_each_ci_values_file(cp, helm, path):
    """Helm checks the rendering against the real server (its version, its APIs) and creates nothing; the
    monitoring file's ServiceMonitor is left out, and said so, where the Prometheus Operator's API is absent."""
    done = helm_do(cp, helm, "install", RELEASE, str(CHART), "-n", NS, "--create-namespace", "--dry-run=server",
                   "-f", str(path))
    assert done.returncode == 0, done.stderr
    assert "STATUS: pending-install" in done.stdout
    assert "kind: ServiceMonitor" not in done.stdout
    if "monitoring" in path.name:
        assert "no ServiceMonitor was created" in done.stdout
        assert "kind: CronJob" in done.stdout and "kind: ConfigMap" in done.stdout
    assert cp.request("GET", f"/api/v1/namespaces/{NS}")[0] == 404
    assert helm_do(cp, helm, "list", "-n", NS, "-q").stdout.strip() == ""


def test_each_rendering_is_admitted_by_a_server_side_dry_run(cp, helm):
    """Every object of every ci/*-values.yaml, sent to the API server with dryRun=All (validated, defaulted and
    admitted, nothing stored), into the release namespace an admin creates first."""
    cp.kubectl("create", "namespace", NS)
    for path in CI:
        rendered = run([helm, "template", RELEASE, str(CHART), "-n", NS, "-f", str(path)])
        assert rendered.returncode == 0, rendered.stderr
        done = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered.stdout, check=False, timeout=120)
        assert done.returncode == 0, (path.name, done.stderr)
        assert "(server dry run)" in done.stdout
    assert cp.kubectl("get", "deployments,cronjobs,persistentvolumeclaims", "-n", NS, "-o", "name").stdout == ""
    assert cp.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{SA}")[0] == 404


def test_the_default_names_collide_with_the_kustomize_base_and_helm_refuses_them(cp, helm):
    """Release kubectl-runs would own the kustomize base's objects (same names): Helm refuses, creating nothing."""
    done = helm_do(cp, helm, "install", "kubectl-runs", str(CHART), "-n", "kubectl-runs-system")
    assert done.returncode != 0
    assert "invalid ownership metadata" in done.stderr, done.stderr
    assert helm_do(cp, helm, "list", "-A", "-q").stdout.strip() == ""


def test_helm_install_beside_the_kustomize_base_with_the_crds_already_there(cp, helm):
    crds_before = crd_versions(cp)
    kustomize_role = get(cp, "/apis/rbac.authorization.k8s.io/v1/clusterroles/kubectl-runs-reconciler")
    done = helm_do(cp, helm, "install", RELEASE, str(CHART), "-n", NS, "--create-namespace")
    assert done.returncode == 0, done.stderr
    assert "STATUS: deployed" in done.stdout
    objs = release_objects(cp, helm)
    assert sorted(o["kind"] for o in objs) == sorted([
        "ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
        "Service", "PodDisruptionBudget", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
    for obj in objs:
        assert exists(cp, obj), obj["metadata"]
    assert crd_versions(cp) == crds_before  # Helm skips CRDs that exist: it never changes them
    assert get(cp, "/apis/rbac.authorization.k8s.io/v1/clusterroles/kubectl-runs-reconciler") == kustomize_role
    policy = get(cp, f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{FULL}-preemption")
    assert policy["spec"] == {"policyName": f"{FULL}-preemption", "validationActions": ["Deny"]}


def test_the_reconciler_under_the_charts_rbac_takes_the_lease_and_writes_status(cp, tmp_path):
    proc = as_the_deployment_runs(cp, tmp_path, "helm-replica-a")
    try:
        wait_for("the Lease in the release namespace", lambda: lease_holder(cp) == "helm-replica-a", timeout=60,
                 every=0.2)
        small, _ = wait_for("small's status", lambda: status_of(cp, "runs", "small").get("phase"), timeout=60,
                            every=0.2)
        assert small == "Pending"  # status only: nobody mints its lease
        assert {c["type"] for c in status_of(cp, "runs", "small")["conditions"]} == {"Ready", "Funded", "Placeable"}
        envelopes, _ = wait_for("b's status", lambda: status_of(cp, "budgets", "b").get("envelopes"), timeout=30,
                                every=0.2)
        assert (envelopes[0]["usedGPUs"], envelopes[0]["headroomGPUs"]) == (0, 16)
        assert refusals(proc) == []
    finally:
        assert proc.stop() == 0, "\n".join(proc.lines()[-30:])
    assert lease_holder(cp) == ""  # released on SIGTERM


def test_helm_upgrade_to_manage_leases_and_the_ledger_keeper_mints_leases(cp, helm, tmp_path):
    """The documented upgrade: the chart's CRDs applied server-side first (Helm never upgrades them), then
    `helm upgrade` with manageLeases (and the lease archive); the reconciler, with the Deployment's new flags, mints a GPULease for each
    run and records each mint as an events.k8s.io Event, all under the chart's RBAC."""
    crds = run([kubectl_binary(), "--kubeconfig", cp.admin_kubeconfig, "apply", "--server-side", "--force-conflicts",
                "-f", str(CHART / "crds")])
    assert crds.returncode == 0, crds.stderr
    done = helm_do(cp, helm, "upgrade", RELEASE, str(CHART), "-n", NS, "-f", str(CHART / "ci" / "manage-leases-values.yaml"),
                   "--set", "archive.enabled=true")
    assert done.returncode == 0, done.stderr
    kinds = sorted(o["kind"] for o in release_objects(cp, helm))
    assert [k for k in kinds if k in ("ClusterRole", "CronJob", "PersistentVolumeClaim")] == [
        "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRole", "CronJob", "PersistentVolumeClaim"]
    assert exists(cp, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "metadata": {"name": f"{FULL}-ledger-keeper"}})
    proc = as_the_deployment_runs(cp, tmp_path, "helm-replica-b")
    try:
        assert "--manage-leases" in proc.proc.args
        wait_for("a lease for each run", lambda: sorted(x["spec"]["runRef"]["name"] for x in get(
            cp, f"{API}/namespaces/{TEAM}/gpuleases")["items"]) == ["small", "wide"], timeout=60, every=0.2)
        wait_for("small Running", lambda: status_of(cp, "runs", "small").get("phase") == "Running", timeout=30,
                 every=0.2)
        wait_for("b's usage", lambda: status_of(cp, "budgets", "b")["envelopes"][0]["usedGPUs"] == 12, timeout=30,
                 every=0.2)
        events = get(cp, f"/apis/events.k8s.io/v1/namespaces/{TEAM}/events")["items"]
        assert {e["regarding"]["name"] for e in events if e["regarding"]["kind"] == "GPULease"} == {
            x["metadata"]["name"] for x in get(cp, f"{API}/namespaces/{TEAM}/gpuleases")["items"]}
        assert refusals(proc) == []
    finally:
        assert proc.stop() == 0, "\n".join(proc.lines()[-30:])


def test_helm_uninstall_removes_the_release_and_leaves_the_crds_the_fleet_and_the_kustomize_base(cp, helm):
    """Everything of the release goes but the lease archive's claim (resource-policy keep: the ledger's history)."""
    objs = release_objects(cp, helm)
    assert sum(o["kind"] == "ClusterRole" for o in objs) == 4  # reconciler, reader, ledger keeper, archiver
    done = helm_do(cp, helm, "uninstall", RELEASE, "-n", NS)
    assert done.returncode == 0, done.stderr
    for obj in objs:
        assert exists(cp, obj) == (obj["kind"] == "PersistentVolumeClaim"), obj["metadata"]
    assert len(get(cp, f"{API}/namespaces/{TEAM}/gpuleases")["items"]) == 2
    for name in ("clusterroles/kubectl-runs-reconciler", "clusterroles/kubectl-runs-reader"):
        assert cp.request("GET", f"/apis/rbac.authorization.k8s.io/v1/{name}")[0] == 200
    assert cp.request("GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
                             "kubectl-runs-preemption")[0] == 200
    assert helm_do(cp, helm, "list", "-A", "-q").stdout.strip() == ""


def test_the_crd_upgrade_story_on_a_cluster_where_helm_installed_the_crds(helm, tmp_path):
    """On a cluster without them, the first `helm install` creates the four CRDs from crds/. A later chart whose
    CRD changed: `helm upgrade` leaves the CRD as it was; `kubectl apply --server-side` of the chart's crds/ is a
    conflict with the field manager "helm", and with --force-conflicts applies; `helm uninstall` leaves the CRDs."""
    from controlplane import ControlPlane, skip_reason

    if skip_reason():
        pytest.skip(skip_reason())
    chart = tmp_path / "kubectl-runs"
    with ControlPlane() as plane:
        def helm_here(*args: str) -> subprocess.CompletedProcess:
            return helm_do(plane, helm, *args, "-n", "kubectl-runs-system")

        def short_names() -> list[str]:
            return get(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/runs.jobtree.dev")[
                "spec"]["names"]["shortNames"]

        done = helm_here("install", "kubectl-runs", str(CHART), "--create-namespace")
        assert done.returncode == 0, done.stderr
        assert crd_versions(plane).keys() == set(CRDS) and short_names() == ["rn"]
        shutil.copytree(CHART, chart)
        crd = chart / "crds" / "runs.jobtree.dev.yaml"
        assert "shortNames: [rn]" in crd.read_text()
        crd.write_text(crd.read_text().replace("shortNames: [rn]", "shortNames: [rn, rns]"))
        done = helm_here("upgrade", "kubectl-runs", str(chart), "--reset-then-reuse-values")
        assert done.returncode == 0, done.stderr
        assert short_names() == ["rn"]  # Helm does not upgrade CRDs
        apply = ["apply", "--server-side", "-f", str(chart / "crds")]
        done = plane.kubectl(*apply, check=False)
        assert done.returncode != 0 and 'conflict with "helm"' in done.stderr, done.stderr
        plane.kubectl(*apply, "--force-conflicts")
        assert short_names() == ["rn", "rns"]
        done = helm_here("uninstall", "kubectl-runs")
        assert done.returncode == 0, done.stderr
        assert crd_versions(plane).keys() == set(CRDS)
