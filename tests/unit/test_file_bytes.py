"""sources/file_bytes.py: a large file read by a few threads gives the bytes one read() gives, and anything
unusual (a small file, a file that shrank or grew while it was read, a Python it cannot fill bytes on) gets the
plain read()."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from kubectl_runs.sources import file_bytes
from kubectl_runs.sources.files import load_snapshot

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"


@pytest.fixture
def small_spans(monkeypatch):
    """Spans and calls small enough that a 3 MB file is read by 4 threads, each in several calls."""
    monkeypatch.setattr(file_bytes, "PARALLEL_BYTES", 1 << 20)
    monkeypatch.setattr(file_bytes, "SPAN_BYTES", 256 << 10)
    monkeypatch.setattr(file_bytes, "CHUNK_BYTES", 100_000)
    monkeypatch.setattr(file_bytes.os, "cpu_count", lambda: 4)
    fills = []
    real = file_bytes._fill

    def counted(fd, data, threads):
        fills.append(threads)
        return real(fd, data, threads)

    monkeypatch.setattr(file_bytes, "_fill", counted)
    return fills


def _file(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    return path, data


def _read(path: Path) -> bytes:
    with open(path, "rb") as handle:
        data = file_bytes.read_bytes(handle)
        assert handle.read() == b""  # the handle is at the end, as after read()
    return data


def test_a_large_file_is_read_by_threads_into_the_same_bytes(tmp_path, small_spans):
    path, expected = _file(tmp_path, 3 * (1 << 20) + 12_345)
    data = _read(path)
    assert small_spans == [4]
    assert type(data) is bytes
    assert data == expected
    assert hash(data) == hash(expected)  # a bytes object like any other (its hash is computed when first asked)


def test_a_small_file_is_read_at_once(tmp_path, small_spans):
    path, expected = _file(tmp_path, 500_000)
    assert _read(path) == expected
    assert small_spans == []


def test_a_file_that_shrank_after_its_size_was_taken_is_read_again(tmp_path, small_spans, monkeypatch):
    path, expected = _file(tmp_path, 2 << 20)
    real = os.fstat

    def larger(fd):  # the size taken before the file lost its last megabyte
        info = real(fd)
        return os.stat_result((info.st_mode, *info[1:6], info.st_size + (1 << 20), *info[7:]))

    monkeypatch.setattr(file_bytes.os, "fstat", larger)
    assert _read(path) == expected
    assert small_spans == [4]  # the threads ran, met the end early, and the file was read again


def test_a_file_that_grew_after_its_size_was_taken_is_read_to_its_end(tmp_path, small_spans, monkeypatch):
    path, expected = _file(tmp_path, 3 << 20)
    real = os.fstat

    def smaller(fd):  # the size taken before the file grew by its last megabyte
        info = real(fd)
        return os.stat_result((info.st_mode, *info[1:6], info.st_size - (1 << 20), *info[7:]))

    monkeypatch.setattr(file_bytes.os, "fstat", smaller)
    assert _read(path) == expected
    assert small_spans == [4]


def test_where_bytes_cannot_be_filled_the_file_is_read_at_once(tmp_path, small_spans, monkeypatch):
    monkeypatch.setattr(file_bytes, "_USABLE", False)
    path, expected = _file(tmp_path, 2 << 20)
    assert _read(path) == expected
    assert small_spans == []


def test_the_loader_reads_a_large_snapshot_the_same(tmp_path, small_spans):
    """The example fleet as one JSON List, padded past the threshold: loaded by threads, as loaded at once."""
    documents = [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]
    head = next(doc for doc in documents if doc["kind"] == "List")
    items = [doc for doc in documents if doc["kind"] != "List"]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "metadata": head["metadata"], "items": items}, indent=1)
    path = tmp_path / "fleet.json"
    path.write_text(text + " " * (2 << 20))
    threaded = load_snapshot([str(path)])
    assert small_spans == [4]
    once = load_snapshot([str(EXAMPLE)])
    assert threaded.leases == once.leases and threaded.runs == once.runs and threaded.budgets == once.budgets


def test_a_read_that_fails_in_one_thread_is_read_again_at_once(tmp_path, small_spans, monkeypatch):
    """Any failure of a reader (not only an OSError) means read(): never a span left unfilled."""
    path, expected = _file(tmp_path, 3 << 20)
    real = os.preadv
    failed = []

    def preadv(fd, buffers, offset):
        if offset >= (1 << 20) and not failed:
            failed.append(offset)
            raise MemoryError
        return real(fd, buffers, offset)

    monkeypatch.setattr(file_bytes.os, "preadv", preadv)
    assert _read(path) == expected
    assert failed and small_spans == [4]


def test_a_thread_that_cannot_start_means_read(tmp_path, small_spans, monkeypatch):
    path, expected = _file(tmp_path, 3 << 20)
    starts = []
    real = file_bytes.threading.Thread.start

    def start(self):
        starts.append(self)
        if len(starts) == 2:
            raise RuntimeError("can't start new thread")
        return real(self)

    monkeypatch.setattr(file_bytes.threading.Thread, "start", start)
    assert _read(path) == expected
    assert len(starts) == 2 and not starts[0].is_alive()  # the one started was waited for


def test_an_interrupt_stops_the_read_and_no_reader_outlives_its_bytes(tmp_path, small_spans, monkeypatch):
    """Ctrl-C in the command's thread goes on up; a reader still running holds the bytes it fills."""
    path, _expected = _file(tmp_path, 3 << 20)
    real = os.preadv
    main = file_bytes.threading.main_thread()

    def preadv(fd, buffers, offset):
        if file_bytes.threading.current_thread() is main:
            raise KeyboardInterrupt
        return real(fd, buffers, offset)

    monkeypatch.setattr(file_bytes.os, "preadv", preadv)
    with pytest.raises(KeyboardInterrupt):
        _read(path)
    assert not [t for t in file_bytes.threading.enumerate() if t.name == "file-reader"]


def test_without_preadv_the_file_is_read_at_once(tmp_path, small_spans, monkeypatch):
    monkeypatch.delattr(file_bytes.os, "preadv")
    monkeypatch.setattr(file_bytes, "_USABLE", None)
    path, expected = _file(tmp_path, 2 << 20)
    assert _read(path) == expected
    assert small_spans == []
