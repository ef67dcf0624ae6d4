"""The configured kubernetes ApiClient: kubeconfig (several files allowed) with its context, else in-cluster
config; exec credential plugins run with a time limit and fail in one line naming the plugin. The reports call
``connect``, which uses ``lean_client`` (no import of the kubernetes client) whenever the kubeconfig needs
nothing of the client, and this ApiClient otherwise; the reconciler uses ``api_client`` itself.

The client's own exec support waits for a plugin for ever, and when a plugin is missing or fails it logs the
error on the root logger (Python's ``ERROR:root:…`` on stderr, which also switches on urllib3's retry warnings)
and goes on without credentials, so the user sees a 401 that never names the plugin. Here the kubeconfig loader
runs plugins through ``run_exec_plugin`` instead: the same protocol (``KUBERNETES_EXEC_INFO``, stdin and stderr
passed through when interactive), a limit (``EXEC_TIMEOUT``, or ``--request-timeout``), and an error that
names the plugin, the kubeconfig user and what went wrong (not found, exit status, signal, bad output).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from typing import Any

from ..errors import UserError
from . import Source

# A credential plugin (aws eks get-token, gke-gcloud-auth-plugin, kubelogin) answers in a second or two, or
# asks for a login when it may prompt (stdout a terminal, as the client decides). Longer than this and it is
# not coming back.
EXEC_TIMEOUT = 60.0
INTERACTIVE_EXEC_TIMEOUT = 300.0


class ClusterError(UserError):
    """The cluster refused or could not answer, or cannot be reached with this kubeconfig; one line."""

    forbidden = False


class CredentialError(ClusterError):
    """A kubeconfig's credential plugin could not give credentials; one line naming it."""


def connect(source: Source) -> Any:
    """What the reports talk to the cluster with: ``lean_client.LeanApi`` when the kubeconfig needs nothing
    of the kubernetes client (most do; ``import kubernetes`` alone costs more than a small report), else the
    client's ApiClient (``api_client``). Both are set up and checked the same way."""
    _paths, files, docs = _kubeconfig_files(source)
    if docs:
        from .lean_client import lean_api
        from .transport import retry_class

        api = lean_api(source, docs, retry_class()(total=1))
        if api is not None:
            _check_server(api.configuration.host, f"kubeconfig {', '.join(files)}")
            _quiet_insecure_warnings()
            return api
    return api_client(source)


def _kubeconfig_files(source: Source) -> tuple[str, list[str], dict[str, dict]]:
    """The kubeconfig paths asked for, each file named, and the decoded files that exist (by path). Checked
    first: the client's own errors on a bad file name no file (TypeError, …)."""
    from .kubeconfig import read_kubeconfig

    paths = source.kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    files = [p for p in paths.split(os.pathsep) if p]
    docs: dict[str, dict] = {}
    for path in files:
        try:
            docs[path] = read_kubeconfig(path)
        except FileNotFoundError:
            continue
    return paths, files, docs


def _check_server(host: str, where: str) -> None:
    from .names import shown
    from .transport import server_problem

    problem = server_problem(host)
    if problem:  # urllib3 would print a warning, or fail later in its own words
        raise ClusterError(f"{where}: the cluster's server address {shown(host)} is not usable: "
                           f"{problem} (write it as https://HOST:PORT)")


def _quiet_insecure_warnings() -> None:
    # kubectl says nothing about insecure-skip-tls-verify on every request; neither do we (and a multi-line
    # Python warning on stderr would break the one-line contract).
    import urllib3

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


