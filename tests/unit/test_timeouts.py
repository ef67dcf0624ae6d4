"""Live commands never hang: a server that accepts TCP and never answers (a real local socket, not a mock of the
API server: the silence is the failure under test) ends every command with one line naming the server and the
limit that fired, exit code 1 — with ``--request-timeout``, and by default without it (connect 10 s, read 60 s:
``sources.cluster.CONNECT_TIMEOUT`` / ``READ_TIMEOUT``; the default-firing tests shorten those constants so that
they run in a second)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time

import pytest
from local_servers import Server

from kubectl_runs.cli.main import main
from kubectl_runs.sources import Source
from kubectl_runs.sources import cluster as cluster_module
from kubectl_runs.sources.cluster import Cluster


class SilentServer(Server):
    """Accepts every connection and never reads or writes a byte (until closed)."""

    def serve(self, conn: socket.socket) -> None:
        self.closed.wait()


class FullBacklog:
    """A listening socket whose accept queue is full and never drained: a further connect is never completed
    (Linux drops the SYN), which is what a firewalled or overloaded endpoint looks like."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(0)
        self.port = self.socket.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):  # completes in the kernel's queue, or never
                filler.connect(("127.0.0.1", self.port))
            self.fillers.append(filler)
        time.sleep(0.2)

    def close(self) -> None:
        for filler in self.fillers:
            filler.close()
        self.socket.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture
def full_backlog():
    server = FullBacklog()
    yield server
    server.close()


def kubeconfig(tmp_path, server_url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server_url}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u, namespace: team}}]\n"
        "current-context: x\n"
    )
    return str(path)


def run(capsys, args: list[str]) -> tuple[int, str, str, float]:
    began = time.monotonic()
    code = main(args)
    elapsed = time.monotonic() - began
    out, err = capsys.readouterr()
    return code, out, err, elapsed


def test_the_defaults_are_what_the_client_is_given(tmp_path):
    """No flag: (connect 10 s, read 60 s); ``--request-timeout 2.5s``: one limit of 2.5 s; ``0``: no limit."""
    config = kubeconfig(tmp_path, "http://127.0.0.1:1")
    assert Cluster(Source(kubeconfig=config)).request_timeout == (10.0, 60.0)
    assert (cluster_module.CONNECT_TIMEOUT, cluster_module.READ_TIMEOUT) == (10.0, 60.0)
    assert Cluster(Source(kubeconfig=config, request_timeout=2.5)).request_timeout == 2.5
    assert Cluster(Source(kubeconfig=config, request_timeout=0.0)).request_timeout is None


@pytest.mark.parametrize("words", [["budgets", "usage"], ["leases", "audit"], ["plan", "r"], ["explain", "r"],
                                   ["seeds", "verify"], ["snapshot", "save"]])
def test_request_timeout_ends_every_live_command(tmp_path, capsys, silent, words):
    url = f"http://127.0.0.1:{silent.port}"
    code, out, err, elapsed = run(capsys, [*words, "--kubeconfig", kubeconfig(tmp_path, url), "--request-timeout", "1"])
    assert (code, out, err) == (1, "", f"error: the server at {url} did not answer within 1s (--request-timeout)\n")
    assert elapsed < 5  # one attempt: a timed-out request is not retried


