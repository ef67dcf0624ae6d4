"""reconciler/cache.py and the loop's change mapping: decoding (a bad object names its field), resourceVersion
bookkeeping (an older version never replaces a newer one), relist differences as changes, and which keys a
change touches."""

from __future__ import annotations

import json

from kubectl_runs.reconciler.cache import Cache, decode_entry
from kubectl_runs.reconciler.loop import ALL_KEY, FLAVOR, changed_keys, expand


def run_json(name: str, rv: str, *, gpus: int = 8, status: dict | None = None, ns: str = "team") -> bytes:
    return json.dumps({
        "apiVersion": "jobtree.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "generation": 1, "resourceVersion": rv},
        "spec": {"resources": {"gpuType": "H100", "totalGPUs": gpus}},
        "status": status or {},
    }).encode()


def lease_json(name: str, rv: str) -> bytes:
    return json.dumps({
        "kind": "GPULease", "metadata": {"name": name, "namespace": "team", "resourceVersion": rv},
        "spec": {"owner": "org:team", "runRef": {"namespace": "team", "name": "r"}, "group": 0, "flavor": "H100",
                 "slice": {"slots": ["n1#0"], "role": "Active"}, "start": "2025-11-01T00:00:00Z", "reason": "Start",
                 "paidBy": {"budget": "b", "envelope": "west"}},
    }).encode()


def test_decode_keeps_the_record_and_the_stored_status():
    entry = decode_entry("Run", run_json("r", "5", status={"phase": "Pending", "plan": {"deficitGPUs": 8}}))
    assert entry.record.spec.resources.total_gpus == 8
    assert entry.status == {"phase": "Pending", "plan": {"deficitGPUs": 8}}
    assert (entry.key, entry.resource_version, entry.bad) == ("team/r", "5", None)


def test_an_object_the_model_refuses_is_kept_as_bad_with_its_field():
    entry = decode_entry("Run", run_json("r", "5", status={"preemptions": [{"seed": "0x1"}]}))
    assert entry.record is None
    assert entry.bad.error == "status.preemptions[0].reservation: required field is missing"
    assert (entry.bad.uid, entry.bad.generation) == ("uid-r", 1)


def test_an_older_version_never_replaces_a_newer_one():
    seen = []
    cache = Cache(on_change=lambda kind, old, new: seen.append((kind, old and old.resource_version,
                                                                new and new.resource_version)))
    cache.replace("Run", [decode_entry("Run", run_json("r", "10"))])
    assert cache.upsert(decode_entry("Run", run_json("r", "12")), notify=False)  # our write's answer
    assert not cache.upsert(decode_entry("Run", run_json("r", "11")))  # a late watch event
    assert not cache.upsert(decode_entry("Run", run_json("r", "12")))  # the echo of our write
    assert cache.get("Run", "team/r").resource_version == "12"
    cache.replace("Run", [decode_entry("Run", run_json("r", "11")), decode_entry("Run", run_json("s", "13"))])
    assert cache.get("Run", "team/r").resource_version == "12"
    assert seen == [("Run", None, "10"), ("Run", None, "13")]


def test_a_relist_delivers_deletions():
    seen = []
    cache = Cache(on_change=lambda kind, old, new: seen.append((old and old.name, new and new.name)))
    cache.replace("Run", [decode_entry("Run", run_json("a", "1")), decode_entry("Run", run_json("b", "2"))])
    seen.clear()
    cache.replace("Run", [decode_entry("Run", run_json("a", "1"))])
    assert seen == [("b", None)]


def test_the_view_is_a_sorted_snapshot_and_is_rebuilt_only_after_a_change():
    cache = Cache()
    cache.replace("Run", [decode_entry("Run", run_json("b", "2")), decode_entry("Run", run_json("a", "1"))])
    snapshot, stored, bad = cache.view()
    assert [r.metadata.name for r in snapshot.runs] == ["a", "b"]
    assert set(stored) == {("Run", "team", "a"), ("Run", "team", "b")}
    assert cache.view()[0] is snapshot
    cache.upsert(decode_entry("Run", run_json("c", "3", status={"preemptions": [{}]})))
    snapshot2, _stored, bad = cache.view()
    assert snapshot2 is not snapshot
    assert [r.metadata.name for r in snapshot2.runs] == ["a", "b"]
    assert set(bad) == {("Run", "team", "c")}


def test_our_own_status_write_coming_back_touches_only_that_run():
    old = decode_entry("Run", run_json("r", "1"))
    new = decode_entry("Run", run_json("r", "2", status={"phase": "Pending", "plan": {"deficitGPUs": 8}}))
    keys = changed_keys("Run", old, new)
    assert ("Run", "team", "r") in keys
    assert not any(k[0] in ("RunOthers", FLAVOR) for k in keys)


