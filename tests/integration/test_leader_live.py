"""Leader election (reconciler/leader.py) on a coordination.k8s.io/v1 Lease of the real API server: one of two
electors leads, never both (sampled every few milliseconds), the standby takes over after a release, after a
stop without release and after SIGKILL of the leader's process, and a stale resourceVersion is a 409."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from fleet import ensure_namespaces

from kubectl_runs.reconciler.leader import Conflict, KubeLeaseStore, LeaderElector, LeaseError
from kubectl_runs.sources import Source
from kubectl_runs.sources.cluster import _api_client

NS = "kubectl-runs-system"
FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}


@pytest.fixture(scope="module")
def api(controlplane):
    ensure_namespaces(controlplane, [NS])
    return _api_client(Source(kubeconfig=controlplane.admin_kubeconfig))


def lease_name() -> str:
    return f"leader-test-{uuid.uuid4().hex[:8]}"


def read_lease(cp, name: str) -> dict:
    status, body = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}")
    assert status == 200, body
    return body


def sample(electors, seconds: float, every: float = 0.005) -> tuple[int, list[str]]:
    """Sample every elector's is_leader(); (most leaders at one instant, leaders in order of appearance)."""
    most, seen = 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        leaders = [e.identity for e in electors if e.is_leader()]
        most = max(most, len(leaders))
        for who in leaders:
            if who not in seen:
                seen.append(who)
        time.sleep(every)
    return most, seen


def wait_leader(elector: LeaderElector, timeout: float, others=()) -> float:
    """Seconds until ``elector`` leads, checking every 5 ms that none of ``others`` leads at the same time."""
    t0 = time.monotonic()
    while not elector.is_leader():
        assert not any(o.is_leader() for o in others), "two leaders at once"
        assert time.monotonic() - t0 < timeout, f"{elector.identity} did not lead within {timeout}s"
        time.sleep(0.005)
    return time.monotonic() - t0


def test_two_electors_one_leader_and_release_handover(controlplane, api):
    name = lease_name()
    a = LeaderElector(api, NS, name, "replica-a", **FAST)
    b = LeaderElector(api, NS, name, "replica-b", **FAST)
    a.start()
    b.start()
    try:
        most, seen = sample([a, b], 4.0)
        assert most == 1, "both electors led at once"
        assert len(seen) == 1
        leader, standby = (a, b) if seen[0] == "replica-a" else (b, a)
        spec = read_lease(controlplane, name)["spec"]
        assert spec["holderIdentity"] == leader.identity
        assert spec["leaseDurationSeconds"] == 3
        assert spec["leaseTransitions"] == 0
        assert spec["acquireTime"] < spec["renewTime"]  # renewed since acquired, acquireTime kept
        assert standby.holder == leader.identity

        t0 = time.monotonic()
        leader.stop(release=True)
        took = wait_leader(standby, 2.0, [leader])
        print(f"\ntakeover after release: {took:.2f}s (retry period {FAST['retry_period']}s)")
        assert took <= FAST["retry_period"] * 1.2 + 0.5
        most, _ = sample([a, b], 1.0)
        assert most == 1
        spec = read_lease(controlplane, name)["spec"]
        assert spec["holderIdentity"] == standby.identity
        assert spec["leaseTransitions"] == 1
        assert time.monotonic() - t0 < 5
    finally:
        a.stop()
        b.stop()
    assert read_lease(controlplane, name)["spec"]["holderIdentity"] == ""


def test_stop_without_release_standby_waits_the_lease_duration(controlplane, api):
    name = lease_name()
    a = LeaderElector(api, NS, name, "replica-a", **FAST)
    a.start()
    assert a.wait(threading.Event(), timeout=5)
    b = LeaderElector(api, NS, name, "replica-b", **FAST)
    b.start()
    try:
        most, _ = sample([a, b], 1.5)
        assert most == 1
        a.stop(release=False)
        assert not a.is_leader()
        t0 = time.monotonic()
        took = wait_leader(b, FAST["lease_duration"] + 2 * FAST["retry_period"] * 1.2 + 1.0, [a])
        print(f"\ntakeover without release: {took:.2f}s (lease duration {FAST['lease_duration']}s, "
              f"retry {FAST['retry_period']}s)")
        assert took >= FAST["lease_duration"] - FAST["retry_period"] * 1.2 - 0.1
        assert time.monotonic() - t0 < 10
        assert read_lease(controlplane, name)["spec"]["leaseTransitions"] == 1
    finally:
        b.stop()


