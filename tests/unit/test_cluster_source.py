"""The live source's pagination and error mapping, with the HTTP layer replaced by recorded answers.
(The real API server is exercised in tests/integration; a 410 Gone for an expired continue token cannot be
provoked on demand there, so its relist logic is checked here.)"""

from __future__ import annotations

import json

import pytest

from kubectl_runs.sources import Source
from kubectl_runs.sources.cluster import RESOURCES, Cluster, ClusterError, _Expired

LEASES = next(r for r in RESOURCES if r.kind == "GPULease")


class Scripted(Cluster):
    """A Cluster whose GETs answer from a script of (continue token in, body out or exception)."""

    def __init__(self, answers):
        self.server = "https://k8s.example:6443"
        self.timeout = None
        self.chunk_size = 2
        self.answers = list(answers)
        self.requests = []

    def get(self, path, query=None):
        self.requests.append(dict(query or []))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return json.dumps(answer).encode()


def page(names, token=""):
    return {"metadata": {"continue": token}, "items": [{"metadata": {"name": n}} for n in names]}


def test_pages_follow_continue_tokens():
    cluster = Scripted([page(["a", "b"], "t1"), page(["c"], "")])
    bodies = list(cluster.pages(LEASES, None))
    assert len(bodies) == 2
    assert cluster.requests == [{"limit": 2}, {"limit": 2, "continue": "t1"}]


def test_expired_continue_token_starts_the_list_again():
    """410 Gone on page 2: the pages read so far are dropped and the list starts over without a token."""
    cluster = Scripted([page(["a", "b"], "t1"), _Expired("too old"), page(["a", "b"], "t2"), page(["c"])])
    bodies = [json.loads(b) for b in cluster.pages(LEASES, None)]
    assert [i["metadata"]["name"] for b in bodies for i in b["items"]] == ["a", "b", "c"]
    assert cluster.requests[2] == {"limit": 2}


def test_token_expiring_every_time_gives_up_with_one_line():
    cluster = Scripted([page(["a"], "t"), _Expired("x")] * 3)
    with pytest.raises(ClusterError, match=r"continue token expired 3 times in a row \(410 Gone\)"):
        list(cluster.pages(LEASES, None))


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (403, {"kind": "Status", "message": 'gpuleases.jobtree.dev is forbidden: User "bob" cannot list '
               'resource "gpuleases" in API group "jobtree.dev" at the cluster scope'},
         'forbidden: gpuleases.jobtree.dev is forbidden: User "bob" cannot list resource "gpuleases" in API '
         'group "jobtree.dev" at the cluster scope'),
        (401, {"message": "Unauthorized"},
         "unauthorized: the server at https://k8s.example:6443 does not accept your credentials (check the user "
         "of your kubeconfig context): Unauthorized"),
        (404, {"message": "the server could not find the requested resource"},
         "the jobtree.dev CRDs are not installed on https://k8s.example:6443 (the server could not find the "
         "requested resource): kubectl apply -f crds/"),
        (500, {"message": "etcdserver: request timed out\nretry"},
         "the server at https://k8s.example:6443 answered 500 for GET /apis/jobtree.dev/v1alpha1/gpuleases: "
         "etcdserver: request timed out retry"),
    ],
    ids=["forbidden", "unauthorized", "crds-missing", "server-error"],
)
def test_http_errors_become_one_line(status, body, expected):
    cluster = Scripted([])
    error = cluster._http_error(status, json.dumps(body).encode(), LEASES.path(None))
    assert str(error) == expected
    assert "\n" not in str(error)


def test_missing_kubeconfig_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterError, match=r"^no kubeconfig at .*missing and not running inside a cluster"):
        Cluster(Source(kubeconfig=str(tmp_path / "missing")))


