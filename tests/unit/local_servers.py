"""Real local servers for the connection tests: a TLS server with certificates made by ``openssl`` (a CA, a
second unrelated CA, certificates for the right names, for other names, and expired), servers that stall,
trickle, reset or close, and proxies that refuse. Nothing here stands in for the API server's logic: each
server *is* the failure under test, on a real socket."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import subprocess
import threading
from pathlib import Path

EMPTY_LIST = b'{"kind":"List","apiVersion":"v1","metadata":{},"items":[]}'


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


class Pki:
    """Certificates in ``directory``: ``ca.crt`` signs ``server.crt`` (localhost, 127.0.0.1), ``other.crt``
    (only kubernetes.example) and ``expired.crt`` (localhost, 127.0.0.1, valid for one day in 2020);
    ``stranger.crt`` is another CA that signed none of them."""

    def __init__(self, directory: Path):
        self.dir = directory
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
        _openssl(directory, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                 "-subj", "/CN=test-ca")
        _openssl(directory, "req", "-x509", *ec, "-keyout", "stranger.key", "-out", "stranger.crt", "-days", "2",
                 "-subj", "/CN=stranger-ca")
        _openssl(directory, "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=apiserver")
        (directory / "right.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        (directory / "other.ext").write_text("subjectAltName=DNS:kubernetes.example\n")
        for name, ext in (("server", "right.ext"), ("other", "other.ext")):
            _openssl(directory, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                     "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", ext)
        (directory / "db").mkdir()
        (directory / "db" / "index.txt").write_text("")
        (directory / "db" / "serial").write_text("01\n")
        (directory / "ca.cnf").write_text(
            "[ca]\ndefault_ca = d\n[d]\ndatabase = db/index.txt\nserial = db/serial\nnew_certs_dir = db\n"
            "default_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n")
        _openssl(directory, "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key", "-in",
                 "server.csr", "-out", "expired.crt", "-startdate", "20200101000000Z", "-enddate",
                 "20200102000000Z", "-extfile", "right.ext", "-notext")

    def path(self, name: str) -> str:
        return str(self.dir / name)


class Server:
    """A listening socket on 127.0.0.1 that hands each connection to ``serve`` in a thread."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(32)
        self.port = self.socket.getsockname()[1]
        self.closed = threading.Event()
        self.requests: list[bytes] = []
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve_quietly, args=(conn,), daemon=True).start()

    def _serve_quietly(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            self.serve(conn)

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.closed.set()
        self.socket.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.close()


class TlsServer(Server):
    """HTTPS with ``cert``: ``answer`` every request with an empty list, ``stall`` (complete the handshake, read
    the request, never answer), or ``trickle`` (headers, then one byte of the body every 0.2 s, never all)."""

    def __init__(self, pki: Pki, cert: str = "server.crt", mode: str = "answer", *, client_ca: bool = False):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki.path(cert), pki.path("server.key"))
        if client_ca:  # a server that wants a client certificate signed by the test CA
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(pki.path("ca.crt"))
        self.mode = mode
        super().__init__()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def serve(self, conn: socket.socket) -> None:
        tls = self.context.wrap_socket(conn, server_side=True)
        self.requests.append(tls.recv(65536))
        if self.mode == "answer":
            while self.requests[-1]:  # one answer per request (GETs carry no body), until the client closes
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                            % (len(EMPTY_LIST), EMPTY_LIST))
                self.requests.append(tls.recv(65536))
        elif self.mode == "stall":
            self.closed.wait()
        else:
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            while not self.closed.wait(0.2):
                tls.sendall(b" ")


class ResetServer(Server):
    """Accepts, then resets the connection (RST: SO_LINGER 0), as a firewall or a crashed proxy does."""

    def serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()


class HangUpServer(Server):
    """Reads the request and closes the connection without a word (a TLS handshake is not even begun)."""

    def serve(self, conn: socket.socket) -> None:
        self.requests.append(conn.recv(65536))
        conn.close()


class PlainHttpServer(Server):
    """Plain HTTP: answers anything with 400 (what a client speaking TLS to it gets back)."""

    def serve(self, conn: socket.socket) -> None:
        self.requests.append(conn.recv(65536))
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()


class RefusingProxy(Server):
    """An HTTP proxy that answers every CONNECT with 403 Forbidden (a proxy whose policy refuses the host)."""

    def serve(self, conn: socket.socket) -> None:
        self.requests.append(conn.recv(65536))
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()


def unused_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def write_kubeconfig(path: Path, server: str, *, ca: str | None = None, user: str = "{token: t}",
                     cluster_extra: str = "") -> str:
    """A kubeconfig of one context, ``x``, for ``server`` with ``ca`` (else insecure-skip-tls-verify)."""
    trust = f"certificate-authority: '{ca}'" if ca else "insecure-skip-tls-verify: true"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}', {trust}{cluster_extra}}}}}]\n"
        f"users: [{{name: alice, user: {user}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: alice, namespace: team}}]\n"
        "current-context: x\n"
    )
    return str(path)
