"""A real Kubernetes API server (kube-apiserver + etcd) for integration tests.

Pure standard library; certificates and keys are made with the ``openssl`` command.
The binaries are built from the Go module beside this file by ``scripts/controlplane.sh build``
(cached outside the repository, so only the first run on a machine pays for the build).

Typical use, e.g. in a session-scoped pytest fixture::

    import sys, pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).parent / "controlplane"))  # from tests/conftest.py
    from controlplane import ControlPlane, skip_reason

    @pytest.fixture(scope="session")
    def controlplane():
        reason = skip_reason()
        if reason:
            pytest.skip(reason)
        with ControlPlane() as cp:
            yield cp

    def test_something(controlplane):
        env = controlplane.env_for("reader")          # os.environ + KUBECONFIG
        subprocess.run(["kubectl", "get", "pods"], env=env, check=True)

Users (static bearer tokens, ``--token-auth-file``): ``admin`` (group ``system:masters``),
``reader`` and ``nobody`` (no groups beyond ``system:authenticated``; no RBAC bindings,
so they are forbidden everything until a test binds a role to them).
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["DEFAULT_USERS", "ControlPlane", "ControlPlaneError", "build_binaries", "skip_reason"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "controlplane.sh"

#: user name -> groups. ``system:authenticated`` is added by the API server to every user.
DEFAULT_USERS: Mapping[str, Sequence[str]] = {
    "admin": ("system:masters",),
    "reader": (),
    "nobody": (),
}

REQUIRE_ENV = "KUBECTL_RUNS_REQUIRE_CONTROLPLANE"
BIN_DIR_ENV = "KUBECTL_RUNS_CP_BIN_DIR"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached."""


def skip_reason() -> str | None:
    """Why tests needing a control plane should be skipped here, or None if they must run.

    They are skipped only when ``go`` is not on PATH *and* KUBECTL_RUNS_REQUIRE_CONTROLPLANE is
    unset (CI sets it, so there a missing Go is a failure, not a skip).
    """
    if os.environ.get(REQUIRE_ENV):
        return None
    if os.environ.get(BIN_DIR_ENV):
        return None
    if shutil.which("go") is None:
        return f"'go' is not on PATH (needed to build kube-apiserver/etcd); set {REQUIRE_ENV}=1 to make this an error"
    return None


