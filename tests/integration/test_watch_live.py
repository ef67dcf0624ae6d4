"""``-w/--watch`` on the reports against the real kube-apiserver (issue 30): a lease created prints the new
``budgets usage`` block within 2 s; 1,000 events that change nothing the report shows print nothing; the API
server restarted under a watch is resumed from (one note on stderr); ``plan -w`` ends with 0 once its run is
Running; a pipe closed by ``head -1`` and Ctrl-C end the watch quietly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from reconciler_harness import budget, control_plane, create, lease, node, run, wait_for

ROOT = Path(__file__).resolve().parents[2]
NS = "watch-a"
OWNER = "org:watch:a"


@pytest.fixture(scope="module")
def cp():
    with control_plane(NS) as plane:
        create(plane, [node("w-gpu-1", flavor="H100-80GB"), node("w-gpu-2", flavor="H100-80GB"),
                       budget("team", NS, owner=OWNER, flavor="H100-80GB", concurrency=16),
                       run("trainer", NS, flavor="H100-80GB", gpus=8)])
        yield plane


class Watch:
    """``kubectl runs ARGS`` in its own process, each stdout line kept with when it arrived."""

    def __init__(self, cp, *args: str):
        env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "kubectl_runs", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
        self.lines: list[tuple[float, str]] = []
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def docs(self) -> list[dict]:
        return [json.loads(line) for _, line in list(self.lines)]

    def wait_lines(self, count: int, timeout: float = 30.0) -> float:
        """Seconds until ``count`` lines were printed."""
        def enough() -> bool:
            if self.proc.poll() is not None and len(self.lines) < count:
                raise AssertionError(f"exited {self.proc.returncode}: {''.join(self.err)}")
            return len(self.lines) >= count
        return wait_for(f"{count} lines", enough, timeout=timeout)[1]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def used(doc: dict) -> int:
    return sum(e["usedGPUs"] for e in doc["envelopes"])


def new_lease(cp, name: str, slots: list[str]) -> float:
    """Create a GPULease; the monotonic time when the API server answered."""
    code, body = cp.request("POST", f"/apis/jobtree.dev/v1alpha1/namespaces/{NS}/gpuleases",
                            lease(name, NS, owner=OWNER, run_name="trainer", flavor="H100-80GB", slots=slots,
                                  budget_name="team"))
    assert code == 201, body
    return time.monotonic()


def test_a_lease_created_prints_the_new_budgets_usage_block_within_2s(cp):
    watch = Watch(cp, "budgets", "usage", "-w", "-o", "json")
    try:
        watch.wait_lines(1)
        time.sleep(1.0)  # the informers have listed (the first block is the command's own list)
        assert len(watch.lines) == 1, watch.lines
        created = new_lease(cp, "l-first", ["w-gpu-1#0", "w-gpu-1#1"])
        watch.wait_lines(2, timeout=10)
        seconds = watch.lines[1][0] - created
        print(f"lease created -> block printed: {seconds:.3f} s")
        first, second = watch.docs()
        assert used(second) == used(first) + 2
        assert seconds < 2.0
    finally:
        assert watch.stop() == 130  # Ctrl-C
    assert watch.err == [], watch.err  # quiet: no note, no traceback


def test_1000_events_that_change_nothing_shown_print_nothing(cp):
    watch = Watch(cp, "budgets", "usage", "-w", "-o", "json", "--output-watch-events")
    try:
        watch.wait_lines(1)
        time.sleep(1.0)

        def annotate(i: int) -> None:
            code, body = cp.request("PATCH", f"/apis/jobtree.dev/v1alpha1/namespaces/{NS}/runs/trainer",
                                    {"metadata": {"annotations": {"example.com/tick": str(i)}}},
                                    content_type="application/merge-patch+json")
            assert code == 200, body

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(annotate, range(1000)))
        print(f"1,000 annotations of Run trainer in {time.monotonic() - started:.1f} s")
        time.sleep(2.0)  # the last burst evaluated
        assert len(watch.lines) == 1, [line for _, line in watch.lines]
        new_lease(cp, "l-after-churn", ["w-gpu-1#2"])  # still watching: a real change prints one block
        watch.wait_lines(2, timeout=10)
        time.sleep(1.0)
        assert len(watch.lines) == 2
        events = watch.docs()[1]["events"]
        assert {"type": "ADDED", "kind": "GPULease", "namespace": NS, "name": "l-after-churn"} in events
        schema = json.loads((ROOT / "docs" / "schemas" / "watch-events.schema.json").read_text())
        for document in watch.docs():
            Draft202012Validator(schema).validate(document)
    finally:
        watch.stop()
    assert watch.err == [], watch.err


def test_the_watch_resumes_after_the_api_server_restarts(cp, monkeypatch):
    import controlplane as cpmod

    watch = Watch(cp, "budgets", "usage", "-w", "-o", "json")
    try:
        watch.wait_lines(1)
        time.sleep(1.0)
        port = int(cp.server.rsplit(":", 1)[1])
        cp._apiserver.kill()  # as a crash or a node loss: a graceful stop drains watches for a long while
        cp._apiserver.wait(timeout=30)
        time.sleep(1.0)
        monkeypatch.setattr(cpmod, "_free_port", lambda: port)  # the same address: the kubeconfig stays good
        cp._start_apiserver()
        created = new_lease(cp, "l-after-restart", ["w-gpu-2#0", "w-gpu-2#1", "w-gpu-2#2"])
        watch.wait_lines(2, timeout=30)
        print(f"after the restart: lease created -> block printed {watch.lines[1][0] - created:.3f} s")
        first, second = watch.docs()
        assert used(second) == used(first) + 3
        time.sleep(1.0)
        assert len(watch.lines) == 2  # the state after the restart printed once, none dropped
    finally:
        watch.stop()
    notes = [line for line in watch.err if "interrupted" in line]
    assert len(notes) == 1, watch.err
    assert not any("Traceback" in line for line in watch.err), watch.err


def test_plan_watch_ends_with_0_when_the_run_is_running(cp):
    create(cp, [run("waiter", NS, flavor="H100-80GB", gpus=4)])
    watch = Watch(cp, "plan", f"{NS}/waiter", "-w")
    try:
        watch.wait_lines(1)
        time.sleep(1.0)
        assert watch.proc.poll() is None
        code, body = cp.request("PATCH", f"/apis/jobtree.dev/v1alpha1/namespaces/{NS}/runs/waiter/status",
                                {"status": {"phase": "Running"}}, content_type="application/merge-patch+json")
        assert code == 200, body
        assert watch.proc.wait(timeout=15) == 0, watch.err
    finally:
        watch.stop()
    assert watch.lines[0][1].startswith("--- ")  # a table block begins with its timestamp line


def test_plan_watch_timeout_before_running_is_exit_1_and_a_plain_watch_timeout_is_0(cp):
    create(cp, [run("never", NS, flavor="H100-80GB", gpus=4)])
    env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig)
    plan = subprocess.run([sys.executable, "-m", "kubectl_runs", "plan", f"{NS}/never", "-w", "--timeout", "2s"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert plan.returncode == 1, plan.stderr
    assert "timed out after 2s waiting for run" in plan.stderr
    usage = subprocess.run([sys.executable, "-m", "kubectl_runs", "budgets", "usage", "-w", "--timeout", "2s"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("--- ")


def test_watch_with_snapshot_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", "budgets", "usage", "-w", "--snapshot",
                           str(ROOT / "examples" / "fleet.yaml")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "cannot be used with --snapshot" in done.stderr


def test_a_pipe_closed_by_head_ends_the_watch_quietly(cp):
    env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig)
    shell = subprocess.Popen(["bash", "-c", "set -o pipefail; \"$0\" -m kubectl_runs budgets usage -w -o json | head -1",
                              sys.executable], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(4.0)  # printed, head gone; the next block meets the closed pipe
    new_lease(cp, "l-sigpipe", ["w-gpu-2#3"])
    out, err = shell.communicate(timeout=30)
    assert shell.returncode == 0, err
    assert err == ""
    assert json.loads(out)["envelopes"]


def test_a_user_bound_to_one_namespace_watches_that_namespace(cp):
    """RBAC refuses ``reader`` the cluster-wide lists: the report reads namespace -n alone (a note, as without
    -w), and so do its informers; a lease created there is still printed."""
    cp.kubectl("create", "role", "watch-reads", "-n", NS, "--verb=get,list,watch",
               "--resource=budgets.jobtree.dev,runs.jobtree.dev,reservations.jobtree.dev,gpuleases.jobtree.dev")
    cp.kubectl("create", "rolebinding", "watch-reads", "-n", NS, "--role=watch-reads", "--user=reader")
    cp.kubectl("create", "clusterrole", "watch-node-reader", "--verb=get,list,watch", "--resource=nodes")
    cp.kubectl("create", "clusterrolebinding", "watch-node-reader", "--clusterrole=watch-node-reader",
               "--user=reader")
    env = dict(os.environ, KUBECONFIG=cp.kubeconfig_for("reader"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "kubectl_runs", "budgets", "usage", "-n", NS, "-w", "-o", "json",
                             "--timeout", "8s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(ROOT))
    time.sleep(4.0)
    new_lease(cp, "l-reader", ["w-gpu-2#4"])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert len(docs) == 2, (out, err)
    assert used(docs[1]) == used(docs[0]) + 1
    assert "interrupted" not in err, err


@pytest.mark.parametrize("args", [["explain", f"{NS}/trainer"], ["pending"], ["queues", "usage"],
                                  ["budgets", "usage", "-o", "wide"]],
                         ids=["explain", "pending", "queues-usage", "budgets-usage-wide"])
def test_every_report_watches_until_its_timeout(cp, args):
    """Each report with -w: one block (nothing changed), exit 0 at --timeout; kinds whose CRDs are not
    installed (Kueue's here) are watched as empty, without a note."""
    env = dict(os.environ, KUBECONFIG=cp.admin_kubeconfig)
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args, "-w", "--timeout", "3s"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n--- ") + done.stdout.startswith("--- ") == 1, done.stdout
    assert "interrupted" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_410_on_the_real_server_relists_and_delivers_the_state(cp):
    """The shared informer (sources/informer.py) resuming from a resourceVersion the API server no longer
    keeps: the server says 410 Gone (Expired), the informer lists again and the store holds the cluster's state,
    each object once."""
    from kubernetes import client

    from kubectl_runs.sources import Source
    from kubectl_runs.sources.cluster import RESOURCES, _api_client
    from kubectl_runs.sources.informer import Informer
    from kubectl_runs.sources.watchcache import WatchCache

    leases = next(r for r in RESOURCES if r.kind == "GPULease")
    store = WatchCache(["GPULease"])
    stop = threading.Event()
    logged: list = []
    api = client.ApiClient(_api_client(Source(kubeconfig=cp.admin_kubeconfig)).configuration)
    informer = Informer(leases, store, api, stop, log=lambda msg, **f: logged.append((msg, f)), base_backoff=0.1)
    informer.resource_version = "1"  # as a watch resumed long after: that version is gone from the server
    informer.start()
    try:
        wait_for("the relist", lambda: informer.lists >= 1 and store.all_synced(), timeout=30)
        assert any(msg == "relist" and f["reason"] == "410 Gone" for msg, f in logged), logged
        names = sorted(c.key for c in store.changes())
        code, body = cp.request("GET", f"/apis/jobtree.dev/v1alpha1/namespaces/{NS}/gpuleases")
        assert code == 200, body
        assert names == sorted(f"{NS}/{item['metadata']['name']}" for item in body["items"])
        new_lease(cp, "l-after-410", ["w-gpu-2#5"])  # and it watches from the new list's version
        wait_for("the new lease", lambda: any(c.key == f"{NS}/l-after-410" for c in store.changes()), timeout=10)
    finally:
        stop.set()
        informer.close()


def test_the_first_list_from_the_watch_cache_then_the_watch_loses_nothing(cp):
    """The first list asks for resourceVersion=0 (the API server's watch cache, as client-go's reflector does); a
    lease created after that list and before the watch opens is delivered by the watch from the list's version."""
    from kubernetes import client

    from kubectl_runs.sources import Source
    from kubectl_runs.sources.cluster import RESOURCES, _api_client
    from kubectl_runs.sources.informer import Informer
    from kubectl_runs.sources.watchcache import WatchCache

    leases = next(r for r in RESOURCES if r.kind == "GPULease")
    store = WatchCache(["GPULease"])
    stop = threading.Event()
    api = client.ApiClient(_api_client(Source(kubeconfig=cp.admin_kubeconfig)).configuration)
    queries: list[dict] = []
    serialize = api.param_serialize

    def recorded(*args, **kwargs):
        queries.append(dict(kwargs["query_params"]))
        return serialize(*args, **kwargs)

    api.param_serialize = recorded
    informer = Informer(leases, store, api, stop, log=lambda msg, **f: None)
    informer.list_once()
    assert queries[0]["resourceVersion"] == "0" and queries[0]["resourceVersionMatch"] == "NotOlderThan"
    listed = {c.key for c in store.changes()}
    code, body = cp.request("GET", f"/apis/jobtree.dev/v1alpha1/namespaces/{NS}/gpuleases")
    assert code == 200, body
    assert listed == {f"{NS}/{item['metadata']['name']}" for item in body["items"]}
    new_lease(cp, "l-between-list-and-watch", ["w-gpu-2#6"])  # after the list, before the watch
    informer.start()  # resource_version is set: it watches from the list's version
    try:
        wait_for("the lease created in between",
                 lambda: any(c.key == f"{NS}/l-between-list-and-watch" for c in store.changes()), timeout=10)
        assert informer.lists == 1
        assert all("resourceVersionMatch" not in q for q in queries[1:])  # the watch: from the list's version
    finally:
        stop.set()
        informer.close()
