"""Who may preempt, decided by the real API server: deploy/'s ValidatingAdmissionPolicy kubectl-runs-preemption and
its RBAC (``kubectl apply -k deploy/overlays/manage-leases``), and callers holding real service-account tokens
(TokenRequest, ``kubectl create token``). Nothing is mocked: every allow and deny below is the API server's.

- A namespace user — ServiceAccount vap-team/alice, whose Role allows every write of Reservations, GPULeases and
  their status in vap-team — is refused by the policy (not by RBAC) when it creates a Reservation or a GPULease,
  patches a status, forges the reconciler's label or deletes one, and the refusal says what to do.
- The reconciler's ServiceAccount creates a Reservation and a GPULease and patches their status; a cluster admin
  (the test's admin kubeconfig, group system:masters) writes one by hand; a user granted ``preempt`` with
  deploy/rbac-preempt.example.yaml writes Reservations (and still no GPULease).
- The lease archiver (overlays/lease-archive) still deletes a closed lease.
- kube-controller-manager's identities (ServiceAccounts kube-system/namespace-controller and
  kube-system/generic-garbage-collector, with their bootstrap RBAC) still finish a foreground deletion and delete a
  namespace to the end — the steps the controllers take, since no controller-manager runs here.

The session's cluster is shared with the other live tests: what this module writes lives in its own namespaces and
is deleted again; the policy stays (it is part of deploy/, which test_rbac_deploy applies too)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
import yaml
from conftest import ROOT
from test_rbac_deploy import Caller, sa_kubeconfig

NS = "kubectl-runs-system"
RECONCILER = f"system:serviceaccount:{NS}:kubectl-runs-reconciler"
TEAM = "vap-team"
ALICE = f"system:serviceaccount:{TEAM}:alice"
DOOMED = "vap-doomed"
POLICY = "kubectl-runs-preemption"
API = "/apis/jobtree.dev/v1alpha1"
DENIED = f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request"
RSV_MESSAGE = ("Reservations are the right to preempt: only the kubectl-runs reconciler and cluster admins may "
               "create, change or delete them")
LEASE_MESSAGE = ("GPULeases are the GPU ledger: only the kubectl-runs reconciler and cluster admins may create, "
                 "change or delete them")
MANAGED = {"app.kubernetes.io/managed-by": "kubectl-runs-reconciler"}
APPROVED = {"jobtree.dev/preemption": "approved"}
MERGE = "application/merge-patch+json"


def reservation(name: str, namespace: str = TEAM, labels=None, annotations=None) -> dict:
    meta = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Reservation", "metadata": meta,
            "spec": {"runRef": {"namespace": namespace, "name": "train"}, "scope": {"flavor": "H100-80GB"},
                     "earliestStart": "2025-11-22T00:00:00Z"}}


def lease(name: str, namespace: str = TEAM) -> dict:
    return {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"owner": "org:ai:vap", "runRef": {"namespace": namespace, "name": "train"}, "group": 0,
                     "flavor": "H100-80GB", "slice": {"slots": ["gpu-vap-01#0", "gpu-vap-01#1"], "role": "Active"},
                     "start": "2025-11-20T10:00:00Z", "reason": "Start"}}


CLOSE = {"status": {"closed": True, "ended": "2025-11-20T11:00:00Z", "closureReason": "Completed"}}


def kubectl(cluster, kubeconfig: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """The real kubectl as someone else: ``kubectl --kubeconfig <theirs> ARGS``."""
    return subprocess.run([shutil.which("kubectl") or "/usr/bin/kubectl", "--kubeconfig", kubeconfig, *args],
                          input=input, capture_output=True, text=True, timeout=60)


def create(cluster, kubeconfig: str, obj: dict) -> subprocess.CompletedProcess:
    return kubectl(cluster, kubeconfig, "create", "-f", "-", input=json.dumps(obj))


def refused(done: subprocess.CompletedProcess, message: str, who: str = ALICE) -> str:
    """The policy's refusal, as kubectl prints it: exit 1, the policy named, its message with the caller."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    err = " ".join(done.stderr.split())
    assert DENIED in err and message in err, err
    assert f"({who} lacks the RBAC verb preempt on" in err, err
    assert "ask an admin" in err, err
    return err