def test_malformed_kubeconfig_is_one_line(tmp_path):
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\ncontexts: []\ncurrent-context: nowhere\n")
    with pytest.raises(ClusterError, match=rf"^kubeconfig {config}: Invalid kube-config file. Expected object "
                       "with name nowhere in"):
        Cluster(Source(kubeconfig=str(config)))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"this: is: not: yaml: [", "not valid YAML at line 1, column 9: mapping values are not allowed in this context"),
        (b"- a\n", "not a valid kubeconfig: expected a mapping (apiVersion, kind: Config, clusters, users, "
                   "contexts), got a list"),
        (b"clusters: 5\n", "not a valid kubeconfig: clusters: expected a list of named clusters, got a number"),
        (b"clusters: [{name: c, cluster: {server: [a]}}]\n",
         "not a valid kubeconfig: clusters[0].cluster.server: expected a string, got a list"),
        (b"users: [{name: u, user: {exec: {command: x, args: [1]}}}]\n",
         "not a valid kubeconfig: users[0].user.exec.args: expected a list of strings, got a list"),
        (b"contexts: [{context: {cluster: c}}]\n", "not a valid kubeconfig: contexts[0].name: expected a string, "
                                                   "got nothing"),
        (b"current-context: [x]\n", "not a valid kubeconfig: current-context: expected a string, got a list"),
        (bytes(range(256)) * 8, "not a kubeconfig: binary data (a NUL byte at offset 0)"),
        (b"apiVersion: v1\nclusters:\n- name: caf\xe9\n", "not a kubeconfig: not UTF-8 text (byte 0xe9 at offset 36)"),
        (b"a: " + b"[" * 50_000 + b"]" * 50_000, "nested more than 256 levels deep at line 1: refused before parsing "
                                                  "(no Kubernetes object is nested that deep)"),
    ],
    ids=["not-yaml", "a-list", "clusters-not-a-list", "server-not-a-string", "exec-args", "unnamed-context",
         "current-context-list", "binary", "latin-1", "nested"],
)
def test_garbage_kubeconfig_is_one_line_naming_the_file(tmp_path, data, expected):
    """What kubectl refuses (it decodes the whole file into typed structs), refused in one line naming the file,
    before the kubernetes client could say UnicodeDecodeError or TypeError."""
    from kubectl_runs.sources.kubeconfig import KubeconfigError

    config = tmp_path / "config"
    config.write_bytes(data)
    with pytest.raises(KubeconfigError) as caught:
        Cluster(Source(kubeconfig=str(config)))
    assert str(caught.value) == f"kubeconfig {config}: {expected}"


def test_recent_events_keep_this_objects_events_in_time_order_events_k8s_io_ones_included(monkeypatch):
    """core/v1 serves both kinds of Events: a core one (lastTimestamp, count) and an events.k8s.io/v1 one seen
    through core/v1 (eventTime with microseconds, no count). Ordered by instant, times in seconds; an Event of an
    earlier run of the same name (another uid) is left out, one naming no uid is kept."""
    from kubectl_runs.sources import cluster as module

    def event(reason, uid, **times):
        return {"reason": reason, "type": "Normal", "message": f"{reason}\nsecond line",
                "involvedObject": {"kind": "Run", "name": "job", **({"uid": uid} if uid is not None else {})}, **times}

    items = [event("Old", "uid-0", lastTimestamp="2025-11-20T09:00:00Z", count=2),
             event("Preempted", "uid-1", eventTime="2025-11-20T11:00:00.123456Z"),
             event("Admitted", "uid-1", eventTime="2025-11-20T10:00:00.000001Z"),
             event("Planned", None, lastTimestamp="2025-11-20T10:30:00Z", count=3)]
    asked = []

    class Stub:
        def __init__(self, source):
            pass

        def get(self, path, query=None):
            asked.append((path, dict(query or [])))
            return json.dumps({"items": items}).encode()

    monkeypatch.setattr(module, "Cluster", Stub)
    got = module.recent_events(Source(), "team", "Run", "job", uid="uid-1")
    assert asked == [("/api/v1/namespaces/team/events", {"fieldSelector": "involvedObject.kind=Run,involvedObject.name=job"})]
    assert [(e["reason"], e["at"], e["count"]) for e in got] == [
        ("Admitted", "2025-11-20T10:00:00Z", 1), ("Planned", "2025-11-20T10:30:00Z", 3),
        ("Preempted", "2025-11-20T11:00:00Z", 1)]
    assert got[0]["message"] == "Admitted second line"
    assert len(module.recent_events(Source(), "team", "Run", "job")) == 4  # no uid: every Event of the name