class Partition:
    """A store that the test can cut off from the API server (the leader's network fails)."""

    def __init__(self, store: KubeLeaseStore):
        self.store, self.cut = store, False

    def _check(self):
        if self.cut:
            raise LeaseError("GET …: ConnectTimeoutError (partitioned by the test)")

    def get(self):
        self._check()
        return self.store.get()

    def create(self, lease):
        self._check()
        return self.store.create(lease)

    def update(self, lease):
        self._check()
        return self.store.update(lease)


def test_partitioned_leader_stops_before_the_standby_starts(controlplane, api):
    name = lease_name()
    net = Partition(KubeLeaseStore(api, NS, name))
    lost = threading.Event()
    a = LeaderElector(api, NS, name, "replica-a", store=net, on_stopped_leading=lost.set, **FAST)
    a.start()
    assert a.wait(threading.Event(), timeout=5)
    b = LeaderElector(api, NS, name, "replica-b", **FAST)
    b.start()
    try:
        time.sleep(1.0)
        net.cut = True
        t0 = time.monotonic()
        while a.is_leader():
            time.sleep(0.005)
        a_stopped = time.monotonic() - t0
        b_started = a_stopped + wait_leader(b, 10, [a])
        print(f"\npartition: leader stopped writing after {a_stopped:.2f}s, standby led after {b_started:.2f}s")
        assert a_stopped <= FAST["renew_deadline"] + 0.1
        assert b_started > a_stopped + 0.5  # the margin lease_duration - renew_deadline, less the sampling steps
        assert lost.wait(2)
        net.cut = False  # a comes back as a standby
        most, seen = sample([a, b], 1.5)
        assert most == 1 and seen == ["replica-b"]
    finally:
        a.stop()
        b.stop()


def test_stale_resource_version_is_a_conflict(controlplane, api):
    name = lease_name()
    a = LeaderElector(api, NS, name, "replica-a", **FAST)
    assert a.try_acquire_or_renew()
    store = KubeLeaseStore(api, NS, name)
    old = store.get()
    assert a.try_acquire_or_renew()  # renews: the resourceVersion moves on
    old["spec"]["holderIdentity"] = "intruder"
    with pytest.raises(Conflict):
        store.update(old)
    with pytest.raises(Conflict):  # and a second create is AlreadyExists
        store.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": name, "namespace": NS}, "spec": {}})
    assert read_lease(controlplane, name)["spec"]["holderIdentity"] == "replica-a"


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from kubectl_runs.reconciler.leader import LeaderElector
    from kubectl_runs.sources import Source
    from kubectl_runs.sources.cluster import _api_client
    kubeconfig, ns, name = sys.argv[1:4]
    api = _api_client(Source(kubeconfig=kubeconfig))
    e = LeaderElector(api, ns, name, "child")
    e.start()
    e.wait(threading.Event())
    print("LEADER", flush=True)
    threading.Event().wait()
    """
)


def test_sigkill_of_the_leader_process_with_default_durations(controlplane, api):
    """The defaults (15/10/2 s): the leader's process is killed (no release); the standby leads within
    lease duration + 2 × retry period (one period to observe the last renewal, one to poll after expiry)."""
    name = lease_name()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", CHILD, controlplane.admin_kubeconfig, NS, name],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "LEADER"
        b = LeaderElector(api, NS, name, "standby")
        b.start()
        try:
            time.sleep(3)  # b observes a few renewals
            assert not b.is_leader() and b.holder == "child"
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            took = wait_leader(b, 15 + 2 * 2 * 1.2 + 2)
            print(f"\ntakeover after SIGKILL (defaults 15/10/2 s): {took:.2f}s")
            assert took >= 15 - 2 * 1.2 - 0.5
            lease = read_lease(controlplane, name)["spec"]
            assert lease["holderIdentity"] == "standby"
            assert lease["leaseTransitions"] == 1
            assert lease["leaseDurationSeconds"] == 15
        finally:
            b.stop()
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