def get(cluster, plural: str, name: str, namespace: str = TEAM) -> dict | None:
    status, body = cluster.request("GET", f"{API}/namespaces/{namespace}/{plural}/{name}")
    assert status in (200, 404), body
    return body if status == 200 else None


def wait_until(check, what: str, timeout: float = 30):
    """RBAC and admission policies reach the API server through informers: poll."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} never took effect"
        time.sleep(0.2)


def token(cluster, namespace: str, name: str) -> str:
    return cluster.kubectl("create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()


def ensure(cluster, *args: str) -> None:
    """``kubectl create ARGS`` as admin, fine when it exists already."""
    done = cluster.kubectl("create", *args, check=False)
    assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr


def writer_role(cluster, namespace: str, user: str) -> None:
    """Everything RBAC can allow on Reservations, GPULeases and their status in ``namespace``: only the policy can
    refuse ``user``."""
    ensure(cluster, "namespace", namespace)
    ensure(cluster, "serviceaccount", user, "-n", namespace)
    ensure(cluster, "role", "jobtree-writer", "-n", namespace,
           "--verb=get,list,watch,create,update,patch,delete,deletecollection",
           "--resource=reservations.jobtree.dev,gpuleases.jobtree.dev,"
           "reservations.jobtree.dev/status,gpuleases.jobtree.dev/status")
    ensure(cluster, "rolebinding", "jobtree-writer", "-n", namespace, "--role=jobtree-writer",
           f"--serviceaccount={namespace}:{user}")


@pytest.fixture(scope="module")
def policy(cluster, tmp_path_factory):
    """deploy/ with the ledger keeper's RBAC applied; tokens and kubeconfigs for alice and the reconciler."""
    done = cluster.kubectl("apply", "-k", str(ROOT / "deploy" / "overlays" / "manage-leases"), check=False,
                           timeout=120)
    assert done.returncode == 0, done.stderr
    writer_role(cluster, TEAM, "alice")
    tmp = tmp_path_factory.mktemp("vap")
    who = {"alice": sa_kubeconfig(cluster, token(cluster, TEAM, "alice"), tmp / "alice.kubeconfig"),
           "reconciler": sa_kubeconfig(cluster, token(cluster, NS, "kubectl-runs-reconciler"),
                                       tmp / "reconciler.kubeconfig"),
           "admin": cluster.admin_kubeconfig}
    alice = Caller(cluster, json.loads(open(who["alice"]).read())["users"][0]["user"]["token"])  # noqa: SIM115
    probe = reservation("probe")
    collection = f"{API}/namespaces/{TEAM}/reservations?dryRun=All"

    def policy_refuses_alice():
        status, body = alice("POST", collection, probe)
        assert status in (201, 403), body  # 403 from RBAC would mean the Role is not in effect yet: keep polling
        return status == 403 and DENIED in body["message"]

    wait_until(policy_refuses_alice, "the policy")
    reconciler = Caller(cluster, json.loads(open(who["reconciler"]).read())["users"][0]["user"]["token"])  # noqa: SIM115
    wait_until(lambda: reconciler("POST", f"{API}/namespaces/{TEAM}/gpuleases?dryRun=All", lease("probe"))[0] == 201,
               "the ledger keeper's ClusterRoleBinding")
    try:
        yield who
    finally:
        for plural in ("reservations", "gpuleases"):
            cluster.kubectl("delete", f"{plural}.jobtree.dev", "--all", "-n", TEAM, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", "kubectl-runs-ledger-keeper", check=False)
        cluster.kubectl("apply", "-k", str(ROOT / "deploy"), check=False, timeout=120)


def can_i(cluster, verb: str, resource: str, *extra: str, namespace: str = TEAM) -> bool:
    done = cluster.kubectl("auth", "can-i", verb, resource, "-n", namespace, *extra, check=False)
    assert done.stdout.strip() in ("yes", "no"), done.stdout + done.stderr
    return done.stdout.strip() == "yes"


def test_the_policy_is_installed_and_preempt_is_an_rbac_verb(cluster, policy):
    listed = cluster.kubectl("get", "validatingadmissionpolicy").stdout
    assert POLICY in listed, listed
    binding = json.loads(cluster.kubectl("get", "validatingadmissionpolicybinding", POLICY, "-o", "json").stdout)
    assert binding["spec"]["validationActions"] == ["Deny"] and binding["spec"]["policyName"] == POLICY
    stored = json.loads(cluster.kubectl("get", "validatingadmissionpolicy", POLICY, "-o", "json").stdout)
    assert not stored.get("status", {}).get("typeChecking", {}).get("expressionWarnings"), stored.get("status")
    for resource in ("reservations.jobtree.dev", "gpuleases.jobtree.dev"):
        assert can_i(cluster, "preempt", resource, f"--as={RECONCILER}")
        assert can_i(cluster, "preempt", resource)  # the admin kubeconfig: system:masters
        assert not can_i(cluster, "preempt", resource, f"--as={ALICE}")
        # RBAC alone would let alice write them: only the policy stands in the way
        for verb in ("create", "patch", "delete"):
            assert can_i(cluster, verb, resource, f"--as={ALICE}"), (verb, resource)


def test_a_namespace_user_is_refused_by_the_policy_with_what_to_do(cluster, policy):
    alice = policy["alice"]
    err = refused(create(cluster, alice, reservation("mine")), RSV_MESSAGE)
    assert "let the reconciler create one" in err
    refused(create(cluster, alice, reservation("forged", labels=MANAGED, annotations=APPROVED)), RSV_MESSAGE)
    err = refused(create(cluster, alice, lease("mine")), LEASE_MESSAGE)
    assert "GPULeases are the GPU ledger" in err
    assert get(cluster, "reservations", "mine") is None and get(cluster, "reservations", "forged") is None
    assert get(cluster, "gpuleases", "mine") is None

    # objects someone allowed made: alice may not close the lease, activate the reservation, forge the
    # reconciler's label onto it, or delete either
    assert create(cluster, policy["admin"], lease("held")).returncode == 0
    assert create(cluster, policy["admin"], reservation("queued", annotations=APPROVED)).returncode == 0
    refused(kubectl(cluster, alice, "patch", "gpulease.jobtree.dev", "held", "-n", TEAM, "--subresource=status",
                    "--type=merge", "-p", json.dumps(CLOSE)), LEASE_MESSAGE)
    refused(kubectl(cluster, alice, "patch", "reservation.jobtree.dev", "queued", "-n", TEAM,
                    "--subresource=status", "--type=merge", "-p", '{"status": {"state": "Activated"}}'), RSV_MESSAGE)
    refused(kubectl(cluster, alice, "label", "reservation.jobtree.dev", "queued", "-n", TEAM,
                    "app.kubernetes.io/managed-by=kubectl-runs-reconciler"), RSV_MESSAGE)
    refused(kubectl(cluster, alice, "delete", "reservation.jobtree.dev", "queued", "-n", TEAM), RSV_MESSAGE)
    refused(kubectl(cluster, alice, "delete", "gpulease.jobtree.dev", "held", "-n", TEAM), LEASE_MESSAGE)
    assert "status" not in get(cluster, "gpuleases", "held")
    queued = get(cluster, "reservations", "queued")
    assert "status" not in queued and "labels" not in queued["metadata"]
    print(f"\nrefused: {err}")


def test_the_reconciler_creates_both_and_patches_their_status(cluster, policy):
    rec = policy["reconciler"]
    done = create(cluster, rec, reservation("train-r1", labels=MANAGED))
    assert done.returncode == 0, done.stderr
    done = create(cluster, rec, lease("train-g0-active-0"))
    assert done.returncode == 0, done.stderr
    done = kubectl(cluster, rec, "patch", "reservation.jobtree.dev", "train-r1", "-n", TEAM, "--subresource=status",
                   "--type=merge", "-p", '{"status": {"state": "Failed", "reason": "NotAuthorized"}}')
    assert done.returncode == 0, done.stderr
    done = kubectl(cluster, rec, "patch", "gpulease.jobtree.dev", "train-g0-active-0", "-n", TEAM,
                   "--subresource=status", "--type=merge", "-p", json.dumps(CLOSE))
    assert done.returncode == 0, done.stderr
    rsv = get(cluster, "reservations", "train-r1")
    assert rsv["metadata"]["labels"] == MANAGED and rsv["status"]["state"] == "Failed"
    assert get(cluster, "gpuleases", "train-g0-active-0")["status"]["closed"] is True
    # RBAC still decides the rest: the policy grants nothing
    done = kubectl(cluster, rec, "delete", "reservation.jobtree.dev", "train-r1", "-n", TEAM)
    assert done.returncode == 1 and "cannot delete resource" in done.stderr, done.stderr


def test_a_cluster_admin_writes_a_reservation_by_hand(cluster, policy):
    admin = policy["admin"]
    done = create(cluster, admin, reservation("by-hand", annotations=APPROVED))
    assert done.returncode == 0, done.stderr
    done = kubectl(cluster, admin, "patch", "reservation.jobtree.dev", "by-hand", "-n", TEAM, "--subresource=status",
                   "--type=merge", "-p", '{"status": {"state": "Pending"}}')
    assert done.returncode == 0, done.stderr
    assert get(cluster, "reservations", "by-hand")["metadata"]["annotations"] == APPROVED
    assert kubectl(cluster, admin, "delete", "reservation.jobtree.dev", "by-hand", "-n", TEAM).returncode == 0
    assert get(cluster, "reservations", "by-hand") is None


def test_preempt_granted_with_the_example_lets_a_user_write_reservations_only(cluster, policy):
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac-preempt.example.yaml").read_text()) if d]
    for doc in docs:
        if doc["kind"] == "RoleBinding":
            doc["metadata"]["namespace"] = TEAM
            doc["subjects"] = [{"kind": "ServiceAccount", "name": "alice", "namespace": TEAM}]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    try:
        alice = policy["alice"]
        wait_until(lambda: create(cluster, alice, reservation("granted", annotations=APPROVED)).returncode == 0,
                   "the preempt RoleBinding")
        assert get(cluster, "reservations", "granted")["metadata"]["annotations"] == APPROVED
        assert can_i(cluster, "preempt", "reservations.jobtree.dev", f"--as={ALICE}")
        refused(create(cluster, alice, lease("granted")), LEASE_MESSAGE)  # the ledger is still the reconciler's
        assert kubectl(cluster, alice, "delete", "reservation.jobtree.dev", "granted", "-n", TEAM).returncode == 0
    finally:
        cluster.kubectl("delete", "rolebinding", "kubectl-runs-preempter", "-n", TEAM, check=False)
        cluster.kubectl("delete", "clusterrole", "kubectl-runs-preempter", check=False)
    wait_until(lambda: create(cluster, policy["alice"], reservation("revoked")).returncode == 1, "the revocation")
    refused(create(cluster, policy["alice"], reservation("revoked")), RSV_MESSAGE)


def test_the_lease_archiver_still_prunes_through_the_policy(cluster, policy):
    """overlays/lease-archive's ServiceAccount deletes closed leases (``leases archive --prune``): it holds
    ``preempt`` on gpuleases, and RBAC still allows it nothing but the delete."""
    done = cluster.kubectl("apply", "-k", str(ROOT / "deploy" / "overlays" / "lease-archive"), check=False,
                           timeout=120)
    assert done.returncode == 0, done.stderr
    assert create(cluster, policy["admin"], lease("archived")).returncode == 0
    assert kubectl(cluster, policy["admin"], "patch", "gpulease.jobtree.dev", "archived", "-n", TEAM,
                   "--subresource=status", "--type=merge", "-p", json.dumps(CLOSE)).returncode == 0
    archiver = Caller(cluster, token(cluster, NS, "kubectl-runs-archiver"))
    path = f"{API}/namespaces/{TEAM}/gpuleases/archived"
    wait_until(lambda: archiver("GET", path)[0] == 200, "the archiver's ClusterRoleBinding")
    status, body = archiver("POST", f"{API}/namespaces/{TEAM}/gpuleases?dryRun=All", lease("again"))
    assert status == 403 and "cannot create resource" in body["message"], body  # RBAC, before the policy
    status, body = archiver("DELETE", path)
    assert status == 200, body
    assert get(cluster, "gpuleases", "archived") is None


def controller(cluster, name: str) -> Caller:
    """A real token of kube-controller-manager's ServiceAccount ``kube-system/<name>`` (the controller manager
    creates it with --use-service-account-credentials; the API server's bootstrap RBAC binds its role)."""
    binding = cluster.kubectl("get", "clusterrolebinding", f"system:controller:{name}", "-o", "json").stdout
    assert {"kind": "ServiceAccount", "name": name, "namespace": "kube-system"} in json.loads(binding)["subjects"]
    ensure(cluster, "serviceaccount", name, "-n", "kube-system")
    return Caller(cluster, token(cluster, "kube-system", name))


def test_garbage_collection_and_namespace_deletion_still_work(cluster, policy, tmp_path):
    writer_role(cluster, DOOMED, "bob")
    bob = Caller(cluster, token(cluster, DOOMED, "bob"))
    base = f"{API}/namespaces/{DOOMED}"
    for obj in (reservation("a", DOOMED, annotations=APPROVED), reservation("b", DOOMED, labels=MANAGED),
                lease("a", DOOMED), lease("b", DOOMED)):
        assert create(cluster, policy["admin"], obj).returncode == 0
    wait_until(lambda: bob("GET", f"{base}/reservations")[0] == 200, "bob's Role")

    # a foreground deletion: the API server sets the foregroundDeletion finalizer, the garbage collector removes it
    status, body = cluster.request("DELETE", f"{base}/reservations/a", {"propagationPolicy": "Foreground"})
    assert status == 200, body
    assert get(cluster, "reservations", "a", DOOMED)["metadata"]["finalizers"] == ["foregroundDeletion"]
    unfinalize = {"metadata": {"finalizers": None}}
    status, body = bob("PATCH", f"{base}/reservations/a", unfinalize, MERGE)
    assert status == 403 and DENIED in body["message"], body
    gc = controller(cluster, "generic-garbage-collector")
    status, body = gc("PATCH", f"{base}/reservations/a", unfinalize, MERGE)
    assert status == 200, body
    assert get(cluster, "reservations", "a", DOOMED) is None
    status, body = gc("DELETE", f"{base}/gpuleases/a")  # a dependent the collector deletes
    assert status == 200, body
    status, body = gc("PATCH", f"{base}/gpuleases/b/status", CLOSE, MERGE)  # not a collector's write
    assert status == 403 and LEASE_MESSAGE in body["message"], body

    # deleting the namespace: the namespace controller deletes every collection in it, then finalizes it
    for plural in ("reservations", "gpuleases"):
        status, body = bob("DELETE", f"{base}/{plural}")  # deletecollection is checked object by object too
        assert status == 403 and DENIED in body["message"], body
    cluster.kubectl("delete", "namespace", DOOMED, "--wait=false")
    ns = cluster.request("GET", f"/api/v1/namespaces/{DOOMED}")[1]
    assert ns["status"]["phase"] == "Terminating" and ns["spec"]["finalizers"] == ["kubernetes"]
    nc = controller(cluster, "namespace-controller")
    for path in (f"{base}/reservations", f"{base}/gpuleases", f"/api/v1/namespaces/{DOOMED}/serviceaccounts",
                 f"/apis/rbac.authorization.k8s.io/v1/namespaces/{DOOMED}/rolebindings",
                 f"/apis/rbac.authorization.k8s.io/v1/namespaces/{DOOMED}/roles",
                 f"/api/v1/namespaces/{DOOMED}/configmaps"):
        status, body = nc("DELETE", path)
        assert status == 200, (path, body)
        status, body = nc("GET", path)
        assert status == 200 and body["items"] == [], (path, body)
    ns["spec"]["finalizers"] = []
    status, body = nc("PUT", f"/api/v1/namespaces/{DOOMED}/finalize", ns)
    assert status == 200, body
    wait_until(lambda: cluster.request("GET", f"/api/v1/namespaces/{DOOMED}")[0] == 404, "the namespace's deletion")
