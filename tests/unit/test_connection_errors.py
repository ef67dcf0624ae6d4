"""Every way the road to the API server can fail ends a command with one line naming the server (and the proxy
in the way) and what to check, exit code 1: no traceback, no internal error, no library logging, no hang.

Each failure is a real local server made here (tests/unit/local_servers.py): a TLS server whose certificate a
kubeconfig's CA did not sign, one made for other names, an expired one, a server wanting a client certificate,
plain HTTP under an https:// address, a socket that resets, one that hangs up, an unused port, a ``.invalid``
host, proxies that are not there or refuse the tunnel, and servers that stall or trickle after the handshake.
The commands run as users run them (``python -m kubectl_runs``), so stderr is exactly what a user sees."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from local_servers import (
    HangUpServer,
    Pki,
    PlainHttpServer,
    RefusingProxy,
    ResetServer,
    TlsServer,
    unused_port,
    write_kubeconfig,
)

from kubectl_runs.sources import Source
from kubectl_runs.sources import cluster as cluster_module

UNKNOWN_AUTHORITY = ("x509: certificate signed by unknown authority (the kubeconfig's certificate-authority-data "
                     "does not match this server: a wrong context, or a cluster recreated since the kubeconfig "
                     "was written? Get a fresh kubeconfig)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def servers():
    made = []

    def make(server):
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def plugin(*args: str, env: dict | None = None, timeout: float = 30) -> tuple[subprocess.CompletedProcess, float]:
    import os

    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    return done, time.monotonic() - began


def assert_one_line(done: subprocess.CompletedProcess, expected: str) -> None:
    """Exit 1, nothing on stdout, exactly ``error: <expected>`` on stderr."""
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error: {expected}\n")


def test_a_working_tls_server_is_read(tmp_path, pki, servers):
    """The baseline: the right CA and the right name read the (empty) cluster."""
    server = servers(TlsServer(pki))
    done, _ = plugin("budgets", "usage", "--kubeconfig",
                     write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")))
    assert (done.returncode, done.stderr) == (0, "No budgets found.\n")


@pytest.mark.parametrize("words", [["budgets", "usage"], ["leases", "audit"], ["snapshot", "save"],
                                   ["queues", "usage"], ["plan", "r"]])
def test_a_ca_that_did_not_sign_the_server_is_unknown_authority(tmp_path, pki, servers, words):
    """The most common mistake (a recreated cluster, a wrong context): kubectl's words, what to fix. It was
    ``internal error: AttributeError: 'str' object has no attribute '__cause__'``."""
    server = servers(TlsServer(pki))
    done, _ = plugin(*words, "--kubeconfig", write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("stranger.crt")))
    assert_one_line(done, f"unable to connect to the server at {server.url}: {UNKNOWN_AUTHORITY}")


def test_a_self_signed_server_is_unknown_authority_too(tmp_path, pki, servers):
    """A server whose certificate is its own CA (the stranger CA serving itself), against the test CA."""
    server = servers(TlsServer(pki))
    server.context.load_cert_chain(pki.path("stranger.crt"), pki.path("stranger.key"))
    done, _ = plugin("budgets", "usage", "--kubeconfig",
                     write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")))
    assert_one_line(done, f"unable to connect to the server at {server.url}: {UNKNOWN_AUTHORITY}")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"], ids=["ip", "hostname"])
def test_a_certificate_for_other_names(tmp_path, pki, servers, host):
    server = servers(TlsServer(pki, "other.crt"))
    url = f"https://{host}:{server.port}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url, ca=pki.path("ca.crt")))
    assert_one_line(done, f"unable to connect to the server at {url}: x509: certificate is not valid for {host} (the "
                          "server's certificate names other hosts: use the address it was made for, or set "
                          "tls-server-name in the kubeconfig's cluster)")


def test_an_expired_certificate(tmp_path, pki, servers):
    server = servers(TlsServer(pki, "expired.crt"))
    done, _ = plugin("budgets", "usage", "--kubeconfig",
                     write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")))
    assert_one_line(done, f"unable to connect to the server at {server.url}: x509: certificate has expired or is not "
                          "yet valid (check this machine's clock; else the cluster's certificates need renewing)")


def test_a_server_that_wants_a_client_certificate(tmp_path, pki, servers):
    server = servers(TlsServer(pki, client_ca=True))
    done, _ = plugin("budgets", "usage", "--kubeconfig",
                     write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")))
    assert done.returncode == 1 and done.stdout == ""
    line = done.stderr
    assert line.count("\n") == 1 and line.startswith(f"error: unable to connect to the server at {server.url}: ")
    assert "client certificate" in line and "Traceback" not in line and "internal error" not in line


def test_https_to_a_plain_http_server(tmp_path, servers):
    server = servers(PlainHttpServer())
    url = f"https://127.0.0.1:{server.port}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url))
    assert_one_line(done, f"unable to connect to the server at {url}: TLS handshake failed: the server did not answer "
                          "in TLS (is this the API server's HTTPS port, or should the address be http://?)")


def test_http_to_a_tls_server(tmp_path, pki, servers):
    server = servers(TlsServer(pki))
    url = f"http://127.0.0.1:{server.port}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: unable to connect to the server at {url}: ") or \
        done.stderr.startswith(f"error: the server at {url} closed the connection")
    assert done.stderr.endswith("(the address says http://: does the server want https://?)\n")


def test_connection_refused(tmp_path):
    url = f"https://127.0.0.1:{unused_port()}"
    done, elapsed = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url))
    assert_one_line(done, f"unable to connect to the server at {url}: connection refused (is the cluster up, and is "
                          "this the right kubeconfig context?)")
    assert elapsed < 10


def test_an_unknown_host(tmp_path):
    url = "https://no-such-apiserver.invalid:6443"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url))
    assert_one_line(done, f"unable to connect to the server at {url}: lookup no-such-apiserver.invalid: no such host "
                          "(check the server address of the kubeconfig's cluster)")


def test_a_connection_reset(tmp_path, servers):
    server = servers(ResetServer())
    url = f"https://127.0.0.1:{server.port}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url))
    assert_one_line(done, f"unable to connect to the server at {url}: connection reset by peer (is this the API "
                          "server's address, or does a firewall or load balancer in between cut the connection?)")


def test_a_server_that_hangs_up(tmp_path, servers):
    """Plain HTTP, request read, connection closed: no answer at all."""
    server = servers(HangUpServer())
    url = f"http://127.0.0.1:{server.port}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", url))
    assert_one_line(done, f"the server at {url} closed the connection without answering (the address says http://: "
                          "does the server want https://?)")


def test_https_proxy_pointing_at_nothing(tmp_path, pki, servers):
    server = servers(TlsServer(pki))
    proxy = f"http://127.0.0.1:{unused_port()}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")),
                     env={"HTTPS_PROXY": proxy, "NO_PROXY": ""})
    assert_one_line(done, f"unable to connect to the server at {server.url}: the proxy {proxy} refused the connection "
                          "(nothing listens there; check HTTPS_PROXY in the environment and NO_PROXY)")
    assert server.requests == []


def test_a_proxy_that_refuses_the_tunnel(tmp_path, pki, servers):
    server = servers(TlsServer(pki))
    proxy = servers(RefusingProxy())
    proxy_url = f"http://127.0.0.1:{proxy.port}"
    done, _ = plugin("budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")),
                     env={"HTTPS_PROXY": proxy_url, "NO_PROXY": ""})
    assert_one_line(done, f"unable to connect to the server at {server.url}: the proxy {proxy_url} refused to open a "
                          "tunnel to it (403 Forbidden; check HTTPS_PROXY in the environment and NO_PROXY)")
    assert proxy.requests and proxy.requests[0].startswith(b"CONNECT 127.0.0.1:")


def test_a_kubeconfig_proxy_url_that_is_unknown(tmp_path, pki, servers):
    server = servers(TlsServer(pki))
    config = write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt"),
                              cluster_extra=", proxy-url: 'http://no-such-proxy.invalid:3128'")
    done, _ = plugin("budgets", "usage", "--kubeconfig", config)
    assert_one_line(done, f"unable to connect to the server at {server.url}: the proxy http://no-such-proxy.invalid:3128: "
                          "lookup no-such-proxy.invalid: no such host (check proxy-url in the kubeconfig's cluster)")


def test_a_tls_server_that_never_answers(tmp_path, pki, servers):
    """The handshake completes, the request is read, and nothing comes back: --request-timeout ends it."""
    server = servers(TlsServer(pki, mode="stall"))
    done, elapsed = plugin("budgets", "usage", "--request-timeout", "1", "--kubeconfig",
                           write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")))
    assert_one_line(done, f"the server at {server.url} did not answer within 1s (--request-timeout)")
    assert elapsed < 8


def test_a_tls_server_that_trickles(tmp_path, pki, servers):
    """A byte every 0.2 s never trips a per-read limit: the deadline of the whole answer does."""
    server = servers(TlsServer(pki, mode="trickle"))
    done, elapsed = plugin("leases", "audit", "--request-timeout", "2s", "--kubeconfig",
                           write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt")))
    assert_one_line(done, f"the server at {server.url} did not finish its answer within 2s (--request-timeout)")
    assert 2 <= elapsed < 10


def test_the_default_read_timeout_fires_over_tls(tmp_path, pki, servers, capsys, monkeypatch):
    from kubectl_runs.cli.main import main

    monkeypatch.setattr(cluster_module, "READ_TIMEOUT", 0.5)
    server = servers(TlsServer(pki, mode="stall"))
    code = main(["budgets", "usage", "--kubeconfig", write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt"))])
    assert (code, capsys.readouterr().err) == (1, f"error: the server at {server.url} did not answer within 0.5s (the "
                                                  "default read timeout; --request-timeout sets another)\n")


def test_the_reconciler_says_the_same(tmp_path, pki, servers):
    """One mapping for both: the reconciler's request() names the unknown authority as the reports do."""
    from kubectl_runs.reconciler.cache import ApiError, request
    from kubectl_runs.sources.kubeclient import api_client

    server = servers(TlsServer(pki))
    api = api_client(Source(kubeconfig=write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("stranger.crt"))))
    with pytest.raises(ApiError) as caught:
        request(api, "GET", "/api/v1/nodes", timeout=5)
    assert str(caught.value.message) == f"unable to connect to the server at {server.url}: {UNKNOWN_AUTHORITY}"


