"""The Helm chart deploy/helm/kubectl-runs with the real Helm v3 (built from its Go module by scripts/helm.sh):
``helm lint --strict`` and ``helm template`` for the defaults and every ci/*-values.yaml (chart-testing's
convention), and one source with the kustomize base: for the default values the chart renders exactly the objects
of ``kubectl kustomize deploy/`` (less the Namespace, Helm's own labels aside), with manageLeases those of
overlays/manage-leases, with everything on those of overlays/prometheus-operator + overlays/lease-archive.
tests/helm/test_helm_install.py installs it on the real API server."""

from __future__ import annotations

import json

import pytest
from helm_chart import (
    CHART,
    DEPLOY,
    ROOT,
    SERVICE_MONITOR_API,
    differences,
    helm_binary,
    helm_template,
    kustomize,
    parse,
    run,
)

CI = sorted((CHART / "ci").glob("*-values.yaml"))
DASHBOARD = DEPLOY / "grafana" / "kubectl-runs-reconciler.json"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def values(name: str) -> list[str]:
    return ["-f", str(CHART / "ci" / f"{name}-values.yaml")]


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def test_helm_is_the_version_pinned_in_go_mod_and_knows_a_current_kubernetes(helm):
    """scripts/helm.sh sets the version and the default Kubernetes version as Helm's Makefile does: without the
    latter `helm template` would assume 1.20 and refuse the chart (kubeVersion >= 1.30)."""
    pinned = next(line.split()[2] for line in (ROOT / "tests" / "helm" / "go.mod").read_text().splitlines()
                  if line.startswith("require helm.sh/helm/v3 "))
    done = run([helm, "version", "--template", "{{.Version}}"])
    assert done.returncode == 0 and done.stdout.strip() == pinned, done.stdout + done.stderr
    done = run([helm, "template", "x", str(CHART)])
    assert done.returncode == 0, done.stderr


def test_the_ci_values_cover_the_defaults_the_ledger_keeper_and_everything_optional():
    assert [p.name for p in CI] == ["default-values.yaml", "manage-leases-values.yaml",
                                    "monitoring-archive-values.yaml"]


@pytest.mark.parametrize("args", [[], *(["-f", str(p)] for p in CI)], ids=["chart-defaults", *(p.stem for p in CI)])
def test_helm_lint_strict(helm, args):
    done = run([helm, "lint", "--strict", str(CHART), *args])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.parametrize("path", CI, ids=lambda p: p.stem)