def build_binaries(timeout: float = 3600) -> Path:
    """Run ``scripts/controlplane.sh build`` and return the directory holding kube-apiserver and etcd.

    ``$KUBECTL_RUNS_CP_BIN_DIR``, if set, is used as is instead (no build).
    """
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        return Path(override)
    if not BUILD_SCRIPT.exists():
        raise ControlPlaneError(f"build script not found: {BUILD_SCRIPT}")
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "build"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise ControlPlaneError(f"{BUILD_SCRIPT} build did not finish in {timeout:.0f}s") from exc
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-40:])
        raise ControlPlaneError(f"{BUILD_SCRIPT} build failed (exit {proc.returncode}):\n{tail}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ControlPlaneError(f"{BUILD_SCRIPT} build printed no directory")
    return Path(lines[-1])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass


_DIR_PREFIX = "kubectl-runs-cp-"


def _remove_stale_dirs(base_dir) -> None:
    """Remove directories left by test processes that were killed (SIGKILL skips atexit)."""
    base = Path(base_dir if base_dir is not None else tempfile.gettempdir())
    try:
        candidates = list(base.glob(_DIR_PREFIX + "*"))
    except OSError:
        return
    for d in candidates:
        try:
            pid = int((d / "owner.pid").read_text().strip())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            pass  # no/unreadable owner file, or owner alive (or not ours): leave it


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


class ControlPlane:
    """kube-apiserver + etcd on free loopback ports, with a throwaway data/cert directory.

    Arguments (all optional, keyword-only except ``bin_dir``):
      bin_dir           directory with ``kube-apiserver`` and ``etcd``; default: built/cached by
                        scripts/controlplane.sh (or $KUBECTL_RUNS_CP_BIN_DIR).
      users             user name -> groups; must contain ``admin``; default DEFAULT_USERS.
      start_timeout     seconds to wait for etcd and then for /readyz (default 120).
      stop_timeout      seconds between SIGTERM and SIGKILL in stop() (default 10).
      base_dir          parent of the temporary directory (default: tempfile's default).
      keep_dir          keep the temporary directory after stop() (for debugging; default False,
                        also kept when $KUBECTL_RUNS_CP_KEEP is set).
      apiserver_args    extra ``--flag=value`` strings appended to kube-apiserver's command line.
      etcd_args         extra ``--flag=value`` strings appended to etcd's command line.

    After start(): ``server`` (https://127.0.0.1:PORT), ``ca_file``, ``admin_kubeconfig``,
    ``kubeconfig`` (every user's context in one file, current context admin), ``etcd_url``,
    ``dir`` (the temporary directory), ``apiserver_log``, ``etcd_log``, ``tokens`` (user -> token),
    ``users``, ``startup_seconds`` (start of etcd to API server ready), ``build_seconds`` (time
    spent in scripts/controlplane.sh, ~0 when cached).

    The processes get PR_SET_PDEATHSIG=SIGKILL (Linux): they die with the thread that called
    start(), so call it from the main thread (pytest fixtures do). stop() is also registered
    with atexit.
    """

    def __init__(
        self,
        bin_dir: os.PathLike | str | None = None,
        *,
        users: Mapping[str, Sequence[str]] | None = None,
        start_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        base_dir: os.PathLike | str | None = None,
        keep_dir: bool = False,
        apiserver_args: Iterable[str] = (),
        etcd_args: Iterable[str] = (),
    ) -> None:
        self.bin_dir: Path | None = Path(bin_dir) if bin_dir is not None else None
        self.users: dict[str, tuple[str, ...]] = {
            name: tuple(groups) for name, groups in (users if users is not None else DEFAULT_USERS).items()
        }
        if "admin" not in self.users:
            raise ValueError("users must contain 'admin' (it is used to wait for readiness)")
        for name, groups in self.users.items():
            if not name or any(c in name for c in ',"\n') or any(c in g for g in groups for c in ',"\n'):
                raise ValueError(f"unsupported user or group name: {name!r} {groups!r}")
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.base_dir = base_dir
        self.keep_dir = keep_dir or bool(os.environ.get("KUBECTL_RUNS_CP_KEEP"))
        self.apiserver_args = list(apiserver_args)
        self.etcd_args = list(etcd_args)

        self.dir: Path | None = None
        self.server: str | None = None
        self.ca_file: str | None = None
        self.admin_kubeconfig: str | None = None
        self.kubeconfig: str | None = None
        self.etcd_url: str | None = None
        self.apiserver_log: Path | None = None
        self.etcd_log: Path | None = None
        self.tokens: dict[str, str] = {}
        self.startup_seconds: float | None = None
        self.build_seconds: float | None = None
        self._ctx: ssl.SSLContext | None = None
        self._etcd: subprocess.Popen | None = None
        self._apiserver: subprocess.Popen | None = None
        self._kubeconfigs: dict[str, str] = {}
        self._lock = threading.Lock()
        self._atexit_registered = False

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._apiserver is not None and self._apiserver.poll() is None

    def start(self) -> ControlPlane:
        """Build (if needed) and start etcd and kube-apiserver; return self once /readyz is ok."""
        with self._lock:
            if self._apiserver is not None:
                raise ControlPlaneError("already started")
            t0 = time.monotonic()
            if self.bin_dir is None:
                self.bin_dir = build_binaries()
            for name in ("kube-apiserver", "etcd"):
                if not os.access(self.bin_dir / name, os.X_OK):
                    raise ControlPlaneError(f"{self.bin_dir / name} is missing or not executable")
            if not shutil.which("openssl"):
                raise ControlPlaneError("'openssl' is not on PATH (needed to make the test certificates)")
            if not self._atexit_registered:
                atexit.register(self.stop)
                self._atexit_registered = True
            t_started = time.monotonic()
            _remove_stale_dirs(self.base_dir)
            self.dir = Path(tempfile.mkdtemp(prefix=_DIR_PREFIX, dir=self.base_dir))
            (self.dir / "owner.pid").write_text(f"{os.getpid()}\n")
            try:
                self._make_certs()
                self._write_tokens()
                last_error: Exception | None = None
                for _attempt in range(3):  # a free port can be taken between probe and bind
                    try:
                        self._start_etcd()
                        self._start_apiserver()
                        break
                    except _PortInUse as exc:
                        last_error = exc
                        self._kill_processes()
                else:
                    raise ControlPlaneError(f"could not bind free ports: {last_error}")
                self._write_kubeconfigs()
            except BaseException:
                self._kill_processes()
                self._remove_dir()
                raise
            self.startup_seconds = time.monotonic() - t_started
            self.build_seconds = t_started - t0
            return self

    def stop(self) -> None:
        """Stop kube-apiserver then etcd (SIGTERM, SIGKILL after stop_timeout); remove the directory."""
        with self._lock:
            self._kill_processes()
            self._remove_dir()

    # ----------------------------------------------------------------- helpers for tests

    def kubeconfig_for(self, user: str) -> str:
        """Path of a kubeconfig for ``user``: context named ``user``, namespace ``default``."""
        if user not in self._kubeconfigs:
            if self.dir is None:
                raise ControlPlaneError("not started")
            raise KeyError(f"unknown user {user!r}; known: {sorted(self._kubeconfigs)}")
        return self._kubeconfigs[user]

    def token_for(self, user: str) -> str:
        return self.tokens[user]

    def env_for(self, user: str = "admin", base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A copy of ``base`` (default os.environ) with KUBECONFIG pointing at ``user``'s kubeconfig."""
        env = dict(os.environ if base is None else base)
        env["KUBECONFIG"] = self.kubeconfig_for(user)
        return env

    def kubectl(
        self,
        *args: str,
        user: str = "admin",
        check: bool = True,
        input: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess:
        """Run ``kubectl --kubeconfig <user's> ARGS``; text output captured."""
        kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
        return subprocess.run(
            [kubectl, "--kubeconfig", self.kubeconfig_for(user), *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def request(
        self, method: str, path: str, body=None, user: str = "admin", content_type: str = "application/json"
    ) -> tuple[int, object]:
        """A raw HTTPS request to the API server; returns (status, decoded JSON or text)."""
        if self.server is None:
            raise ControlPlaneError("not started")
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            data = data.encode() if isinstance(data, str) else data
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.tokens[user]}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def logs(self, lines: int = 40, etcd_lines: int | None = None) -> str:
        """The last lines of the kube-apiserver log, then of the etcd log (for error messages)."""
        out = []
        for name, path, n in (
            ("kube-apiserver", self.apiserver_log, lines),
            ("etcd", self.etcd_log, lines if etcd_lines is None else etcd_lines),
        ):
            if path is not None and n > 0:
                out.append(f"--- {name} log ({path}), last {n} lines ---\n{_tail(path, n)}")
        return "\n".join(out)

    # ----------------------------------------------------------------- internals

    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(
            ["openssl", *args], cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if proc.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stdout}")

    def _make_certs(self) -> None:
        assert self.dir is not None
        d = self.dir
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        # CA
        self._openssl(
            "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
            "-subj", "/CN=kubectl-runs-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip
        # serving certificate for 127.0.0.1 / localhost
        (d / "apiserver.ext").write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        )
        self._openssl(
            "req",
            "-new",
            *ec,
            "-keyout",
            "apiserver.key",
            "-out",
            "apiserver.csr",
            "-subj",
            "/CN=kube-apiserver",
        )
        self._openssl(
            "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "apiserver.crt", "-days", "3650", "-sha256", "-extfile", "apiserver.ext",
        )  # fmt: skip
        # service-account signing key pair
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key")
        self._openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        for key in ("ca.key", "apiserver.key", "sa.key"):
            os.chmod(d / key, 0o600)
        self.ca_file = str(d / "ca.crt")

    def _write_tokens(self) -> None:
        assert self.dir is not None
        rows = []
        for i, (user, groups) in enumerate(self.users.items()):
            token = secrets.token_hex(24)
            self.tokens[user] = token
            row = f"{token},{user},uid-{i}-{user}"
            if groups:
                row += ',"' + ",".join(groups) + '"'
            rows.append(row)
        path = self.dir / "tokens.csv"
        path.write_text("\n".join(rows) + "\n")
        os.chmod(path, 0o600)

    def _popen(self, argv: list[str], log: Path) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,  # Ctrl-C in the terminal goes to pytest, which then stops us
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    def _start_etcd(self) -> None:
        assert self.dir is not None and self.bin_dir is not None
        client_port, peer_port = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        data_dir = self.dir / "etcd-data"
        shutil.rmtree(data_dir, ignore_errors=True)
        self.etcd_log = self.dir / "etcd.log"
        argv = [
            str(self.bin_dir / "etcd"),
            "--name=default",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync=true",
            *self.etcd_args,
        ]
        self._etcd = self._popen(argv, self.etcd_log)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._etcd.poll() is not None:
                self._raise_exited("etcd", self._etcd, self.etcd_log)
            try:
                with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"etcd not healthy after {self.start_timeout:.0f}s\n{self.logs(0, etcd_lines=40)}"
                )
            time.sleep(0.1)

    def _start_apiserver(self) -> None:
        assert self.dir is not None and self.bin_dir is not None
        d = self.dir
        port = _free_port()
        self.server = f"https://127.0.0.1:{port}"
        self.apiserver_log = d / "kube-apiserver.log"
        (d / "apiserver-certs").mkdir(exist_ok=True)
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={d / 'apiserver-certs'}",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The endpoints reconciler would write 127.0.0.1 into Endpoints/kubernetes, which
            # validation rejects (loopback): an error in the log every 10s and no use in tests.
            "--endpoint-reconciler-type=none",
            f"--secure-port={port}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            *self.apiserver_args,
        ]
        self._apiserver = self._popen(argv, self.apiserver_log)
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        ready = False
        while True:
            if self._apiserver.poll() is not None:
                self._raise_exited("kube-apiserver", self._apiserver, self.apiserver_log)
            try:
                if not ready:
                    status, body = self.request("GET", "/readyz")
                    ready = status == 200
                else:
                    # /readyz can pass a moment before the "default" namespace exists.
                    status, body = self.request("GET", "/api/v1/namespaces/default")
                    if status == 200:
                        return
                last = f"HTTP {status}: {str(body)[:2000]}"
            except (OSError, ssl.SSLError) as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver at {self.server} not ready after {self.start_timeout:.0f}s "
                    f"(last answer: {last})\n{self.logs(60, etcd_lines=10)}"
                )
            time.sleep(0.2)

    def _raise_exited(self, name: str, proc: subprocess.Popen, log: Path) -> None:
        text = _tail(log, 40)
        if "address already in use" in text:
            raise _PortInUse(f"{name}: address already in use")
        raise ControlPlaneError(
            f"{name} exited with code {proc.returncode} during start-up\n--- {log}, last 40 lines ---\n{text}"
        )

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ctx is None:
            self._ctx = ssl.create_default_context(cafile=self.ca_file)
        return self._ctx

    def _write_kubeconfigs(self) -> None:
        assert self.dir is not None and self.ca_file is not None
        ca_data = base64.b64encode(Path(self.ca_file).read_bytes()).decode()
        cluster = {
            "name": "controlplane",
            "cluster": {"server": self.server, "certificate-authority-data": ca_data},
        }

        def config(users: list[str], current: str) -> dict:
            return {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": u, "user": {"token": self.tokens[u]}} for u in users],
                "contexts": [
                    {"name": u, "context": {"cluster": "controlplane", "user": u, "namespace": "default"}}
                    for u in users
                ],
                "current-context": current,
                "preferences": {},
            }

        def write(name: str, cfg: dict) -> str:
            path = self.dir / name
            path.write_text(json.dumps(cfg, indent=2) + "\n")  # JSON is valid YAML for every loader
            os.chmod(path, 0o600)
            return str(path)

        for user in self.users:
            self._kubeconfigs[user] = write(f"kubeconfig-{user}.yaml", config([user], user))
        self.kubeconfig = write("kubeconfig.yaml", config(list(self.users), "admin"))
        self.admin_kubeconfig = self._kubeconfigs["admin"]

    def _kill_processes(self) -> None:
        for attr in ("_apiserver", "_etcd"):  # API server first: it talks to etcd until it goes
            proc: subprocess.Popen | None = getattr(self, attr)
            if proc is None:
                continue
            if proc.poll() is None:
                try:
                    proc.terminate()
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
                except ProcessLookupError:
                    pass
            setattr(self, attr, None)

    def _remove_dir(self) -> None:
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        self._kubeconfigs = {}
        self._ctx = None


class _PortInUse(ControlPlaneError):
    pass
