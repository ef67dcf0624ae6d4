"""The client-side rate limiter (reconciler/ratelimit.py, ``--kube-api-qps``/``--kube-api-burst``): a token bucket
that lets ``burst`` requests out at once and then ``qps`` per second, exactly, from any number of threads; the
client wrapper that puts it in front of every request; and the wiring of ``kubectl runs reconcile`` (one bucket
for the informers and the writes, none for the leader elector)."""

from __future__ import annotations

import threading
import time
from itertools import combinations

import pytest

from kubectl_runs.reconciler.ratelimit import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    RateLimitedApi,
    RateLimiterClosed,
    TokenBucket,
    limited_factory,
)


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def most_in_any_window(times: list[float], qps: float, burst: int) -> float:
    """The largest excess of requests over ``burst + qps × (last - first)`` among all windows of ``times``
    (sorted); ≤ 0 means the bound held for every window."""
    times = sorted(times)
    worst = float("-inf")
    for i, j in combinations(range(len(times)), 2):
        worst = max(worst, (j - i + 1) - (burst + qps * (times[j] - times[i])))
    return worst


# --- the bucket, on a fake clock ----------------------------------------------------------------------------


def test_burst_at_once_then_one_token_every_1_over_qps():
    """qps 10, burst 5, all asked at one instant: 5 go at once, the 6th waits 0.1 s, the 7th 0.2 s (each token
    is reserved ahead of the ones behind it)."""
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock)
    assert [bucket.reserve() for _ in range(7)] == pytest.approx([0, 0, 0, 0, 0, 0.1, 0.2])


def test_the_bucket_refills_at_qps_up_to_burst_and_no_further():
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock)
    assert [bucket.reserve() for _ in range(5)] == [0] * 5  # empty now
    clock.now += 0.3  # 3 tokens back
    assert [bucket.reserve() for _ in range(4)] == pytest.approx([0, 0, 0, 0.1])
    clock.now += 3600  # an idle hour gives back burst, not 36,000
    assert [bucket.reserve() for _ in range(6)] == pytest.approx([0, 0, 0, 0, 0, 0.1])


def test_sequential_waits_keep_the_steady_rate_and_the_bound_in_every_window():
    """200 requests one after the other through wait(): the sleeps make them leave at exactly burst at t=0, then
    one per 1/qps; no window holds more than burst + qps × its length, and the last leaves at (200-burst)/qps."""
    clock = FakeClock(start=0.0)
    waits = []
    bucket = TokenBucket(20, 10, clock=clock, sleep=clock.sleep, observe=waits.append)
    sent = []
    for _ in range(200):
        bucket.wait()
        sent.append(clock.now)
    assert sent[:10] == [0.0] * 10
    assert sent[10] == pytest.approx(0.05) and sent[-1] == pytest.approx((200 - 10) / 20)
    assert most_in_any_window(sent, 20, 10) <= 1e-9
    assert len(waits) == 200 and waits[:10] == [0.0] * 10 and waits[10] == pytest.approx(0.05)


def test_a_backwards_clock_step_gives_no_tokens_and_takes_none():
    clock = FakeClock()
    bucket = TokenBucket(10, 2, clock=clock)
    assert [bucket.reserve() for _ in range(2)] == [0, 0]
    clock.now -= 50
    assert bucket.reserve() == pytest.approx(0.1)


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (float("nan"), 1), (1, 0), (1, 1.5)],
                         ids=["qps-0", "qps-negative", "qps-nan", "burst-0", "burst-fraction"])
def test_nonsense_limits_are_refused(qps, burst):
    with pytest.raises(ValueError):
        TokenBucket(qps, burst)


# --- threads ------------------------------------------------------------------------------------------------


def test_threads_at_one_instant_each_get_their_own_token():
    """16 threads × 25 reservations on a frozen clock: the delays are exactly 0 (burst of them), then 1/qps,
    2/qps, … — every token handed out once, none lost or given twice under contention."""
    clock = FakeClock()
    bucket = TokenBucket(50, 7, clock=clock)
    delays: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def worker() -> None:
        start.wait()
        mine = [bucket.reserve() for _ in range(25)]
        with lock:
            delays.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = [0.0] * 7 + [k / 50 for k in range(1, 16 * 25 - 7 + 1)]
    assert sorted(delays) == pytest.approx(expected)


