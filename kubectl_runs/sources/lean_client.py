"""The reports' connection without the kubernetes client (issue 28): the kubeconfig read as the client's own
loader reads it, and requests sent with urllib3 exactly as the client's REST layer sends them.

``import kubernetes`` costs more than everything else a small report does (the package imports its config
loader, which imports oauthlib, requests-oauthlib, requests and pydantic, whether a kubeconfig needs them or
not). For the kubeconfigs most people have — a token or token file, a client certificate, an exec credential
plugin (run by ``kubeclient.run_exec_plugin``, as on the client path), a user name and password, the
cluster's CA, ``insecure-skip-tls-verify``, ``tls-server-name`` — none of that is needed. ``lean_api``
builds an object with the parts of ``kubernetes.client.ApiClient`` that ``sources.cluster`` uses
(``configuration``, ``param_serialize``, ``call_api``) from the same settings the client's
``KubeConfigLoader`` would produce, and urllib3 pool arguments the client's ``RESTClientObject`` would pass.

Anything else goes to the client, unchanged: an ``auth-provider`` (OIDC, gcp, azure: refreshed tokens written
back to the kubeconfig), a proxy (``proxy-url``, or any ``*_proxy`` variable in the environment: the client
resolves them, with NO_PROXY and SOCKS), in-cluster config, and every kubeconfig the client would reject or
treat in its own way (a missing context, cluster or user, an empty value, a missing file): ``lean_api``
returns None and the caller uses ``kubeclient.api_client``, so the error is the client's own words.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import ssl
import tempfile
from typing import Any
from urllib.parse import quote

from .. import __version__


class NeedsClient(Exception):
    """This kubeconfig needs the kubernetes client's own loader."""


class _NeverRaised(Exception):
    """The lean transport has no ApiException: non-2xx answers are responses, failures urllib3's errors."""

    status: int | None = None
    body: Any = None


class LeanConfiguration:
    """The attributes of ``kubernetes.client.Configuration`` that the reports read."""

    def __init__(self, host: str, verify_ssl: bool, tls_server_name: str | None):
        self.host = host
        self.verify_ssl = verify_ssl
        self.tls_server_name = tls_server_name
        self.proxy: str | None = None  # a proxy sends the kubeconfig to the client
        self._proxy_from_env = True


class LeanResponse:
    """As the client's ``RESTResponse``: ``status``, ``reason``, ``data`` once ``read()``, and the urllib3
    response as ``response`` (its connection is shut at a request's deadline)."""

    def __init__(self, response: Any):
        self.response = response
        self.status = response.status
        self.reason = response.reason
        self.data: bytes | None = None

    def read(self) -> bytes:
        if self.data is None:
            self.data = self.response.data
        return self.data


class LeanApi:
    """What ``sources.cluster`` uses of a kubernetes ``ApiClient``, sent by urllib3 directly."""

    api_error: type[Exception] = _NeverRaised

    def __init__(self, configuration: LeanConfiguration, authorization: str | None, pool_args: dict):
        import urllib3

        self.configuration = configuration
        self.authorization = authorization
        self.pool_args = pool_args
        self.pool_manager = urllib3.PoolManager(**pool_args)

    def param_serialize(self, method: str, resource_path: str, query_params: list | None = None,
                        header_params: dict | None = None, body: Any = None, auth_settings: Any = None
                        ) -> tuple[str, str, dict, Any, None]:
        url = self.configuration.host + resource_path
        if query_params:
            url += "?" + "&".join(f"{key}={quote(str(value).lower() if isinstance(value, bool) else str(value))}"
                                  for key, value in query_params)
        headers = {"User-Agent": f"kubectl-runs/{__version__}", **(header_params or {})}
        if auth_settings and self.authorization:
            headers["authorization"] = self.authorization
        return method, url, headers, body, None

    def call_api(self, method: str, url: str, header_params: dict | None = None, body: Any = None,
                 post_params: Any = None, _request_timeout: Any = None) -> LeanResponse:
        import urllib3

        timeout = None
        if isinstance(_request_timeout, (int, float)) and _request_timeout:
            timeout = urllib3.Timeout(total=_request_timeout)
        elif isinstance(_request_timeout, tuple) and len(_request_timeout) == 2:
            timeout = urllib3.Timeout(connect=_request_timeout[0], read=_request_timeout[1])
        data = None if body is None else json.dumps(body)
        response = self.pool_manager.request(method, url, body=data, headers=header_params or {}, timeout=timeout,
                                             preload_content=False)
        return LeanResponse(response)


# --- the kubeconfig, as the client's KubeConfigMerger and KubeConfigLoader read it -------------------------------


