"""reconciler/queue.py: coalescing, one worker per key at a time, exponential backoff per key."""

from __future__ import annotations

import threading

from kubectl_runs.reconciler.queue import WorkQueue


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_the_same_key_is_one_piece_of_work():
    q = WorkQueue(coalesce=0)
    for _ in range(1000):
        q.add("Run/a/b")
    q.add("Run/a/c")
    assert q.get_batch(timeout=0) == ["Run/a/b", "Run/a/c"]
    assert q.get_batch(timeout=0) == []


def test_a_key_changed_while_processed_comes_back_after_done():
    q = WorkQueue(coalesce=0)
    q.add("k")
    assert q.get_batch(timeout=0) == ["k"]
    q.add("k")  # changed while being worked on: not handed out twice at once
    assert q.get_batch(timeout=0) == []
    q.done(["k"])
    assert q.get_batch(timeout=0) == ["k"]


def test_backoff_doubles_per_failure_and_forget_resets_it():
    clock = FakeClock()
    q = WorkQueue(coalesce=0, base_delay=0.1, max_delay=1.0, clock=clock)
    delays = [q.add_rate_limited("k") for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    q.forget("k")
    assert q.add_rate_limited("k") == 0.1


def test_a_delayed_key_is_ready_only_when_due():
    clock = FakeClock()
    q = WorkQueue(coalesce=0, clock=clock)
    q.add_after("k", 5)
    assert q.get_batch(timeout=0) == []
    assert q.depth() == 1
    clock.now = 5.0
    assert q.get_batch(timeout=0) == ["k"]


def test_get_batch_waits_for_work_and_shutdown_ends_the_wait():
    q = WorkQueue(coalesce=0)
    got: list = []
    worker = threading.Thread(target=lambda: got.append(q.get_batch(timeout=5)))
    worker.start()
    q.add("k")
    worker.join(2)
    assert got == [["k"]]
    worker = threading.Thread(target=lambda: got.append(q.get_batch()))
    worker.start()
    q.shutdown()
    worker.join(2)
    assert not worker.is_alive()
    assert got[-1] == []


def test_reconcile_help_does_not_import_the_kubernetes_client():
    from test_fast_start import imported_by, top_level

    code, out, modules = imported_by("reconcile", "--help")
    assert code == 0
    assert "--resync-period" in out and "--dry-run" in out
    assert "kubernetes" not in top_level(modules)


def test_keys_an_event_named_go_before_the_tail_and_alone():
    q = WorkQueue(coalesce=0)
    q.add_all([f"tail-{i}" for i in range(5)])
    q.add("tail-3", priority=True)  # an event named one of them: it moves to the front lane
    q.add("event", priority=True)
    assert q.get_batch(timeout=0, limit=10) == ["tail-3", "event"]
    assert q.get_batch(timeout=0, limit=2) == ["tail-0", "tail-1"]
    q.add("tail-0")  # processing: comes back after done, in its lane
    q.add("tail-1", priority=True)
    q.done(["tail-0", "tail-1"])
    assert q.get_batch(timeout=0, limit=10) == ["tail-1"]
    assert q.get_batch(timeout=0, limit=10) == ["tail-2", "tail-4", "tail-0"]


def test_a_deep_queue_gives_bigger_batches_up_to_the_cap():
    from kubectl_runs.reconciler.queue import BATCH_CAP, batch_limit

    assert batch_limit(0, 64) == batch_limit(64, 64) == batch_limit(512, 64) == 64  # a short queue: the base
    assert batch_limit(2000, 64) == 250  # an eighth of a deep one
    assert batch_limit(10_100, 64) == batch_limit(200_000, 64) == BATCH_CAP == 512  # never more than the cap


def test_a_batch_computes_its_next_chunk_of_status_while_the_last_one_is_written():
    """``Writer.apply_chunks``: the writes of a chunk go to the writer threads as it is taken, so the generator
    computing the chunks runs on while they are in flight; every outcome comes back, in the writes' order."""
    import io
    import threading
    from datetime import UTC, datetime

    from kubectl_runs.reconciler.actions import PatchStatus
    from kubectl_runs.reconciler.apply import Outcome
    from kubectl_runs.reconciler.loop import Logger, Reconciler, Settings

    release = threading.Event()
    first_in_flight = threading.Event()

    class Slow:
        def __init__(self):
            self.counts: dict = {}  # what the loop logs when it stops

        def apply(self, write, at, **_):
            first_in_flight.set()
            assert release.wait(10), "the chunks were not all computed while a write was in flight"
            return Outcome(write, "ok")

    loop = Reconciler(lambda: None, Settings(once=True), log=Logger(io.StringIO()))
    loop.applier = Slow()
    writes = [PatchStatus(kind="Run", namespace="ns", name=f"r{i}", status={"phase": "Pending"}, cause="test")
              for i in range(6)]
    computed = []

    def chunks():
        for start in range(0, 6, 2):
            if start:  # the chunk before this one is being written already
                assert first_in_flight.wait(10)
            computed.append(start)
            yield writes[start:start + 2]
        release.set()  # every chunk computed while the first writes waited

    try:
        outcomes = loop.writer.apply_chunks([], chunks(), datetime(2026, 11, 24, tzinfo=UTC))
    finally:
        release.set()
        loop.shutdown()
    assert computed == [0, 2, 4]
    assert [o.write for o in outcomes] == writes and {o.outcome for o in outcomes} == {"ok"}