@pytest.mark.parametrize("server", [
    "https://", "https://:6443", "htps://127.0.0.1:6443", "https://127.0.0.1:99999", "https://[::1",
    "https://exa mple.com", "https://127.0.0.1:6443/%zz", "https://\u00e9xample.invalid", "https://a..b.invalid",
    "https://" + "a" * 300 + ".invalid", "", "127.0.0.1:6443", "https://127.0.0.1:0", "https://127.0.0.1:6443\t",
], ids=["no-host", "port-only", "bad-scheme", "port-too-big", "open-bracket", "space", "bad-escape",
        "unicode-host", "empty-label", "long-label", "empty", "no-scheme", "port-zero", "tab"])
def test_malformed_server_addresses_are_one_line(tmp_path, server):
    """What a hand-edited kubeconfig can hold: each is one line naming the server, exit 1."""
    done, _ = plugin("budgets", "usage", "--request-timeout", "3", "--kubeconfig", write_kubeconfig(tmp_path / "kc", server))
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr and "Warning" not in done.stderr


def test_troubleshooting_quotes_these_lines():
    """The rows of docs/troubleshooting.md say what the CLI says (with example addresses)."""
    from pathlib import Path

    from kubectl_runs.sources import kubeclient, transport

    table = (Path(__file__).parents[2] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    server = "https://10.0.0.1:6443"
    assert f"`error: unable to connect to the server at {server}: {UNKNOWN_AUTHORITY}`" in table
    assert transport.UNKNOWN_AUTHORITY_HINT in UNKNOWN_AUTHORITY
    for words in ("x509: certificate is not valid for 10.0.0.1 (the server's certificate names other hosts: use the "
                  "address it was made for, or set tls-server-name in the kubeconfig's cluster)`",
                  "TLS handshake failed: the server did not answer in TLS (is this the API server's HTTPS port, or "
                  "should the address be http://?)`",
                  "connection reset by peer (is this the API server's address, or does a firewall or load balancer in "
                  "between cut the connection?)`",
                  "refused to open a tunnel to it (403 Forbidden; check HTTPS_PROXY in the environment and NO_PROXY)`",
                  "(the default limit of a credential plugin; --request-timeout sets another)`",
                  "executable not found (install it, or fix the kubeconfig user's exec.command)`"):
        assert words in table, words
    assert kubeclient.EXEC_TIMEOUT == 60.0 and "The limit is 60 s, 300 s when stdout is a terminal" in table


def test_a_tls_server_name_that_the_certificate_does_not_list(tmp_path, pki, servers):
    """With tls-server-name the name checked is that one, and the line says so."""
    server = servers(TlsServer(pki))
    config = write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt"),
                              cluster_extra=", tls-server-name: kubernetes.example")
    done, _ = plugin("budgets", "usage", "--kubeconfig", config)
    assert_one_line(done, f"unable to connect to the server at {server.url}: x509: certificate is not valid for "
                          "kubernetes.example (the tls-server-name of the kubeconfig's cluster is not among the names "
                          "in the server's certificate)")
