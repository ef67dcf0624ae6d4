"""Client-side rate limits (``--kube-api-qps``/``--kube-api-burst``, reconciler/ratelimit.py) on a real API server,
counted by the API server itself (its ``apiserver_request_total``), not by the reconciler.

A cold start of 300 objects needing status (4 Budgets, 296 Runs in 4 namespaces) with ``--kube-api-qps 20
--kube-api-burst 10`` and leader election on: the reconciler's requests (lists, watches, status PATCHes, POSTs)
never exceed ``burst + qps × window`` in any window between two samples of the server's counters, every object's
status is written, and the Lease's ``renewTime`` keeps moving throughout. Then a starved bucket (``--kube-api-qps
0.5 --kube-api-burst 1``: a token every 2 s, shared by 5 informers and 4 writers): the leader still renews every
retry period (its client is exempt; a shared bucket would hold a renewal behind ~10 requests, 20 s, past the
10 s renew deadline) and a SIGTERM ends it at once, the waiting requests unsent.

Its own control plane: the reconciler writes status to every object it sees."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

import pytest
from reconciler_harness import API, Reconciler, budget, control_plane, create, node, run

LEASE_NS = "kubectl-runs-system"
FLAVOR = "H100"
NAMESPACES = ("rl-a", "rl-b", "rl-c", "rl-d")
RUNS_PER_NS = 74  # + 1 Budget each: 300 objects needing status
SAMPLE_EVERY = 0.25  # seconds between reads of the API server's counters
LATENCY = 0.25  # seconds: a request is granted by the limiter at most this long before the server counts it
RENEW_GAP = 5.0  # seconds: the longest the Lease's renewTime may stand still (retry period 2 s, 2 missed + slack)
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@pytest.fixture(scope="module")
def cp():
    with control_plane(LEASE_NS) as plane:
        objects = [node("n1", flavor=FLAVOR, gpus=8), node("n2", flavor=FLAVOR, gpus=8)]
        for ns in NAMESPACES:
            objects.append(budget("b", ns, owner=f"org:{ns}", flavor=FLAVOR, concurrency=8))
            objects += [run(f"r{i:03d}", ns, flavor=FLAVOR, gpus=4) for i in range(RUNS_PER_NS)]
        create(plane, objects, threads=16)
        yield plane


@pytest.fixture
def logs(tmp_path_factory):
    return tmp_path_factory.mktemp("rate-limit-logs")


def reconciler_requests(cp) -> tuple[int, int]:
    """(writes, all) the API server has answered for what the reconciler touches: jobtree.dev objects, Nodes and
    Events. writes = PATCH and POST; all = those plus LIST, WATCH and GET (the test itself sends none of these
    while it measures: it reads the Lease and /metrics only)."""
    code, text = cp.request("GET", "/metrics")
    assert code == 200, text
    writes = every = 0
    for match in _SAMPLE.finditer(str(text)):
        labels = dict(_LABEL.findall(match.group("labels")))
        if not (labels.get("group") == "jobtree.dev" or labels.get("resource") in ("nodes", "events")):
            continue
        value = int(float(match.group("value")))
        if labels.get("verb") in ("PATCH", "POST"):
            writes += value
        if labels.get("verb") in ("PATCH", "POST", "LIST", "WATCH", "GET"):
            every += value
    return writes, every


@dataclass
class Watcher:
    """Samples the server's counters (each with the instants just before and after the read) and the Lease."""

    cp: object
    lease: str
    counts: list[tuple[float, float, int, int]] = field(default_factory=list)
    renewals: list[tuple[float, str, str, int]] = field(default_factory=list)  # (t, holder, renewTime, transitions)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Watcher:
        self.base = reconciler_requests(self.cp)
        self.t0 = time.monotonic()  # before the reconciler starts: the first window is counted from here
        self._threads = [threading.Thread(target=self._counters, daemon=True),
                         threading.Thread(target=self._lease, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def _counters(self) -> None:
        while not self.stop.is_set():
            before = time.monotonic()
            writes, every = reconciler_requests(self.cp)
            self.counts.append((before, time.monotonic(), writes - self.base[0], every - self.base[1]))
            self.stop.wait(SAMPLE_EVERY)

    def _lease(self) -> None:
        while not self.stop.is_set():
            code, body = self.cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{self.lease}")
            if code == 200:
                spec = body["spec"]
                self.renewals.append((time.monotonic(), spec.get("holderIdentity") or "", spec.get("renewTime") or "",
                                      spec.get("leaseTransitions") or 0))
            self.stop.wait(0.5)

    def finish(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(10)

    def writes(self) -> int:
        return self.counts[-1][2] if self.counts else 0

    def worst_window(self, qps: float, burst: int, column: int) -> tuple[float, int, float]:
        """Over every pair of samples i < j: the requests counted between them against what the limiter allows in
        the longest window they can have been granted in (from just before read i, less LATENCY, to just after
        read j). (largest excess over burst + qps × window, requests in that window, its length)."""
        worst = (float("-inf"), 0, 0.0)
        for i in range(len(self.counts)):
            for j in range(i + 1, len(self.counts)):
                n = self.counts[j][column] - self.counts[i][column]
                window = self.counts[j][1] - self.counts[i][0] + LATENCY
                excess = n - (burst + qps * window)
                if excess > worst[0]:
                    worst = (excess, n, window)
        first = self.counts[0]
        since_start = first[column] - (burst + qps * (first[1] - self.t0 + LATENCY))
        return max(worst, (since_start, first[column], first[1] - self.t0 + LATENCY))

    def renew_gaps(self, identity: str) -> tuple[float, set[str], set[int]]:
        """From the first sample held by ``identity``: the longest time renewTime stood still, the holders seen,
        and the leaseTransitions values seen."""
        held = [r for r in self.renewals if r[1] == identity]
        assert held, f"{identity} never held the Lease: {self.renewals[-3:]}"
        since = held[0][0]
        samples = [r for r in self.renewals if r[0] >= since]
        longest, changed, last = 0.0, since, samples[0][2]
        for t, _holder, renew, _transitions in samples:
            if renew != last:
                changed, last = t, renew
            longest = max(longest, t - changed)
        return longest, {r[1] for r in samples}, {r[3] for r in samples}


def statuses_written(cp, namespaces) -> tuple[int, int]:
    """(objects with their status written, objects) over the Runs and Budgets of ``namespaces``."""
    written = total = 0
    for ns in namespaces:
        for plural, key in (("runs", "phase"), ("budgets", "envelopes")):
            code, body = cp.request("GET", f"{API}/namespaces/{ns}/{plural}")
            assert code == 200, body
            for item in body["items"]:
                total += 1
                written += bool(item.get("status", {}).get(key))
    return written, total


def test_a_cold_start_stays_under_qps_and_burst_converges_and_keeps_the_lease(cp, logs):
    qps, burst, objects = 20, 10, len(NAMESPACES) * (RUNS_PER_NS + 1)
    watcher = Watcher(cp, "rl-cold")
    watcher.start()
    proc = Reconciler(cp, "--leader-elect", "--leader-election-namespace", LEASE_NS, "--leader-election-id", "rl-cold",
                      "--identity", "rl-cold-1", "--metrics-addr", "127.0.0.1:0", "--resync-period", "1h",
                      "--kube-api-qps", str(qps), "--kube-api-burst", str(burst), log_dir=logs, name="cold")
    try:
        proc.wait_log("msg=synced", timeout=60)
        started = time.monotonic()
        deadline = started + 120
        while watcher.writes() < objects and time.monotonic() < deadline:
            time.sleep(0.1)
        converged = time.monotonic() - started
        time.sleep(2.0)  # a little more of the Lease and of the counters: no write after convergence
        scraped = proc.metrics()
    finally:
        watcher.finish()
        code = proc.stop()
    assert code == 0
    written, total = statuses_written(cp, NAMESPACES)
    excess_all, n_all, window_all = watcher.worst_window(qps, burst, 3)
    excess_writes, n_writes, window_writes = watcher.worst_window(qps, burst, 2)
    longest, holders, transitions = watcher.renew_gaps("rl-cold-1")
    waited = {name: float(value) for name, value in re.findall(
        r"^jobtree_client_rate_limit_wait_seconds_(count|sum) (\S+)$", scraped, re.M)}
    final = watcher.counts[-1]
    print(f"\ncold start of {total} objects at qps {qps} burst {burst}: every status in {converged:.1f} s after "
          f"sync; server counted {final[2]} writes, {final[3]} requests in all over {len(watcher.counts)} samples; "
          f"tightest window: {n_all} requests in {window_all:.2f} s (allowed {burst + qps * window_all:.0f}); "
          f"waited {waited.get('sum', 0):.1f} s in all over {waited.get('count', 0):.0f} requests; "
          f"Lease renewTime stood still at most {longest:.1f} s")
    assert written == total == objects
    assert final[2] >= objects  # a status PATCH per object, counted by the server
    assert excess_all <= 0, (n_all, window_all)
    assert excess_writes <= 0, (n_writes, window_writes)
    # the pacing is real: the writes could not have gone out faster than the bucket allows
    assert converged >= (objects - burst) / qps - 2 * LATENCY - SAMPLE_EVERY
    assert waited["count"] >= final[3] and waited["sum"] > 0
    assert holders == {"rl-cold-1"} and len(transitions) == 1 and longest <= RENEW_GAP
    assert proc.count('event="started leading"') == 1 and proc.count('event="stopped leading"') <= 1  # at SIGTERM
    assert proc.count("level=error") == 0


def test_a_starved_bucket_never_costs_the_lease_and_sigterm_ends_the_wait(cp, logs):
    """qps 0.5, burst 1, 30 new Runs needing status: for 25 s the leader renews every 2 s as if the writers were
    idle, and the server counts at most 1 + 0.5 × t of the reconciler's requests."""
    qps, burst = 0.5, 1
    create(cp, [run(f"s{i:02d}", "rl-starved", flavor=FLAVOR, gpus=1) for i in range(30)])
    watcher = Watcher(cp, "rl-starved")
    watcher.start()
    proc = Reconciler(cp, "--leader-elect", "--leader-election-namespace", LEASE_NS, "--leader-election-id",
                      "rl-starved", "--identity", "rl-starved-1", "--metrics-addr", "0", "--resync-period", "1h",
                      "--kube-api-qps", str(qps), "--kube-api-burst", str(burst), log_dir=logs, name="starved")
    try:
        proc.wait_log('event="started leading"', timeout=30)
        time.sleep(25)
        assert proc.proc.poll() is None
        watcher.finish()  # before SIGTERM, which releases the Lease (holderIdentity "")
        stopping = time.monotonic()
        code = proc.stop(timeout=20)
        stopped = time.monotonic() - stopping
    finally:
        watcher.finish()
        proc.stop()
    excess, n, window = watcher.worst_window(qps, burst, 3)
    longest, holders, transitions = watcher.renew_gaps("rl-starved-1")
    written, total = statuses_written(cp, ["rl-starved"])
    last = watcher.counts[-1]
    print(f"\nstarved (qps {qps}, burst {burst}): {last[3]} requests counted over {last[1] - watcher.t0:.1f} s, "
          f"{written}/{total} statuses written; renewTime stood still at most {longest:.1f} s; "
          f"SIGTERM -> exit in {stopped:.1f} s")
    assert code == 0 and stopped < 10
    assert excess <= 0, (n, window)
    assert 0 < written < total  # it wrote, slowly: the bucket, not the Lease, was what held it back
    assert holders == {"rl-starved-1"} and len(transitions) == 1 and longest <= RENEW_GAP
    assert proc.count('event="stopped leading"') <= 1 and proc.count("msg=leadership leader=False") == 0