def test_a_lease_change_touches_its_budget_its_run_and_its_flavor():
    keys = changed_keys("GPULease", None, decode_entry("GPULease", lease_json("l", "1")))
    assert keys == {("Budget", "team", "b"), ("Run", "team", "r"), (FLAVOR, "", "H100")}


def test_groups_expand_from_the_snapshot():
    cache = Cache()
    cache.replace("Run", [decode_entry("Run", run_json("a", "1")), decode_entry("Run", run_json("b", "2", ns="x"))])
    snapshot, _stored, bad = cache.view()
    assert expand([(FLAVOR, "", "H100")], snapshot, bad) == ({("Run", "team", "a"), ("Run", "x", "b")}, False)
    assert expand([ALL_KEY], snapshot, bad)[1] is True


# --- the informer against a scripted API server --------------------------------------------------------------


class _Stream:
    def __init__(self, lines: list[bytes], on_end=None):
        self.lines = lines
        self.on_end = on_end

    def stream(self, _amt, decode_content=True):
        for line in self.lines:
            yield line + b"\n"
        if self.on_end is not None:
            self.on_end()

    def release_conn(self):
        pass


class _Answer:
    def __init__(self, status: int, data: bytes = b"", stream: _Stream | None = None):
        self.status = status
        self.data = data
        self.response = stream

    def read(self):
        return self.data


class ScriptedApi:
    """Answers the informer's requests in order from a script of (expected query check, answer)."""

    class configuration:
        host = "https://scripted"

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[dict] = []

    def param_serialize(self, method, resource_path, query_params, header_params, body, auth_settings):
        return (method, resource_path, dict(query_params), body)

    def call_api(self, method, path, query, body, _request_timeout=None):
        self.requests.append({"method": method, "path": path, **query})
        return self.answers.pop(0)


def _event(kind: str, obj: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}"


def test_the_informer_lists_watches_with_bookmarks_and_relists_on_410():
    import threading

    from kubectl_runs.reconciler.cache import Informer
    from kubectl_runs.sources.cluster import RESOURCES

    stop = threading.Event()
    seen = []
    cache = Cache(on_change=lambda kind, old, new: seen.append((old and old.name, new and new.name)))
    page = lambda items, rv: (b'{"metadata":{"resourceVersion":"' + rv + b'"},"items":[' + b",".join(items)  # noqa: E731
                              + b"]}")
    gone = b'{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 10 (12)"}'
    api = ScriptedApi([
        _Answer(200, page([run_json("a", "5")], b"10")),
        _Answer(200, stream=_Stream([_event("ADDED", run_json("b", "11")),
                                     _event("BOOKMARK", b'{"kind":"Run","metadata":{"resourceVersion":"15"}}'),
                                     _event("ERROR", gone)])),
        _Answer(200, page([run_json("b", "16")], b"20")),
        _Answer(200, stream=_Stream([_event("MODIFIED", run_json("b", "21", gpus=16))], on_end=stop.set)),
    ])
    logged = []
    run_resource = next(r for r in RESOURCES if r.kind == "Run")
    informer = Informer(run_resource, cache, api, stop, log=lambda msg, **f: logged.append((msg, f)))
    informer.run()
    lists = [r for r in api.requests if "watch" not in r]
    watches = [r for r in api.requests if "watch" in r]
    assert [r["limit"] for r in lists] == [500, 500]
    # the first list from the API server's watch cache (client-go's reflector's); the relist a consistent read
    assert [(r.get("resourceVersion"), r.get("resourceVersionMatch")) for r in lists] == [("0", "NotOlderThan"),
                                                                                           (None, None)]
    assert [(w["resourceVersion"], w["allowWatchBookmarks"]) for w in watches] == [("10", "true"), ("20", "true")]
    assert informer.lists == 2
    assert ("relist", {"kind": "Run", "reason": "410 Gone", "detail": "too old resource version: 10 (12)"}) in logged
    assert seen == [(None, "a"), (None, "b"), ("b", "b"), ("a", None), ("b", "b")]
    assert cache.get("Run", "team/b").record.spec.resources.total_gpus == 16
    assert cache.get("Run", "team/a") is None