def test_helm_template_each_ci_values_file_in_a_release_of_its_own(helm, path):
    """Another release name and namespace: every object is the release's own (named "<release>-kubectl-runs-…",
    namespaced ones in the release namespace, selectors narrowed to the release), so it never collides with the
    kustomize base's objects or another release's."""
    objs = helm_template(helm, "-f", str(path), release="helmtest", namespace="kubectl-runs-helm", crds=False)
    assert objs
    for obj in objs:
        meta = obj["metadata"]
        assert meta["name"].startswith("helmtest-kubectl-runs-"), meta["name"]
        assert meta["labels"]["app.kubernetes.io/instance"] == "helmtest"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                               "ValidatingAdmissionPolicyBinding"):
            assert meta["namespace"] == "kubectl-runs-helm", meta
    (dep,) = by_kind(objs, "Deployment")
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "helmtest"
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-election-id=helmtest-kubectl-runs-reconciler" in args
    (role,) = by_kind(objs, "Role")
    assert role["rules"][1]["resourceNames"] == ["helmtest-kubectl-runs-reconciler"]
    (binding,) = by_kind(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == "helmtest-kubectl-runs-preemption"


def test_defaults_render_the_objects_of_the_kustomize_base(helm):
    assert differences(helm_template(helm), kustomize(DEPLOY)) == ""


def test_manage_leases_renders_the_objects_of_the_manage_leases_overlay(helm):
    """The overlay leaves the reports' ClusterRole out (`kubectl apply -f deploy/rbac-readonly.yaml` beside it);
    the chart creates it unless readerClusterRole.create is false."""
    reader = parse((DEPLOY / "rbac-readonly.yaml").read_text())
    overlay = kustomize(DEPLOY / "overlays" / "manage-leases")
    assert differences(helm_template(helm, *values("manage-leases")), overlay + reader) == ""
    assert differences(helm_template(helm, *values("manage-leases"), "--set", "readerClusterRole.create=false"),
                       overlay) == ""


def test_everything_optional_renders_the_prometheus_operator_and_lease_archive_overlays_and_the_dashboard(helm):
    chart = helm_template(helm, *values("monitoring-archive"), "--api-versions", SERVICE_MONITOR_API)
    (dashboard,) = by_kind(chart, "ConfigMap")
    overlays = kustomize(DEPLOY / "overlays" / "prometheus-operator", DEPLOY / "overlays" / "lease-archive")
    reader = parse((DEPLOY / "rbac-readonly.yaml").read_text())
    assert differences([o for o in chart if o is not dashboard], overlays + reader) == ""
    assert dashboard["metadata"]["name"] == "kubectl-runs-dashboard"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"] == {"kubectl-runs-reconciler.json": DASHBOARD.read_text()}
    json.loads(dashboard["data"]["kubectl-runs-reconciler.json"])


def test_the_dashboard_label_is_configurable(helm):
    objs = helm_template(helm, "--set", "dashboard.enabled=true", "--set", "dashboard.labels.grafana_dashboard=null",
                         "--set-string", "dashboard.labels.dashboards=gpu", "--set", "dashboard.namespace=monitoring",
                         "--set", "dashboard.annotations.grafana_folder=GPU", crds=False)
    (dashboard,) = by_kind(objs, "ConfigMap")
    meta = dashboard["metadata"]
    assert "grafana_dashboard" not in meta["labels"] and meta["labels"]["dashboards"] == "gpu"
    assert meta["namespace"] == "monitoring" and meta["annotations"] == {"grafana_folder": "GPU"}


def test_the_service_monitor_is_rendered_only_where_the_prometheus_operator_api_is_served(helm):
    without_api = helm_template(helm, *values("monitoring-archive"), crds=False)
    assert by_kind(without_api, "ServiceMonitor") == []
    with_api = helm_template(helm, *values("monitoring-archive"), "--api-versions", SERVICE_MONITOR_API, crds=False)
    (monitor,) = by_kind(with_api, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    not_enabled = helm_template(helm, "--api-versions", SERVICE_MONITOR_API, crds=False)
    assert by_kind(not_enabled, "ServiceMonitor") == []


def test_crds_come_only_from_the_crds_directory(helm):
    """The CRDs are Helm's crds/ (installed once, never templated, upgraded or deleted by Helm): `helm template`
    shows them only with --include-crds (test_defaults_render_… compares them with crds/)."""
    assert by_kind(helm_template(helm, crds=False), "CustomResourceDefinition") == []
    crds = by_kind(helm_template(helm), "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == sorted(p.stem for p in (ROOT / "crds").glob("*.yaml"))


def test_values_for_image_leader_election_args_scheduling_and_archive_storage(helm):
    objs = helm_template(helm, "--set", "image.tag=v9.9.9", "--set", "image.repository=registry.local/kr",
                         "--set", "image.pullSecrets[0].name=regcred", "--set", "leaderElection.id=lead",
                         "--set", "leaderElection.namespace=elsewhere", "--set", "extraArgs={--victim-protection=3h}",
                         "--set", "metrics.port=9090", "--set", "nodeSelector.pool=system",
                         "--set", "archive.enabled=true", "--set", "archive.storage.existingClaim=mine",
                         "--set", "archive.retention=7d", "--set", "podDisruptionBudget.enabled=false",
                         "--set", "replicas=3", crds=False)
    (dep,) = by_kind(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert dep["spec"]["replicas"] == 3
    assert container["image"] == "registry.local/kr:v9.9.9"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["nodeSelector"] == {"pool": "system"}
    assert container["args"] == ["reconcile", "--leader-elect", "--leader-election-id=lead",
                                 "--leader-election-namespace=elsewhere", "--metrics-addr=:9090",
                                 "--resync-period=5m", "--victim-protection=3h"]
    assert container["ports"][0]["containerPort"] == 9090
    (role,) = by_kind(objs, "Role")
    assert role["metadata"]["namespace"] == "elsewhere" and role["rules"][1]["resourceNames"] == ["lead"]
    (role_binding,) = by_kind(objs, "RoleBinding")
    assert role_binding["metadata"]["namespace"] == "elsewhere"
    assert role_binding["subjects"] == [{"kind": "ServiceAccount", "name": "kubectl-runs-reconciler",
                                         "namespace": "kubectl-runs-system"}]
    assert by_kind(objs, "PodDisruptionBudget") == [] and by_kind(objs, "PersistentVolumeClaim") == []
    (cron,) = by_kind(objs, "CronJob")
    job = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job["volumes"][0]["persistentVolumeClaim"]["claimName"] == "mine"
    assert "--before=7d" in job["containers"][0]["args"]
    assert job["containers"][0]["image"] == "registry.local/kr:v9.9.9"


def test_kube_api_rate_limits_are_args_only_when_set(helm):
    """kubeAPI.qps/burst become --kube-api-qps/--kube-api-burst; unset (the default) they are not passed at all, so
    the reconciler's own defaults apply and the default rendering stays that of the kustomize base."""
    (dep,) = by_kind(helm_template(helm, "--set", "kubeAPI.qps=200", "--set", "kubeAPI.burst=400", crds=False),
                     "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--kube-api-qps=200", "--kube-api-burst=400"]
    (dep,) = by_kind(helm_template(helm, "--set", "kubeAPI.qps=-1", crds=False), "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--kube-api-qps=-1"
    (dep,) = by_kind(helm_template(helm, crds=False), "Deployment")
    assert not [a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--kube-api")]


def test_one_replica_without_leader_election(helm):
    objs = helm_template(helm, "--set", "leaderElection.enabled=false", "--set", "replicas=1", crds=False)
    (dep,) = by_kind(objs, "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["reconcile", "--no-leader-elect"] and not any("leader-election" in a for a in args)
    assert by_kind(objs, "Role") == [] and by_kind(objs, "RoleBinding") == []


def test_refuses_replicas_that_would_all_write_and_a_kubernetes_older_than_the_admission_policy(helm):
    done = run([helm, "template", "x", str(CHART), "--set", "leaderElection.enabled=false"])
    assert done.returncode != 0 and "replicas > 1 needs leaderElection.enabled" in done.stderr
    done = run([helm, "template", "x", str(CHART), "--kube-version", "1.29.4"])
    assert done.returncode != 0 and "kubeVersion" in done.stderr, done.stderr