def test_the_default_read_timeout_fires(tmp_path, capsys, silent, monkeypatch):
    monkeypatch.setattr(cluster_module, "READ_TIMEOUT", 0.5)
    url = f"http://127.0.0.1:{silent.port}"
    code, out, err, elapsed = run(capsys, ["budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, url)])
    assert (code, out) == (1, "")
    assert err == (f"error: the server at {url} did not answer within 0.5s (the default read timeout; "
                   "--request-timeout sets another)\n")
    assert elapsed < 4


def test_the_default_connect_timeout_fires(tmp_path, capsys, full_backlog, monkeypatch):
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT", 0.5)
    url = f"http://127.0.0.1:{full_backlog.port}"
    code, out, err, elapsed = run(capsys, ["leases", "audit", "--kubeconfig", kubeconfig(tmp_path, url)])
    assert (code, out) == (1, "")
    assert err == (f"error: the server at {url} did not accept a connection within 0.5s (the default connect "
                   "timeout; --request-timeout sets another)\n")
    assert elapsed < 4


def test_a_tls_handshake_that_never_ends_is_the_connect_timeout(tmp_path, capsys, silent, monkeypatch):
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT", 0.5)
    url = f"https://127.0.0.1:{silent.port}"
    code, out, err, elapsed = run(capsys, ["budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, url)])
    assert (code, out) == (1, "")
    assert err == (f"error: the server at {url} accepted a connection but did not complete the TLS handshake "
                   "within 0.5s (the default connect timeout; --request-timeout sets another)\n")
    assert elapsed < 4


def test_through_the_console_script(tmp_path, silent):
    """The installed command, as a user runs it: one line on stderr, exit 1, nothing on stdout."""
    url = f"http://127.0.0.1:{silent.port}"
    done = subprocess.run(
        [sys.executable, "-m", "kubectl_runs", "budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, url),
         "--request-timeout", "1s"],
        capture_output=True, text=True, timeout=30,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"error: the server at {url} did not answer within 1s (--request-timeout)\n"


def test_a_refused_connection_is_not_a_timeout(tmp_path, capsys):
    """urllib3's NewConnectionError is a subclass of its ConnectTimeoutError: a refused connection must still
    say refused, at once."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    url = f"http://127.0.0.1:{port}"
    code, out, err, elapsed = run(capsys, ["budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, url)])
    assert (code, out) == (1, "")
    assert err == (f"error: unable to connect to the server at {url}: connection refused (is the cluster up, and is "
                   "this the right kubeconfig context?)\n")
    assert elapsed < 4


class TricklingServer:
    """Answers every request with HTTP headers at once, then a body that never completes: one byte every 0.1 s
    of a Content-Length it never reaches (each read of the client gets a byte long before its read timeout)."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)  # the request
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{")
                while not self.closed.wait(0.1):
                    conn.sendall(b" ")
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.socket.close()


@pytest.fixture
def trickling():
    server = TricklingServer()
    yield server
    server.close()


def test_request_timeout_is_a_deadline_for_the_whole_answer(tmp_path, capsys, trickling):
    """A body that keeps coming a byte at a time never trips a per-read timeout; --request-timeout still ends
    the request, counted from its start."""
    url = f"http://127.0.0.1:{trickling.port}"
    code, out, err, elapsed = run(capsys, ["budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, url),
                                           "--request-timeout", "1"])
    assert (code, out) == (1, "")
    assert err == f"error: the server at {url} did not finish its answer within 1s (--request-timeout)\n"
    assert 1 <= elapsed < 4


def test_the_default_deadline_fires(tmp_path, capsys, trickling, monkeypatch):
    monkeypatch.setattr(cluster_module, "DEADLINE", 1.0)
    url = f"http://127.0.0.1:{trickling.port}"
    code, out, err, elapsed = run(capsys, ["leases", "audit", "--kubeconfig", kubeconfig(tmp_path, url)])
    assert (code, out) == (1, "")
    assert err == (f"error: the server at {url} did not finish its answer within 1s (the default deadline of a "
                   "request; --request-timeout sets another)\n")
    assert 1 <= elapsed < 4


def test_the_default_deadline_is_ten_minutes(tmp_path):
    config = kubeconfig(tmp_path, "http://127.0.0.1:1")
    assert Cluster(Source(kubeconfig=config)).deadline == cluster_module.DEADLINE == 600.0
    assert Cluster(Source(kubeconfig=config, request_timeout=2.5)).deadline == 2.5
    assert Cluster(Source(kubeconfig=config, request_timeout=0.0)).deadline is None


def test_a_delete_has_the_same_deadline(tmp_path, trickling):
    """``leases archive --prune`` deletes one lease at a time: a DELETE whose answer never completes ends at the
    deadline like a list does, and says which limit fired."""
    url = f"http://127.0.0.1:{trickling.port}"
    cluster = Cluster(Source(kubeconfig=kubeconfig(tmp_path, url), request_timeout=1.0))
    began = time.monotonic()
    with pytest.raises(cluster_module.ClusterError) as caught:
        cluster.delete("/apis/jobtree.dev/v1/namespaces/a/gpuleases/l1", {"kind": "DeleteOptions"})
    elapsed = time.monotonic() - began
    assert str(caught.value) == f"the server at {url} did not finish its answer within 1s (--request-timeout)"
    assert 1 <= elapsed < 4
