"""What went wrong on the way to the API server, in one line: the transport failures of urllib3 (under the
kubernetes client) mapped to kubectl's words, each naming the server (and the proxy, when one was in the way)
and saying what to check.

urllib3 wraps the real cause several layers deep (``MaxRetryError.reason`` -> ``SSLError`` ->
``ssl.SSLCertVerificationError``, or ``ProtocolError("Connection aborted.", ConnectionResetError(…))``), through
``reason``, ``args`` and ``__cause__``; and ``ssl.SSLError.reason`` is a *string*. ``causes`` walks every link
that is an exception, and nothing else. Used by the reports (``sources.cluster``) and the reconciler
(``reconciler.cache``), so both say the same thing for the same failure.
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

# OpenSSL's X509_V_ERR_* codes (ssl.SSLCertVerificationError.verify_code) and what kubectl (Go's crypto/x509)
# says for them.
_UNKNOWN_AUTHORITY = {2, 18, 19, 20, 21, 27}
_EXPIRED = {9, 10}
_NAME_MISMATCH = {62, 64}

UNKNOWN_AUTHORITY_HINT = (
    "the kubeconfig's certificate-authority-data does not match this server: a wrong context, or a cluster "
    "recreated since the kubeconfig was written? Get a fresh kubeconfig"
)


def server_problem(server: str) -> str | None:
    """What makes ``server`` (a kubeconfig cluster's address) unusable before any connection, else None."""
    if not server:
        return "it is empty"
    if any(not ch.isprintable() or ch.isspace() for ch in server):
        return "it contains a space or a control character"
    try:
        parts = urlsplit(server)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"
        return str(exc)
    if parts.scheme not in ("https", "http"):
        return ("it has no https:// (or http://) in front" if not parts.scheme or "://" not in server
                else f"the scheme {parts.scheme}:// is neither https:// nor http://")
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 is no port"
    return None


def causes(exc: BaseException, limit: int = 24) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps (``reason``, exception ``args``, ``__cause__``, ``__context__``),
    breadth first, each once. Strings and other values on those attributes are skipped."""
    queue: list[BaseException] = [exc]
    seen: set[int] = set()
    while queue and len(seen) < limit:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        links = [getattr(current, "reason", None), *getattr(current, "args", ()), current.__cause__,
                 current.__context__]
        queue.extend(link for link in links if isinstance(link, BaseException))


def first(exc: BaseException, kind: type | tuple[type, ...]) -> BaseException | None:
    return next((c for c in causes(exc) if isinstance(c, kind)), None)


_TIMEOUT_IN_TEXT = re.compile(r"\((connect|read) timeout=([0-9.]+)\)")


def timeout_of(exc: BaseException) -> tuple[str, float | None] | None:
    """("connect" | "read", the limit in seconds if urllib3 said it) when a transport error is a timeout.
    A TLS handshake that never ends is a read timeout of the connect limit (urllib3's words)."""
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ProxyError, ReadTimeoutError

    if first(exc, ProxyError) is not None:
        return None  # said as the proxy's failure
    for current in causes(exc):
        if isinstance(current, NewConnectionError):  # a subclass of ConnectTimeoutError, for history's sake
            return None
        if isinstance(current, (ConnectTimeoutError, ReadTimeoutError, TimeoutError, socket.timeout)):
            match = _TIMEOUT_IN_TEXT.search(str(current))
            phase = "connect" if isinstance(current, ConnectTimeoutError) else "read"
            return phase, float(match.group(2)) if match else None
    if "timed out" in str(exc).lower():  # e.g. an SSLError wrapping a handshake that timed out
        match = _TIMEOUT_IN_TEXT.search(str(exc))
        return (match.group(1), float(match.group(2))) if match else ("read", None)
    return None


def describe(exc: BaseException, server: str, proxy: str | None = None, proxy_from_env: bool = True, *,
             tls_server_name: str | None = None) -> str:
    """One line for a transport failure that is not a timeout: ``unable to connect to the server at …: …``."""
    from urllib3.exceptions import NameResolutionError, ProxyError

    where = f"unable to connect to the server at {server}"
    proxy_error = first(exc, ProxyError)
    if proxy_error is not None:
        return f"{where}: {_proxy_problem(proxy_error, server, proxy, proxy_from_env)}"
    verify = first(exc, ssl.SSLCertVerificationError)
    if verify is not None:
        return f"{where}: {_verify_problem(verify, server, tls_server_name)}"
    tls = first(exc, ssl.SSLError)
    if tls is not None:
        return f"{where}: {_tls_problem(tls, server)}"
    if first(exc, (NameResolutionError, socket.gaierror)) is not None:
        return f"{where}: {_lookup_problem(exc, server)}"
    if first(exc, UnicodeError) is not None or "Failed to parse" in str(exc):  # e.g. a host label of 300 letters
        return f"{where}: not a usable address: {_innermost_text(exc)} (check the server of the kubeconfig's cluster)"
    refused = first(exc, ConnectionRefusedError)
    if refused is not None or "Connection refused" in str(exc):
        return f"{where}: connection refused (is the cluster up, and is this the right kubeconfig context?)"
    scheme_hint = " (the address says http://: does the server want https://?)" if server.startswith("http://") else ""
    if _closed_without_answer(exc):  # before resets: http.client's RemoteDisconnected is a ConnectionResetError
        return f"the server at {server} closed the connection without answering{scheme_hint}"
    if first(exc, ConnectionResetError) is not None:
        hint = scheme_hint or (" (is this the API server's address, or does a firewall or load balancer in between "
                               "cut the connection?)")
        return f"{where}: connection reset by peer{hint}"
    os_error = next((c for c in causes(exc) if isinstance(c, OSError) and c.errno and c.strerror), None)
    if os_error is not None:
        return f"{where}: {_os_words(os_error)}"
    return f"{where}: {_innermost_text(exc)}"


def _verify_problem(error: BaseException, server: str, tls_server_name: str | None) -> str:
    code = getattr(error, "verify_code", None)
    message = str(getattr(error, "verify_message", "") or "")
    host = urlsplit(server).hostname or server
    if code in _NAME_MISMATCH or "mismatch" in message:
        if tls_server_name:  # the name checked is the kubeconfig's, not the address's
            return (f"x509: certificate is not valid for {tls_server_name} (the tls-server-name of the kubeconfig's "
                    "cluster is not among the names in the server's certificate)")
        return (f"x509: certificate is not valid for {host} (the server's certificate names other hosts: use "
                "the address it was made for, or set tls-server-name in the kubeconfig's cluster)")
    if code in _EXPIRED or "expired" in message or "not yet valid" in message:
        return ("x509: certificate has expired or is not yet valid (check this machine's clock; else the "
                "cluster's certificates need renewing)")
    if code in _UNKNOWN_AUTHORITY or "issuer" in message or "self-signed" in message or "self signed" in message:
        return f"x509: certificate signed by unknown authority ({UNKNOWN_AUTHORITY_HINT})"
    return f"x509: {_one_line(message) or 'certificate verify failed'} ({UNKNOWN_AUTHORITY_HINT})"


def _tls_problem(error: BaseException, server: str) -> str:
    reason = str(getattr(error, "reason", "") or "")
    text = _one_line(str(error))
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG") or (
            "wrong version number" in text):
        return ("TLS handshake failed: the server did not answer in TLS (is this the API server's HTTPS port, or "
                "should the address be http://?)")
    if "ALERT" in reason:
        alert = reason.split("ALERT_", 1)[-1].lower().replace("_", " ")
        hint = ("check the client certificate (client-certificate-data) of the kubeconfig user"
                if "certificate" in alert else "check the kubeconfig's cluster and user")
        return f"the server refused the TLS handshake: {alert} ({hint})"
    if isinstance(error, ssl.SSLEOFError) or "EOF" in reason or "EOF" in text:
        return ("the server closed the connection during the TLS handshake (does it want a client certificate "
                "the kubeconfig user lacks, or is this not the API server's address?)")
    return f"TLS handshake failed: {reason.lower().replace('_', ' ') if reason else text}"


def _lookup_problem(exc: BaseException, server: str) -> str:
    host = urlsplit(server).hostname or server
    gai = first(exc, socket.gaierror)
    if gai is not None and getattr(gai, "errno", None) == socket.EAI_AGAIN:
        return f"lookup {host}: temporary failure in name resolution (is the network or DNS up?)"
    return f"lookup {host}: no such host (check the server address of the kubeconfig's cluster)"


def _proxy_problem(error: BaseException, server: str, proxy: str | None, from_env: bool) -> str:
    scheme = urlsplit(server).scheme or "https"
    setting = f"{scheme.upper()}_PROXY in the environment" if from_env else "proxy-url in the kubeconfig's cluster"
    name = f"the proxy {proxy}" if proxy else "the proxy"
    fix = f"check {setting}" + (" and NO_PROXY" if from_env else "")
    tunnels = [c for c in causes(error) if "Tunnel connection failed" in str(c)]
    if tunnels:  # the deepest says it plainly: "Tunnel connection failed: 403 Forbidden"
        answer = _one_line(str(tunnels[-1])).split("Tunnel connection failed:", 1)[-1].strip(" '\")(")
        return f"{name} refused to open a tunnel to it ({answer}; {fix})"
    if first(error, ConnectionRefusedError) is not None:
        return f"{name} refused the connection (nothing listens there; {fix})"
    if first(error, socket.gaierror) is not None:
        host = urlsplit(proxy or "").hostname or "the proxy's host"
        return f"{name}: lookup {host}: no such host ({fix})"
    if first(error, ConnectionResetError) is not None:
        return f"{name} reset the connection ({fix})"
    if first(error, ssl.SSLError) is not None:
        return f"{name}: TLS with the proxy failed ({fix})"
    if first(error, TimeoutError) is not None or "timed out" in str(error).lower():
        return f"{name} did not answer in time ({fix})"
    return f"{name} failed: {_innermost_text(error)} ({fix})"


def _closed_without_answer(exc: BaseException) -> bool:
    from http.client import RemoteDisconnected

    return first(exc, (RemoteDisconnected, ConnectionAbortedError, BrokenPipeError)) is not None


def _os_words(error: OSError) -> str:
    words = {errno.ENETUNREACH: "network is unreachable", errno.EHOSTUNREACH: "no route to host"}
    return words.get(error.errno or 0, str(error.strerror).lower()) + " (check the network, a VPN, or the address)"


def _innermost_text(exc: BaseException) -> str:
    """The text of the deepest wrapped exception that says something (urllib3's outer ones repeat the URL)."""
    texts = [_one_line(str(c)) for c in causes(exc)]
    texts = [t for t in texts if t]
    return (texts[-1] if texts else type(exc).__name__)[:300]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def retry_class() -> type:
    """A urllib3 Retry that retries once (a pooled connection the server dropped), but not a timeout: a
    request that timed out is given up on at once, so the limit said in the error is the time waited."""
    import urllib3
    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError, ReadTimeoutError

    class RetryButNotTimeouts(urllib3.Retry):
        def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):  # type: ignore[no-untyped-def]
            timed_out = isinstance(error, (ConnectTimeoutError, ReadTimeoutError))
            if timed_out and not isinstance(error, NewConnectionError):  # (refused: a subclass, not a timeout)
                raise MaxRetryError(_pool, url, error) from error  # type: ignore[arg-type]
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return RetryButNotTimeouts
