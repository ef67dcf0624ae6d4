"""The pure parts of ``-w/--watch``: coalescing (settle), the changes named (merge_changes), what counts as the
report's content, the text of one block; and the WatchCache: an event that changes nothing the model reads is
no change."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kubectl_runs.cli.watch_text import MAX_DELAY, QUIET, block, content, merge_changes, settle
from kubectl_runs.render import Column, Document
from kubectl_runs.sources.watchcache import Change, WatchCache

AT = datetime(2025, 11, 1, 0, 15, tzinfo=UTC)


def test_a_burst_is_evaluated_after_a_quiet_window_but_never_later_than_the_cap():
    assert settle(10.0, 10.0, 10.0) == pytest.approx(QUIET)  # one change: wait the quiet window
    assert settle(10.0, 10.15, 10.2) == pytest.approx(QUIET - 0.05)  # another change: the window starts again
    assert settle(10.0, 10.0, 10.0 + QUIET) == 0.0  # quiet long enough: now
    assert settle(10.0, 11.95, 11.99) == pytest.approx(MAX_DELAY - 1.99)  # the cap comes first
    assert settle(10.0, 13.0, 13.0) == 0.0  # changes all the time: evaluated at the cap anyway


def test_changes_are_named_once_per_object_as_they_differ_from_the_last_block():
    changes = [Change("ADDED", "GPULease", "a/l1"), Change("MODIFIED", "GPULease", "a/l1"),
               Change("MODIFIED", "Run", "a/r"), Change("ADDED", "GPULease", "a/tmp"),
               Change("DELETED", "GPULease", "a/tmp"), Change("DELETED", "Budget", "a/b"),
               Change("ADDED", "Budget", "a/b"), Change("MODIFIED", "Run", "a/r")]
    assert [str(c) for c in merge_changes(changes)] == [
        "ADDED GPULease a/l1", "MODIFIED Run a/r", "MODIFIED Budget a/b"]
    assert merge_changes([]) == []


def doc(used: int, at: datetime = AT) -> Document:
    return Document(data={"at": at, "envelopes": [{"envelope": "main", "usedGPUs": used}]},
                    rows=[{"envelope": "main", "usedGPUs": used}],
                    columns=[Column("ENVELOPE", lambda r: r["envelope"]), Column("USED", lambda r: r["usedGPUs"])])


def test_content_is_what_would_be_printed():
    assert content(doc(2), "json") == content(doc(2), "json")
    assert content(doc(2), "json") != content(doc(3), "json")
    assert content(doc(2), "table") != content(doc(3), "table")
    noted = doc(2)
    noted.notes.append("something to know")
    assert content(noted, "table") != content(doc(2), "table")  # a new warning is new content


def test_json_blocks_are_json_lines_and_events_wrap_the_report():
    out, err = block(doc(2), "json", AT, None)
    assert out.count("\n") == 1 and err == ""
    assert json.loads(out) == {"at": "2025-11-01T00:15:00Z", "envelopes": [{"envelope": "main", "usedGPUs": 2}]}
    out, _ = block(doc(2), "json", AT, [Change("ADDED", "GPULease", "a/l1"), Change("MODIFIED", "Node", "gpu-1")])
    assert json.loads(out) == {
        "events": [{"type": "ADDED", "kind": "GPULease", "namespace": "a", "name": "l1"},
                   {"type": "MODIFIED", "kind": "Node", "namespace": "", "name": "gpu-1"}],
        "object": {"at": "2025-11-01T00:15:00Z", "envelopes": [{"envelope": "main", "usedGPUs": 2}]}}


def test_table_blocks_begin_with_a_timestamp_line_then_the_changes():
    out, _ = block(doc(2), "table", AT, None)
    lines = out.splitlines()
    assert lines[0] == "--- 2025-11-01T00:15:00Z"
    assert lines[1].split() == ["ENVELOPE", "USED"]
    many = [Change("MODIFIED", "GPULease", f"a/l{i}") for i in range(25)]
    out, _ = block(doc(2), "table", AT, many)
    lines = out.splitlines()
    assert lines[1:3] == ["MODIFIED GPULease a/l0", "MODIFIED GPULease a/l1"]
    assert lines[21] == "… and 5 more changes"


def test_yaml_blocks_are_separate_documents():
    out, _ = block(doc(2), "yaml", AT, None)
    assert out.startswith("---\n") and "usedGPUs: 2" in out


def _obj(name: str, rv: str, *, gpus: int = 8, note: str = "") -> bytes:
    meta = {"name": name, "namespace": "a", "resourceVersion": rv}
    if note:
        meta["annotations"] = {"note": note}
    return json.dumps({"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": meta,
                       "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": gpus}}}).encode()


def test_the_watch_cache_counts_only_changes_of_what_the_model_reads():
    store = WatchCache(["Run", "Node"])
    store.replace("Run", [store.decode("Run", _obj("r1", "5"))])
    store.replace("Node", [])
    assert store.all_synced()
    assert [str(c) for c in store.changes()] == ["ADDED Run a/r1"]
    version = store.version
    assert not store.upsert(store.decode("Run", _obj("r1", "6")))  # a new resourceVersion only: no change
    assert store.version == version and store.changes() == []
    assert store.upsert(store.decode("Run", _obj("r1", "7", gpus=16)))
    store.delete("Run", "a/r1")
    store.delete("Run", "a/r1")  # twice: once
    assert [str(c) for c in store.changes()] == ["MODIFIED Run a/r1", "DELETED Run a/r1"]
    assert store.snapshot().runs == ()
    store.replace("Run", [store.decode("Run", _obj("r2", "9", note="x"))])  # a re-list: its differences
    assert [str(c) for c in store.changes()] == ["ADDED Run a/r2"]
    assert [r.metadata.name for r in store.snapshot().runs] == ["r2"]


class _Opts:
    def __init__(self):
        self.at = None
        self.no_headers = False
        self.watch_events = False
        self.wall_clock = AT

    def evaluation_time(self, _snapshot):
        return self.wall_clock


class _HoursReport:
    """A report whose figures move with the clock (GPU-hours) and with its objects (the GPUs used)."""

    fmt = "json"

    def __init__(self):
        self.opts = _Opts()

    def evaluate(self, snapshot):
        at = self.opts.wall_clock
        hours = snapshot["gpus"] * (at - AT).total_seconds() / 3600
        return Document(data={"at": at, "usedGPUs": snapshot["gpus"], "gpuHours": hours})


def test_a_block_is_printed_when_the_objects_change_what_it_says_never_for_the_clock_alone(capsys, monkeypatch):
    from datetime import timedelta

    from kubectl_runs.cli import watching

    report = _HoursReport()
    watch = watching._Watch(report, None)
    watch.emit(report.evaluate({"gpus": 8}), AT, [])
    later = AT + timedelta(hours=1)
    monkeypatch.setattr(watching, "now_utc", lambda: later)
    assert not watch.evaluate({"gpus": 8}, [])  # an hour passed, the hours moved, nothing else: no block
    assert watch.evaluate({"gpus": 9}, [Change("ADDED", "GPULease", "a/l")])  # a lease: a block, evaluated now
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"at": "2025-11-01T00:15:00Z", "usedGPUs": 8, "gpuHours": 0.0},
        {"at": "2025-11-01T01:15:00Z", "usedGPUs": 9, "gpuHours": 9.0}]
    assert not watch.evaluate({"gpus": 9}, [])  # the same state again: never printed twice