class _Node:
    """A mapping of the kubeconfig and the file it came from (the client's ConfigNode): a key present with
    an empty (null) value is something only the client should answer."""

    def __init__(self, value: dict, path: str):
        self.value = value
        self.path = path

    def __contains__(self, key: str) -> bool:
        return key in self.value

    def __len__(self) -> int:
        return len(self.value)

    def __getitem__(self, key: str) -> Any:
        value = self.value.get(key)
        if value is None:
            raise NeedsClient(key)
        return value

    def node(self, key: str) -> _Node:
        value = self[key]
        if not isinstance(value, dict):
            raise NeedsClient(key)
        return _Node(value, self.path)


def _merged(spec: str, docs: dict[str, dict]) -> tuple[dict, dict[str, list[_Node]]]:
    """KubeConfigMerger: the files of ``spec`` (``:``-separated, ``~`` expanded, missing ones skipped) in order;
    the first cluster, context or user of a name wins; the last file that has current-context sets it."""
    top: dict | None = None
    named: dict[str, list[_Node]] = {"clusters": [], "contexts": [], "users": []}
    for part in spec.split(":"):
        if not part:
            continue
        path = os.path.expanduser(part)
        if not os.path.exists(path):
            continue
        doc = docs.get(path)
        if not doc:  # not read by the caller, or empty (the client: "file is empty")
            raise NeedsClient(path)
        if top is None:
            top = dict(doc)
        for item, entries in named.items():
            for entry in doc.get(item) or []:
                if not any(e.value.get("name") == entry.get("name") for e in entries):
                    entries.append(_Node(entry, path))
        if "current-context" in doc:
            top["current-context"] = doc["current-context"]
    if top is None:
        raise NeedsClient(spec)
    return top, named


def _named(entries: list[_Node], name: Any) -> _Node | None:
    for entry in entries:
        if entry.value.get("name") == name:
            return entry
    return None


def _base_path(node: _Node) -> str:
    return os.path.abspath(os.path.dirname(node.path))


_TEMP_FILES: dict[bytes, str] = {}


def _remove_temp_files() -> None:
    for name in _TEMP_FILES.values():
        with contextlib.suppress(OSError):
            os.remove(name)
    _TEMP_FILES.clear()


