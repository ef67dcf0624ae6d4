"""Endless and enormous input (issue #28): what is not a snapshot is refused from what it is or its first bytes,
what is read is bounded, a pipe with no writer does not block — one line on stderr naming the file, exit 1,
fast, under a memory limit. Real devices, a real FIFO, endless generators piped into ``--snapshot -``, each in a
child process (a hang is a timeout, a crash a signal)."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubectl_runs.errors import UserError
from kubectl_runs.sources import snapshot_input
from kubectl_runs.sources.files import SnapshotError, load_snapshot

FLEET = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"
AT = "2025-11-20T12:00:00Z"
MEMORY = 1 << 30  # the child's address space: an endless stream must be refused within it


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(args: list[str], *, stdin=None, shell: str | None = None, env: dict[str, str] | None = None,
        timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    command = [sys.executable, "-m", "kubectl_runs", *args]
    if shell is not None:  # a generator piped into the command: `yes | kubectl runs … --snapshot -`
        import shlex

        command = ["sh", "-c", f"{shell} | exec {shlex.join(command)}"]
    started = time.monotonic()
    done = subprocess.run(command, stdin=stdin, capture_output=True, timeout=timeout, preexec_fn=_limit_memory,
                          env={**os.environ, **(env or {})})
    return done, time.monotonic() - started


def one_line(done: subprocess.CompletedProcess, expected: str, code: int = 1) -> None:
    err = done.stderr.decode()
    assert done.returncode == code, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert expected in err, err
    assert "internal error" not in err and "Traceback" not in err
    assert done.stdout == b""


# --- what it is ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused_unread(device):
    done, took = run(["budgets", "usage", "--snapshot", device])
    one_line(done, f"{device}: a character device, not a snapshot file")
    assert took < 20


def test_a_fifo_without_a_writer_is_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "fleet.yaml"
    os.mkfifo(fifo)
    done, took = run(["budgets", "usage", "--snapshot", str(fifo)], timeout=30)
    one_line(done, f"{fifo}: a named pipe (FIFO) that nothing is writing into")
    assert took < 20


def test_a_fifo_in_a_directory_is_refused_too(tmp_path):
    os.mkfifo(tmp_path / "a.yaml")
    done, _ = run(["budgets", "usage", "--snapshot", str(tmp_path)], timeout=30)
    one_line(done, f"{tmp_path / 'a.yaml'}: a named pipe (FIFO) that nothing is writing into")


def test_a_fifo_with_a_writer_is_read(tmp_path):
    fifo = tmp_path / "fleet.yaml"
    os.mkfifo(fifo)
    command = [sys.executable, "-m", "kubectl_runs", "budgets", "usage", "--snapshot", str(fifo), "--at", AT,
               "-o", "json"]
    reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)  # the reader is waiting for a writer
    with open(fifo, "wb") as writer:
        writer.write(FLEET.read_bytes())
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    assert b'"envelopes"' in out


# --- the first bytes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("generator", "expected"), [
    ("yes", "<stdin>: not a snapshot: it begins with 'y'"),
    ("cat /dev/zero", "<stdin>: binary data (a NUL byte at offset 0), not a snapshot"),
    ("cat /dev/urandom", "<stdin>: "),
    ("(echo 'apiVersion: v1'; cat /dev/zero)", "<stdin>: binary data (a NUL byte at offset 15)"),
    ("yes '<html><body>'", "<stdin>: not a snapshot: it begins with '<html><body>'"),
])
def test_an_endless_generator_on_stdin_is_refused_fast(generator, expected):
    done, took = run(["budgets", "usage", "--snapshot", "-"], shell=generator)
    one_line(done, expected)
    assert took < 20


def test_an_endless_stream_of_text_stops_at_the_limit():
    done, took = run(["leases", "audit", "--snapshot", "-"], shell="yes 'apiVersion: v1'",
                     env={snapshot_input.MAX_BYTES_ENV: "8Mi"})
    one_line(done, "<stdin>: goes on for more than the 8 MiB a snapshot may be (set KUBECTL_RUNS_MAX_SNAPSHOT_BYTES")
    assert took < 20


def test_an_endless_stream_under_the_default_limit_runs_out_of_memory_in_one_line():
    done, _ = run(["budgets", "usage", "--snapshot", "-"], shell="yes 'apiVersion: v1'", timeout=120)
    one_line(done, "<stdin>: not enough memory to read it")


def test_a_file_larger_than_the_limit_is_refused_by_its_size(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:  # sparse: 3 GiB that take no disk
        handle.truncate(3 << 30)
    done, took = run(["budgets", "usage", "--snapshot", str(big)])
    one_line(done, f"{big}: is 3 GiB, more than the 2 GiB a snapshot may be")
    assert took < 20


def test_a_large_file_of_nul_bytes_is_refused_from_its_first_bytes(tmp_path):
    zeros = tmp_path / "zeros.yaml"
    with open(zeros, "wb") as handle:
        handle.truncate(1 << 30)
    done, took = run(["budgets", "usage", "--snapshot", str(zeros)])
    one_line(done, f"{zeros}: binary data (a NUL byte at offset 0)")
    assert took < 20


@pytest.mark.parametrize(("data", "expected"), [
    (b"\x89PNG\r\n\x1a\n\0\0", "binary data (a NUL byte at offset 8)"),
    (b"PK\x03\x04\x14\0", "binary data (a NUL byte at offset 5)"),
    (b"\x1f\x8b\x08\0", "binary data (a NUL byte at offset 3)"),
    (b"hello world\n", "not a snapshot: it begins with 'hello world'"),
    (b"# a comment\n\n---\nplain text\n", "not a snapshot: it begins with 'plain text'"),
    (b'"just a string"\n', "not a snapshot: it begins with '\"just a string\"'"),
])
def test_what_is_not_a_snapshot_is_refused_in_one_line(tmp_path, data, expected):
    path = tmp_path / "x.yaml"
    path.write_bytes(data)
    with pytest.raises(SnapshotError) as refused:
        load_snapshot([str(path)])
    assert refused.value.message == f"{path}: {expected}" or refused.value.message.startswith(f"{path}: {expected}")


@pytest.mark.parametrize("data", [
    b"", b"\n\n", b"# nothing\n", b"---\n", b"apiVersion: v1\nkind: List\nitems: []\n",
    b"--- {apiVersion: v1, kind: List, items: []}\n", b'{"apiVersion": "v1", "kind": "List", "items": []}',
    b"%YAML 1.2\n---\napiVersion: v1\nkind: List\nitems: []\n", b"\xef\xbb\xbfapiVersion: v1\nkind: List\nitems: []\n",
    "apiVersion: v1\nkind: List\nitems: []\n".encode("utf-16"),
])
def test_what_a_snapshot_may_begin_with_is_read(tmp_path, data):
    path = tmp_path / "ok.yaml"
    path.write_bytes(data)
    assert load_snapshot([str(path)]).budgets == ()
    assert load_snapshot(["-"], io.BytesIO(data)).budgets == ()


def test_stdin_is_bounded_as_a_file_is(monkeypatch):
    monkeypatch.setenv(snapshot_input.MAX_BYTES_ENV, "1Ki")
    with pytest.raises(SnapshotError, match=r"^<stdin>: goes on for more than the 1 KiB"):
        load_snapshot(["-"], io.BytesIO(b"apiVersion: v1\n" + b"# padding\n" * 200))


@pytest.mark.parametrize(("text", "expected"), [("500Mi", 500 << 20), ("4Gi", 4 << 30), ("1000", 1000),
                                                ("2G", 2 * 10**9), ("", snapshot_input.DEFAULT_MAX_BYTES)])
def test_the_limit_is_read_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv(snapshot_input.MAX_BYTES_ENV, text)
    assert snapshot_input.max_bytes() == expected


@pytest.mark.parametrize("text", ["0", "-1", "lots", "1.5Gi", "1e9"])
def test_a_limit_that_is_not_a_size_is_a_usage_error(monkeypatch, text):
    monkeypatch.setenv(snapshot_input.MAX_BYTES_ENV, text)
    with pytest.raises(UserError) as refused:
        snapshot_input.max_bytes()
    assert refused.value.code == 2 and snapshot_input.MAX_BYTES_ENV in refused.value.message