def api_client(source: Source) -> Any:
    """A configured ApiClient: kubeconfig (several files allowed) with context, else in-cluster config."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    paths, files, docs = _kubeconfig_files(source)
    have_file = bool(docs)
    named = ", ".join(files)
    try:
        if have_file:
            _load_kube_config(source, configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            raise ClusterError(
                f"no kubeconfig at {paths} and not running inside a cluster: "
                "set KUBECONFIG or --kubeconfig, or read a file with --snapshot"
            )
    except UserError:
        raise
    except ConfigException as exc:
        raise ClusterError(f"kubeconfig {named}: {_one_line(str(exc))}") from None
    except Exception as exc:  # what the checks above missed: still one line naming the file, no Python type
        raise ClusterError(f"kubeconfig {named}: not a valid kubeconfig: {_one_line(str(exc))}") from None
    from .transport import retry_class

    _check_server(configuration.host, f"kubeconfig {named}" if have_file else "in-cluster config")
    configuration.retries = retry_class()(total=1)
    _quiet_insecure_warnings()
    return client.ApiClient(configuration)


def _load_kube_config(source: Source, configuration: Any) -> None:
    """``kubernetes.config.load_kube_config``, with the loader that runs exec plugins as ``run_exec_plugin``."""
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION, KubeConfigMerger

    merged = KubeConfigMerger(source.kubeconfig or KUBE_CONFIG_DEFAULT_LOCATION)
    if merged.config is None:
        raise ConfigException("Invalid kube-config file. No configuration found.")
    loader = _loader_class()(config_dict=merged.config, config_base_path=None, active_context=source.context,
                             config_persister=merged.save_changes)
    loader.exec_timeout = source.request_timeout  # None: the default limit; 0: none
    loader.load_and_set(configuration)


def _loader_class() -> type:
    from kubernetes.config.kube_config import FileOrData, KubeConfigLoader

    class Loader(KubeConfigLoader):
        exec_timeout: float | None = None

        def _load_from_exec_plugin(self):  # type: ignore[no-untyped-def]
            """As the client's, but a plugin that fails raises CredentialError (the client logs and goes on)."""
            if not self._user or "exec" not in self._user:
                return None
            user = str(self._current_context["context"].safe_get("user") or "")
            base_path = self._get_base_path(self._cluster.path)
            cluster = self._cluster if self._user["exec"].safe_get("provideClusterInfo") else None
            status = run_exec_plugin(self._user["exec"].value, base_path, user, self.exec_timeout,
                                     cluster=cluster.value if cluster is not None else None)
            if "token" in status:
                self.token = f"Bearer {status['token']}"
            else:
                self.cert_file = FileOrData(status, None, data_key_name="clientCertificateData",
                                            file_base_path=base_path, base64_file_content=False,
                                            temp_file_path=self._temp_file_path).as_file()
                self.key_file = FileOrData(status, None, data_key_name="clientKeyData", file_base_path=base_path,
                                           base64_file_content=False, temp_file_path=self._temp_file_path).as_file()
            if "expirationTimestamp" in status:
                from kubernetes.config.dateutil import parse_rfc3339

                self.expiry = parse_rfc3339(status["expirationTimestamp"])
            return True

    return Loader


def run_exec_plugin(exec_config: dict, cwd: str | None, user: str, timeout: float | None, *,
                    cluster: dict | None = None) -> dict:
    """Run a kubeconfig user's exec credential plugin and return its ExecCredential ``status`` (a token, or a
    client certificate and key). ``timeout``: None for the default limit, 0 for none. Every failure is a
    CredentialError naming the plugin's command and the kubeconfig user."""
    command = str(exec_config.get("command") or "")
    api_version = str(exec_config.get("apiVersion") or "")
    who = f"the credential plugin {command!r} of kubeconfig user {user!r}" if user else \
        f"the credential plugin {command!r}"
    if not command or not api_version:
        raise CredentialError(f"{who}: the kubeconfig's exec needs command and apiVersion")
    interactive = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    limit, limit_words = _exec_limit(timeout, interactive)
    info: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": interactive}}
    if cluster is not None:
        info["spec"]["cluster"] = cluster
    env = dict(os.environ)
    env.update({str(e.get("name")): str(e.get("value")) for e in exec_config.get("env") or [] if isinstance(e, dict)})
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    args = [command, *[str(a) for a in exec_config.get("args") or []]]
    try:
        process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=None if interactive else subprocess.PIPE,
            stdin=None if interactive else subprocess.DEVNULL, cwd=cwd or None, env=env,
            start_new_session=not interactive,  # its children are ended with it (a prompt needs the terminal)
        )
    except FileNotFoundError:
        hint = _one_line(str(exec_config.get("installHint") or ""))
        raise CredentialError(f"{who}: executable not found"
                              + (f" ({hint[:300]})" if hint else " (install it, or fix the kubeconfig user's exec.command)")
                              ) from None
    except OSError as exc:
        raise CredentialError(f"{who}: cannot run it: {exc.strerror or exc}") from None
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _end(process, group=not interactive)
        raise CredentialError(f"{who} did not finish within {limit_words}") from None
    code = process.returncode
    if code != 0:
        if code > 0:
            ended = f"exited with status {code}"
        else:
            try:
                ended = f"was ended by signal {signal.Signals(-code).name}"
            except ValueError:
                ended = f"was ended by signal {-code}"
        last = _last_line(err)
        raise CredentialError(f"{who} {ended}" + (f": {last}" if last else ""))
    return _credential_status(out, api_version, who)