def test_the_first_list_pages_from_version_0_and_a_list_without_a_watch_is_consistent():
    import threading

    from kubectl_runs.reconciler.cache import Informer
    from kubectl_runs.sources.cluster import RESOURCES

    run_resource = next(r for r in RESOURCES if r.kind == "Run")
    page = lambda token, items: (b'{"metadata":{"resourceVersion":"9","continue":"' + token + b'"},"items":['  # noqa: E731
                                 + b",".join(items) + b"]}")
    api = ScriptedApi([_Answer(200, page(b"t1", [run_json("a", "5")])), _Answer(200, page(b"", [run_json("b", "6")]))])
    cache = Cache()
    Informer(run_resource, cache, api, threading.Event(), log=lambda msg, **f: None).list_once()
    # a server without a watch cache pages the version-0 list; a continue token carries the version alone
    assert [{k: v for k, v in r.items() if k not in ("method", "path")} for r in api.requests] == [
        {"limit": 500, "resourceVersion": "0", "resourceVersionMatch": "NotOlderThan"},
        {"limit": 500, "continue": "t1"}]
    assert {e.name for e in cache.entries("Run")} == {"a", "b"}
    # --once lists without watching: nothing would catch a list from the cache up, so it reads from etcd
    api = ScriptedApi([_Answer(200, page(b"", [run_json("a", "5")]))])
    Informer(run_resource, Cache(), api, threading.Event(), log=lambda msg, **f: None, watch=False).list_once()
    assert "resourceVersion" not in api.requests[0]


def test_the_informer_backs_off_on_errors_and_counts_them():
    import threading

    from kubectl_runs.reconciler.cache import Informer
    from kubectl_runs.sources.cluster import RESOURCES

    stop = threading.Event()
    counted = []
    refused = b'{"kind":"Status","code":403,"reason":"Forbidden","message":"runs.jobtree.dev is forbidden"}'
    api = ScriptedApi([_Answer(403, refused), _Answer(403, refused),
                       _Answer(200, b'{"metadata":{"resourceVersion":"3"},"items":[]}')])
    logged = []
    informer = Informer(next(r for r in RESOURCES if r.kind == "Run"), Cache(), api, stop,
                        log=lambda msg, **f: logged.append((msg, f)),
                        count_error=lambda verb, resource, reason: counted.append((verb, resource, reason)),
                        watch=False, base_backoff=0.01)
    informer.run()
    assert counted == [("list", "runs", "Forbidden"), ("list", "runs", "Forbidden")]
    assert [f["retryIn"] for msg, f in logged if msg == "error"] == ["0.01s", "0.02s"]
    assert informer.lists == 1


def test_the_batch_that_expands_a_resync_is_observed_like_any_other():
    """The `All` key of a resync is a batch of its own: it computes the fleet gauges and queues every object.
    Its time counts in jobtree_reconcile_duration_seconds (a full pass is the sum of its batches)."""
    import io

    from kubectl_runs.reconciler.loop import Logger, NullMetrics, Reconciler, Settings
    from kubectl_runs.reconciler.queue import WorkQueue

    class Seen(NullMetrics):
        def __init__(self):
            self.durations: list[float] = []
            self.fleets = 0

        def observe_reconcile(self, seconds: float) -> None:
            self.durations.append(seconds)

        def update_fleet(self, snapshot, at, book=None, phases=None) -> None:
            self.fleets += 1

    seen = Seen()
    rec = Reconciler(lambda: None, Settings(), log=Logger(io.StringIO()), metrics=seen)
    try:
        for kind in ("Node", "Budget", "Reservation", "GPULease"):
            rec.cache.replace(kind, [])
        rec.cache.replace("Run", [decode_entry("Run", run_json("a", "1")), decode_entry("Run", run_json("b", "2"))])
        rec.queue = WorkQueue(coalesce=0)  # what the lists queued is not this test's
        rec.process([ALL_KEY])
        assert (seen.fleets, len(seen.durations), rec.batches) == (1, 1, 1)
        assert sorted(rec.queue.get_batch(timeout=0)) == [("Run", "team", "a"), ("Run", "team", "b")]
    finally:
        rec.shutdown()


def test_the_first_lists_queue_no_keys_the_changes_after_the_sync_do():
    """Until every kind is listed, a change queues nothing (the `All` key after the sync looks at everything:
    issue 27's 21,467 start-up keys at 10,000 runs); once listening, a change queues its keys."""
    import io

    from kubectl_runs.reconciler.loop import Logger, Reconciler, Settings

    rec = Reconciler(lambda: None, Settings(), log=Logger(io.StringIO()))
    try:
        for kind in ("Node", "Budget", "Reservation", "GPULease"):
            rec.cache.replace(kind, [])
        rec.cache.replace("Run", [decode_entry("Run", run_json("a", "1")), decode_entry("Run", run_json("b", "2"))])
        assert rec.queue.depth() == 0
        rec._listening = True  # what sync() sets once every kind is listed
        rec.cache.upsert(decode_entry("Run", run_json("a", "3", gpus=4)))
        assert ("Run", "team", "a") in rec.queue.get_batch(timeout=1)
    finally:
        rec.shutdown()