def test_threads_on_the_real_clock_stay_under_the_bound():
    """8 threads × 25 requests through one bucket (qps 100, burst 10) on the wall clock: the 200 requests take at
    least (200 - 10)/100 s, and no window holds more than burst + qps × its length (+ 50 ms of the scheduler's
    oversleep)."""
    bucket = TokenBucket(100, 10)
    sent: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(25):
            bucket.wait()
            with lock:
                sent.append(time.monotonic())

    began = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sent) == 200
    assert max(sent) - began >= (200 - 10) / 100 - 0.01
    assert most_in_any_window(sent, 100, 10 + 100 * 0.05) <= 0


def test_close_wakes_a_waiter_and_refuses_later_requests():
    bucket = TokenBucket(0.1, 1)  # the second request would wait 10 s
    bucket.wait()
    raised: list[BaseException] = []

    def waiter() -> None:
        try:
            bucket.wait()
        except RateLimiterClosed as exc:
            raised.append(exc)

    t = threading.Thread(target=waiter)
    began = time.monotonic()
    t.start()
    time.sleep(0.1)
    bucket.close()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - began < 3
    assert len(raised) == 1
    with pytest.raises(RateLimiterClosed):
        bucket.wait()


# --- the client wrapper -------------------------------------------------------------------------------------


class RecordingApi:
    """An ApiClient stand-in: param_serialize passes through, call_api records and answers 200."""

    class configuration:
        host = "https://fake"

    def __init__(self, clock: FakeClock | None = None):
        self.calls: list[tuple[str, str, float | None]] = []
        self.clock = clock

    def param_serialize(self, method, resource_path, query_params, header_params, body, auth_settings):
        query = "&".join(f"{k}={v}" for k, v in query_params)
        return (method, f"https://fake{resource_path}" + (f"?{query}" if query else ""), header_params, body)

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        self.calls.append((method, url, self.clock() if self.clock else None))
        return Answer()


class Answer:
    status = 200
    response = "the open stream"

    def read(self):
        return b"{}"


def test_every_request_waits_for_a_token_and_a_watch_counts_once():
    from kubectl_runs.reconciler.cache import request

    clock = FakeClock(start=0.0)
    bucket = TokenBucket(2, 1, clock=clock, sleep=clock.sleep)
    inner = RecordingApi(clock)
    api = RateLimitedApi(inner, bucket)
    assert api.configuration.host == "https://fake" and api.unlimited is inner  # the rest is the client's own
    request(api, "GET", "/apis/jobtree.dev/v1alpha1/runs", query=[("limit", 500)])
    assert request(api, "GET", "/apis/jobtree.dev/v1alpha1/runs", query=[("watch", "true")], stream=True) \
        == "the open stream"
    request(api, "PATCH", "/apis/jobtree.dev/v1alpha1/namespaces/a/runs/x/status", body={"status": {}})
    assert [(m, t) for m, _url, t in inner.calls] == [("GET", 0.0), ("GET", 0.5), ("PATCH", 1.0)]
    assert clock.slept == [0.5, 0.5]


def test_a_long_wait_is_logged_with_the_request():
    clock = FakeClock(start=0.0)
    bucket = TokenBucket(0.5, 1, clock=clock, sleep=clock.sleep)
    logged = []
    api = RateLimitedApi(RecordingApi(), bucket, log=lambda msg, **fields: logged.append((msg, fields)))
    api.call_api("PATCH", "https://fake/apis/jobtree.dev/v1alpha1/namespaces/a/runs/x/status?fieldManager=y")
    assert logged == []
    api.call_api("PATCH", "https://fake/apis/jobtree.dev/v1alpha1/namespaces/a/runs/y/status")
    assert logged == [("client-side throttling", {"waited": "2.00s", "qps": "0.5", "burst": 1,
                                                  "request": "PATCH /apis/jobtree.dev/v1alpha1/namespaces/a/runs/y/status"})]


def test_a_write_held_until_the_reconciler_stops_is_not_sent_nor_counted_as_an_api_error():
    from kubectl_runs.reconciler.actions import PatchStatus
    from kubectl_runs.reconciler.apply import Applier

    bucket = TokenBucket(1, 1)
    bucket.close()
    inner = RecordingApi()
    counted = []

    class Metrics:
        def count_write(self, kind, action, outcome):
            counted.append(("write", outcome))

        def count_api_error(self, verb, resource, reason):
            counted.append(("error", reason))

    applier = Applier(RateLimitedApi(inner, bucket), None, log=lambda *a, **k: None, metrics=Metrics())
    write = PatchStatus(kind="Run", namespace="a", name="x", status={"phase": "Pending"}, cause="test")
    outcome = applier.apply(write, None)
    assert inner.calls == []
    assert outcome.outcome == "error" and outcome.retry and outcome.detail == "not sent: the reconciler is stopping"
    assert counted == [("write", "error")]


