"""The leader election state machine (reconciler/leader.py) with an injected clock and an in-memory Lease store
that behaves like the API server on the points the election relies on: 404 when absent, 409 AlreadyExists on a
second create, 409 Conflict on an update carrying a stale resourceVersion. tests/integration/test_leader.py runs
the same electors against the real API server."""

from __future__ import annotations

import copy
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from kubectl_runs.reconciler.leader import Conflict, LeaderElector, LeaseError


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Wall:
    """UTC wall time; ``skew`` shifts one elector's clock against the others'."""

    def __init__(self, clock: Clock, skew: float = 0.0):
        self.clock, self.skew = clock, skew

    def __call__(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.clock.t + self.skew)


class Store:
    def __init__(self):
        self.lease: dict | None = None
        self.rv = 0
        self.lock = threading.Lock()
        self.fail: set[str] = set()  # identities whose requests fail (a partitioned replica)
        self.writes: list[tuple[str, str]] = []

    def view(self, who: str) -> MemberStore:
        return MemberStore(self, who)


class MemberStore:
    def __init__(self, store: Store, who: str):
        self.store, self.who = store, who
        self.before_update = None  # a hook run between this member's get and its update

    def _check(self):
        if self.who in self.store.fail:
            raise LeaseError("GET …: ConnectTimeoutError")

    def get(self):
        self._check()
        with self.store.lock:
            return copy.deepcopy(self.store.lease)

    def create(self, lease):
        self._check()
        with self.store.lock:
            if self.store.lease is not None:
                raise Conflict("409 AlreadyExists")
            self.store.rv += 1
            lease = copy.deepcopy(lease)
            lease["metadata"]["resourceVersion"] = str(self.store.rv)
            self.store.lease = lease
            self.store.writes.append((self.who, "create"))
            return copy.deepcopy(lease)

    def update(self, lease):
        self._check()
        if self.before_update is not None:
            hook, self.before_update = self.before_update, None
            hook()
        with self.store.lock:
            if lease["metadata"].get("resourceVersion") != self.store.lease["metadata"]["resourceVersion"]:
                raise Conflict("409 Conflict: the object has been modified")
            self.store.rv += 1
            lease = copy.deepcopy(lease)
            lease["metadata"]["resourceVersion"] = str(self.store.rv)
            self.store.lease = lease
            self.store.writes.append((self.who, "update"))
            return copy.deepcopy(lease)


def elector(store: Store, who: str, clock: Clock, skew: float = 0.0, **kw) -> LeaderElector:
    return LeaderElector(None, "kubectl-runs-system", "kubectl-runs-reconciler", who, clock=clock,
                         wall=Wall(clock, skew), store=store.view(who), **kw)