def _temp_file(content: bytes) -> str:
    """A private file holding ``content``, removed at exit (the client writes *-data the same way)."""
    name = _TEMP_FILES.get(content)
    if name is not None and os.path.isfile(name):
        return name
    if not _TEMP_FILES:
        atexit.register(_remove_temp_files)
    fd, name = tempfile.mkstemp(prefix="kubectl-runs-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    _TEMP_FILES[content] = name
    return name


def _data_or_file(node: _Node, file_key: str, data_key: str, base: str) -> tuple[Any, str | None]:
    """The client's FileOrData choice: inline data wins; else the file's path, relative to the kubeconfig."""
    if data_key in node:
        return node[data_key], None
    if file_key in node:
        return None, os.path.normpath(os.path.join(base, str(node[file_key])))
    return None, None


def _as_file(obj: _Node | dict | None, file_key: str, data_key: str | None = None, *, base: str = "",
             base64_data: bool = True) -> str | None:
    """FileOrData(...).as_file(): the data (base64-decoded) in a temp file, else the file's path."""
    data_key = data_key or f"{file_key}-data"
    if not obj:
        return None
    node = obj if isinstance(obj, _Node) else _Node(obj, "")
    data, file = _data_or_file(node, file_key, data_key, base)
    if not file and data:
        raw = data.encode() if isinstance(data, str) else data
        try:
            file = _temp_file(base64.standard_b64decode(raw) if base64_data else raw)
        except ValueError:  # the client's binascii.Error: its own words
            raise NeedsClient(data_key) from None
    if file and not os.path.isfile(file):
        raise NeedsClient(file)  # the client: "File does not exist"
    return file


def _as_data(node: _Node, file_key: str, data_key: str, *, base: str) -> Any:
    """FileOrData(..., base64_file_content=False).as_data(): the data, else the file's content as it is."""
    data, file = _data_or_file(node, file_key, data_key, base)
    if not data and file:
        try:
            with open(file) as handle:
                data = handle.read()
        except (OSError, UnicodeDecodeError):
            raise NeedsClient(file) from None
    return data


def _proxy_in_environment() -> bool:
    """urllib's getproxies() on this platform: any non-empty ``*_proxy`` variable but no_proxy."""
    return any(name[-6:].lower() == "_proxy" and name.lower() != "no_proxy" and value
               for name, value in os.environ.items())


def lean_settings(source: Any, docs: dict[str, dict]) -> dict:
    """What the client's KubeConfigLoader would set on a Configuration, for kubeconfigs that need nothing of
    the client: ``host``, ``authorization`` (the header, or None), ``ssl_ca_cert``, ``cert_file``,
    ``key_file``, ``verify_ssl``, ``tls_server_name``. Raises NeedsClient otherwise. ``docs``: the decoded
    files by path (``kubeconfig.read_kubeconfig``)."""
    if _proxy_in_environment():
        raise NeedsClient("a proxy in the environment")
    spec = source.kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config")
    top, named = _merged(spec, docs)
    context_name = source.context if source.context is not None else top.get("current-context")
    if context_name is None:
        raise NeedsClient("current-context")
    context_entry = _named(named["contexts"], context_name)
    if context_entry is None:
        raise NeedsClient(f"context {context_name}")
    context = context_entry.node("context")
    user: _Node | None = None
    if context.value.get("user") and named["users"]:
        user_entry = _named(named["users"], context.value["user"])
        if user_entry is not None:
            user = user_entry.node("user")
    cluster_entry = _named(named["clusters"], context["cluster"])
    if cluster_entry is None:
        raise NeedsClient("cluster")
    cluster = cluster_entry.node("cluster")
    if user is None or "auth-provider" in user or "proxy-url" in cluster:
        raise NeedsClient("user")  # (no user: the client fails on a https server in its own way)

    settings: dict[str, Any] = {"authorization": None, "cert_file": None, "key_file": None}
    from_exec = False  # a plugin's certificate (even none) replaces the user's
    # _load_authentication: auth-provider (the client's), token or tokenFile, exec plugin, user name and password
    if user.value:
        token = _as_data(user, "tokenFile", "token", base=_base_path(user))
        if token:
            settings["authorization"] = f"Bearer {token}"
        elif "exec" in user:
            from .kubeclient import run_exec_plugin

            exec_config = user["exec"]
            if not isinstance(exec_config, dict):
                raise NeedsClient("exec")
            base = _base_path(cluster)
            status = run_exec_plugin(exec_config, base, str(context.value.get("user") or ""),
                                     source.request_timeout,
                                     cluster=cluster.value if exec_config.get("provideClusterInfo") else None)
            if "token" in status:
                settings["authorization"] = f"Bearer {status['token']}"
            else:
                from_exec = True
                settings["cert_file"] = _as_file(status, "", "clientCertificateData", base=base, base64_data=False)
                settings["key_file"] = _as_file(status, "", "clientKeyData", base=base, base64_data=False)
        elif "username" in user and "password" in user:
            import urllib3

            settings["authorization"] = urllib3.util.make_headers(
                basic_auth=f"{user['username']}:{user['password']}").get("authorization")
    # _load_cluster_info
    server = cluster["server"]
    if not isinstance(server, str):
        raise NeedsClient("server")
    host = server.rstrip("/")
    settings.update(host=host, ssl_ca_cert=None, verify_ssl=True, tls_server_name=None)
    if host.startswith("https"):
        base = _base_path(cluster)
        settings["ssl_ca_cert"] = _as_file(cluster, "certificate-authority", base=base)
        if not from_exec:
            settings["cert_file"] = _as_file(user, "client-certificate", base=base)
            settings["key_file"] = _as_file(user, "client-key", base=base)
    if "insecure-skip-tls-verify" in cluster:
        settings["verify_ssl"] = not cluster["insecure-skip-tls-verify"]
    if "tls-server-name" in cluster:
        settings["tls_server_name"] = cluster["tls-server-name"]
    return settings


def lean_api(source: Any, docs: dict[str, dict], retries: Any) -> LeanApi | None:
    """The lean ApiClient for this kubeconfig, else None (it needs the client: ``kubeclient.api_client``)."""
    from ..errors import UserError

    try:
        settings = lean_settings(source, docs)
    except UserError:  # a credential plugin that failed: its one line
        raise
    except Exception:  # NeedsClient, or a shape the client answers in its own words
        return None
    configuration = LeanConfiguration(settings["host"], settings["verify_ssl"], settings["tls_server_name"])
    # RESTClientObject's pool arguments, for a Configuration without proxy, socket options or keep-alive
    pool_args: dict[str, Any] = {
        "cert_reqs": ssl.CERT_REQUIRED if settings["verify_ssl"] else ssl.CERT_NONE,
        "ca_certs": settings["ssl_ca_cert"],
        "cert_file": settings["cert_file"],
        "key_file": settings["key_file"],
        "ca_cert_data": None,
        "retries": retries,
        "maxsize": (os.cpu_count() or 1) * 5,
    }
    if settings["tls_server_name"]:
        pool_args["server_hostname"] = settings["tls_server_name"]
    return LeanApi(configuration, settings["authorization"], pool_args)