def test_limited_factory_shares_one_bucket_and_none_means_no_wrapper():
    bucket = TokenBucket(1, 1)
    make = limited_factory(RecordingApi, bucket)
    a, b = make(), make()
    assert isinstance(a, RateLimitedApi) and a._limiter is bucket and b._limiter is bucket
    assert a.unlimited is not b.unlimited
    assert limited_factory(RecordingApi, None) is RecordingApi


# --- the command line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "flag"), [
    (("--kube-api-qps", "0"), "--kube-api-qps"),
    (("--kube-api-qps", "-2"), "--kube-api-qps"),
    (("--kube-api-qps", "0.0"), "--kube-api-qps"),
    (("--kube-api-qps", "nan"), "--kube-api-qps"),
    (("--kube-api-qps", "fast"), "--kube-api-qps"),
    (("--kube-api-burst", "0"), "--kube-api-burst"),
    (("--kube-api-burst", "-5"), "--kube-api-burst"),
    (("--kube-api-burst", "1.5"), "--kube-api-burst"),
], ids=["qps-0", "qps-negative", "qps-0.0", "qps-nan", "qps-word", "burst-0", "burst-negative", "burst-fraction"])
def test_bad_limits_are_usage_errors_naming_the_flag(capsys, args, flag):
    from builders import run_cli

    code, out, err = run_cli(capsys, "reconcile", "--once", *args)
    assert code == 2 and out == ""
    first = err.strip().splitlines()[0]
    assert first.startswith("error:") and flag in first and "Traceback" not in err


class Wiring:
    """Stands in for the reconciler's pieces, recording which client factory and which client each one got."""

    def __init__(self, monkeypatch, tmp_path):
        import kubectl_runs.cli.reconcile as cli
        import kubectl_runs.reconciler.leader as leader
        import kubectl_runs.reconciler.loop as loop

        kubeconfig = tmp_path / "config"
        kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        self.made: list[RecordingApi] = []
        self.preflight = None
        self.elector_api = None
        self.reconciler_make = None
        wiring = self

        def factory(source, pool_size: int = 8):
            def make():
                api = RecordingApi()
                wiring.made.append(api)
                return api
            return make

        class Elector:
            def __init__(self, api, *args, **kwargs):
                wiring.elector_api = api

            def start(self): ...
            def stop(self, release=True): ...

        class FakeReconciler:
            def __init__(self, make_api, settings, **kwargs):
                wiring.reconciler_make = make_api
                self.stop = threading.Event()
                self.queue = None

            def run(self):
                return 0

        monkeypatch.setattr(loop, "make_api_factory", factory)
        monkeypatch.setattr(loop, "Reconciler", FakeReconciler)
        monkeypatch.setattr(leader, "LeaderElector", Elector)
        monkeypatch.setattr(cli, "_preflight", lambda make_api, *a: setattr(wiring, "preflight", make_api))
        monkeypatch.setattr(cli.signal, "signal", lambda *a: None)  # leave pytest's own handlers alone


def test_the_informers_and_writes_share_one_bucket_and_the_elector_has_none(monkeypatch, tmp_path, capsys):
    from builders import run_cli

    wiring = Wiring(monkeypatch, tmp_path)
    code, _out, err = run_cli(capsys, "reconcile", "--metrics-addr", "0", "--kube-api-qps", "7.5",
                              "--kube-api-burst", "3")
    assert code == 0, err
    assert "msg=\"client rate limit\" qps=7.5 burst=3" in err
    informer, writer = wiring.reconciler_make(), wiring.reconciler_make()
    assert isinstance(informer, RateLimitedApi) and informer._limiter is writer._limiter
    assert (informer._limiter.qps, informer._limiter.burst) == (7.5, 3)
    assert wiring.preflight()._limiter is informer._limiter
    assert isinstance(wiring.elector_api, RecordingApi)  # its own client, no limiter: renewals never wait


def test_the_defaults_and_minus_one_for_no_limit(monkeypatch, tmp_path, capsys):
    from builders import run_cli

    wiring = Wiring(monkeypatch, tmp_path)
    assert run_cli(capsys, "reconcile", "--metrics-addr", "0", "--no-leader-elect")[0] == 0
    api = wiring.reconciler_make()
    assert (api._limiter.qps, api._limiter.burst) == (DEFAULT_QPS, DEFAULT_BURST) == (50, 100)
    code, _out, err = run_cli(capsys, "reconcile", "--metrics-addr", "0", "--no-leader-elect", "--kube-api-qps", "-1")
    assert code == 0 and 'msg="client rate limit" qps=unlimited' in err
    assert isinstance(wiring.reconciler_make(), RecordingApi)