def test_first_candidate_creates_the_lease_with_client_go_record():
    store, clock = Store(), Clock()
    a = elector(store, "a", clock)
    assert not a.is_leader()
    assert a.try_acquire_or_renew()
    assert a.is_leader()
    spec = store.lease["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2026-01-01T00:16:40.000000Z"


def test_renewal_keeps_acquire_time_and_transitions():
    store, clock = Store(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    first = dict(store.lease["spec"])
    clock.advance(2)
    assert a.try_acquire_or_renew()
    spec = store.lease["spec"]
    assert spec["acquireTime"] == first["acquireTime"]
    assert spec["renewTime"] != first["renewTime"]
    assert spec["leaseTransitions"] == 0


def test_standby_waits_a_lease_duration_from_the_last_change_it_observed():
    store, clock = Store(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b observes a's record now
    assert not b.is_leader() and b.holder == "a"
    for _ in range(5):  # a keeps renewing: b never gets it
        clock.advance(2)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a dies: its record stops changing. b may take it only lease_duration after it last saw a change.
    clock.advance(14.9)
    assert not b.try_acquire_or_renew()
    clock.advance(0.2)
    assert b.try_acquire_or_renew()
    assert b.is_leader()
    spec = store.lease["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"]


def test_leader_stops_by_itself_after_the_renew_deadline_before_anyone_can_acquire():
    """A partitioned leader: is_leader() turns False renew_deadline after its last successful renewal began,
    while a standby that saw that renewal cannot acquire until lease_duration after it."""
    store, clock = Store(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    store.fail.add("a")
    t_last = clock.t
    leader_ends = standby_starts = None
    while standby_starts is None:
        clock.advance(0.5)
        a.try_acquire_or_renew()  # fails: partitioned
        if leader_ends is None and not a.is_leader():
            leader_ends = clock.t - t_last
        if b.try_acquire_or_renew():
            standby_starts = clock.t - t_last
        assert not (a.is_leader() and b.is_leader())
    assert leader_ends == 10.0  # renew deadline
    assert standby_starts == 15.0  # lease duration after b saw the last renewal


def test_renewal_back_within_the_deadline_keeps_leading():
    store, clock = Store(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    store.fail.add("a")
    clock.advance(9)
    assert not a.try_acquire_or_renew()
    assert a.is_leader()
    store.fail.clear()
    assert a.try_acquire_or_renew()
    clock.advance(9)
    assert a.is_leader()
    clock.advance(1)
    assert not a.is_leader()


def test_concurrent_takeover_one_wins_on_resource_version():
    """Two standbys read the same expired Lease and both update it: the API server takes the first write,
    the second carries a stale resourceVersion and gets 409; it stays a follower."""
    store, clock = Store(), Clock()
    a, b, c = elector(store, "a", clock), elector(store, "b", clock), elector(store, "c", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    c.try_acquire_or_renew()
    clock.advance(16)
    b.store.before_update = lambda: c.try_acquire_or_renew()  # c writes between b's read and b's write
    assert not b.try_acquire_or_renew()
    assert c.is_leader() and not b.is_leader()
    assert store.lease["spec"]["holderIdentity"] == "c"
    assert store.lease["spec"]["leaseTransitions"] == 1
    assert [w for w in store.writes if w[1] == "update"] == [("c", "update")]


def test_second_create_is_already_exists():
    store, clock = Store(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    b.store.get = lambda: None  # b read before a created it
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert "409" in b.last_error
    assert not b.is_leader()


def test_clock_skew_does_not_matter():
    """The Lease's timestamps are never compared with a local clock: a holder whose wall clock is an hour
    behind still holds; one whose clock is an hour ahead cannot be waited out early."""
    for skew in (-3600.0, 3600.0):
        store, clock = Store(), Clock()
        a, b = elector(store, "a", clock, skew=skew), elector(store, "b", clock)
        a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
        clock.advance(2)
        a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew(), skew  # b sees the renewal (renewTime an hour off) at t=2
        clock.advance(14.5)
        assert not b.try_acquire_or_renew(), skew
        clock.advance(0.5)
        assert b.try_acquire_or_renew(), skew


def test_release_lets_a_standby_acquire_at_once():
    store, clock = Store(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    a.stop(release=True)
    assert not a.is_leader()
    spec = store.lease["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()
    assert store.lease["spec"]["leaseTransitions"] == 1


def test_release_does_nothing_when_someone_else_holds_it():
    store, clock = Store(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.advance(16)
    assert b.try_acquire_or_renew()
    assert not a.release()
    assert store.lease["spec"]["holderIdentity"] == "b"


def test_stop_without_release_leaves_the_lease():
    store, clock = Store(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    a.stop(release=False)
    assert not a.is_leader()
    assert store.lease["spec"]["holderIdentity"] == "a"


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"lease_duration": 10, "renew_deadline": 10}, "greater than the renew deadline"),
        ({"renew_deadline": 2, "retry_period": 2}, "1.2 × the retry period"),
        ({"retry_period": 0}, "retry period"),
    ],
)
def test_bad_durations_are_value_errors(kw, words):
    with pytest.raises(ValueError, match=words):
        LeaderElector(None, "ns", "name", "me", store=Store().view("me"), **kw)


def test_empty_identity_is_refused():
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(None, "ns", "name", "", store=Store().view(""))


# --- the thread, in real (short) time --------------------------------------------------------------------

FAST = {"lease_duration": 0.8, "renew_deadline": 0.5, "retry_period": 0.1}


def threaded(store: Store, who: str, **kw) -> LeaderElector:
    return LeaderElector(None, "ns", "lock", who, store=store.view(who), **{**FAST, **kw})


def sample(electors, seconds: float, every: float = 0.005) -> tuple[int, set[str]]:
    """Sample is_leader() of every elector; (max leaders at once, who led)."""
    most, who = 0, set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        leaders = [e.identity for e in electors if e.is_leader()]
        most = max(most, len(leaders))
        who.update(leaders)
        time.sleep(every)
    return most, who


def test_threads_one_leader_then_release_handover():
    store = Store()
    a, b = threaded(store, "a"), threaded(store, "b")
    started = []
    a.on_started_leading = lambda: started.append("a")
    b.on_started_leading = lambda: started.append("b")
    a.start()
    assert a.wait(threading.Event(), timeout=2)
    b.start()
    most, who = sample([a, b], 1.0)
    assert most == 1 and who == {"a"}
    t0 = time.monotonic()
    a.stop(release=True)
    assert b.wait(threading.Event(), timeout=2)
    took = time.monotonic() - t0
    assert took < FAST["retry_period"] * 1.2 + 0.3, took
    most, _ = sample([a, b], 0.3)
    assert most == 1
    assert started == ["a", "b"]
    b.stop()
    assert store.lease["spec"]["holderIdentity"] == ""


def test_threads_partitioned_leader_steps_down_and_standby_takes_over():
    store = Store()
    a, b = threaded(store, "a"), threaded(store, "b")
    stopped = threading.Event()
    a.on_stopped_leading = stopped.set
    a.start()
    assert a.wait(threading.Event(), timeout=2)
    b.start()
    time.sleep(0.3)
    store.fail.add("a")
    t0 = time.monotonic()
    most, who = sample([a, b], 1.6)
    assert most == 1 and who == {"a", "b"}
    assert stopped.is_set()
    assert b.is_leader() and not a.is_leader()
    took = time.monotonic() - t0
    assert took >= FAST["lease_duration"]
    # a comes back: it stands by and sees b as the holder
    store.fail.clear()
    most, who = sample([a, b], 0.5)
    assert most == 1 and who == {"b"}
    assert a.holder == "b"
    a.stop()
    b.stop()


def test_wait_returns_when_stopped():
    store = Store()
    a, b = threaded(store, "a"), threaded(store, "b")
    a.start()
    a.wait(threading.Event(), timeout=2)
    b.start()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    assert b.wait(stop) is False
    assert time.monotonic() - t0 < 1.0
    a.stop(release=False)
    b.stop()


def test_a_failing_request_is_logged_once_then_its_recovery():
    store, clock = Store(), Clock()
    lines = []
    a = LeaderElector(None, "ns", "lock", "a", clock=clock, wall=Wall(clock), store=store.view("a"),
                      log=lambda msg, level="info", **f: lines.append((level, f.get("event"), f.get("error", ""))))
    store.fail.add("a")
    for _ in range(5):
        assert not a.try_acquire_or_renew()
        clock.advance(2)
    assert lines == [("warning", "lease request failed", "reading lease: GET …: ConnectTimeoutError")]
    assert a.last_error == "reading lease: GET …: ConnectTimeoutError"
    store.fail.clear()
    assert a.try_acquire_or_renew()
    assert lines[1:] == [("info", "lease requests work again", "")]
    assert a.last_error == ""
    a.stop()
    assert lines[-1][:2] == ("info", "released")