def _exec_limit(timeout: float | None, interactive: bool) -> tuple[float | None, str]:
    if timeout is None:
        seconds = INTERACTIVE_EXEC_TIMEOUT if interactive else EXEC_TIMEOUT
        return seconds, f"{seconds:g}s (the default limit of a credential plugin; --request-timeout sets another)"
    if timeout == 0:
        return None, "no limit"
    return timeout, f"{timeout:g}s (--request-timeout)"


def _credential_status(out: bytes, api_version: str, who: str) -> dict:
    """The ``status`` of the ExecCredential a plugin printed, checked as client-go checks it."""
    bad = f"{who} printed no valid ExecCredential"
    try:
        data = json.loads(out.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        said = _printable(_one_line(out.decode("utf-8", "replace")))[:80]
        raise CredentialError(f"{bad}: " + (f"not JSON: {said!r}" if said else "it printed nothing")) from None
    if not isinstance(data, dict) or not isinstance(data.get("status"), dict):
        raise CredentialError(f"{bad}: no status object")
    if data.get("apiVersion") != api_version:
        raise CredentialError(f"{bad}: its apiVersion {data.get('apiVersion')!r} is not the kubeconfig's "
                              f"{api_version!r}")
    status = data["status"]
    if isinstance(status.get("token"), str) and status["token"]:
        return status
    if isinstance(status.get("clientCertificateData"), str) and isinstance(status.get("clientKeyData"), str):
        return status
    if status.get("clientCertificateData"):
        raise CredentialError(f"{bad}: status.clientCertificateData without status.clientKeyData")
    raise CredentialError(f"{bad}: status has neither token nor clientCertificateData")


def _end(process: subprocess.Popen, *, group: bool) -> None:
    """Kill a plugin that overran (with its children when it has its own session) and collect it."""
    with contextlib.suppress(OSError):
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
        process.communicate(timeout=2)


def _last_line(err: bytes | None) -> str:
    """The last non-empty line a plugin wrote on stderr (its error), on one line and short."""
    if not err:
        return ""
    lines = [line.strip() for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return _printable(lines[-1])[:300] if lines else ""


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def quiet_client_logging() -> None:
    """Keep the kubernetes client's and urllib3's logging and warnings off stderr (reports print one line per
    failure). Not called by ``reconcile``, whose log is its own."""
    import warnings

    for module in ("urllib3", "kubernetes"):
        warnings.filterwarnings("ignore", module=module)
    for name in ("kubernetes", "urllib3"):
        logger = logging.getLogger(name)
        logger.propagate = False
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
    root = logging.getLogger()
    if not any(isinstance(f, _LibraryRecords) for f in root.filters):
        root.addFilter(_LibraryRecords())


class _LibraryRecords(logging.Filter):
    """Drops records the kubernetes client logs on the root logger (``logging.error(…)`` in its kubeconfig
    loader)."""

    def filter(self, record: logging.LogRecord) -> bool:
        path = record.pathname.replace(os.sep, "/")
        return "/kubernetes/" not in path and "/urllib3/" not in path
