"""Exec credential plugins (aws eks get-token, gke-gcloud-auth-plugin, kubelogin …) as real scripts in a
temporary directory: one that never returns ends at a limit, and a missing, failing, killed or confused one is
one line naming the plugin's command and the kubeconfig user, exit 1 — never three lines of Python logging
(``ERROR:root:…``, urllib3's retry warning) followed by a 401 that does not name the plugin."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from local_servers import Pki, TlsServer, write_kubeconfig

from kubectl_runs.sources import kubeclient

TOKEN = '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def server(pki):
    made = TlsServer(pki)
    yield made
    made.close()


def script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def kubeconfig(tmp_path, server, pki, command: str, extra: str = "") -> str:
    user = f"{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: '{command}'{extra}}}}}"
    return write_kubeconfig(tmp_path / "kc", server.url, ca=pki.path("ca.crt"), user=user)


def run(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    return done, time.monotonic() - began


def assert_one_line(done: subprocess.CompletedProcess, expected: str) -> None:
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error: {expected}\n")


def test_a_working_plugin_gives_the_token(tmp_path, server, pki):
    plugin = script(tmp_path, "ok.sh", f"echo '{TOKEN}'\n")
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, plugin))
    assert (done.returncode, done.stderr) == (0, "No budgets found.\n")
    assert b"authorization: bearer t" in b"".join(server.requests).lower()


def test_a_plugin_that_never_returns_ends_at_the_request_timeout(tmp_path, server, pki):
    """It and its children are ended (the sleep it started is gone), and no request was sent."""
    pids = tmp_path / "pids"
    plugin = script(tmp_path, "hang.sh", f"sleep 300 &\necho $! > {pids}\nwait\n")
    done, elapsed = run("budgets", "usage", "--request-timeout", "1", "--kubeconfig",
                        kubeconfig(tmp_path, server, pki, plugin))
    assert_one_line(done, f"the credential plugin {plugin!r} of kubeconfig user 'alice' did not finish within 1s "
                          "(--request-timeout)")
    assert elapsed < 10
    child = int(pids.read_text())
    time.sleep(0.2)
    assert not running(child)
    assert server.requests == []


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for an init that may never reap it)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith("State:") and "Z" in line for line in status)
    except FileNotFoundError:
        return False


def test_the_default_limit(tmp_path, server, pki, capsys, monkeypatch):
    from kubectl_runs.cli.main import main

    monkeypatch.setattr(kubeclient, "EXEC_TIMEOUT", 0.5)
    plugin = script(tmp_path, "hang.sh", "exec sleep 300\n")
    began = time.monotonic()
    code = main(["leases", "audit", "--kubeconfig", kubeconfig(tmp_path, server, pki, plugin)])
    assert time.monotonic() - began < 5
    assert (code, capsys.readouterr().err) == (
        1, f"error: the credential plugin {plugin!r} of kubeconfig user 'alice' did not finish within 0.5s (the default "
           "limit of a credential plugin; --request-timeout sets another)\n")
    assert (kubeclient.EXEC_TIMEOUT, kubeclient.INTERACTIVE_EXEC_TIMEOUT) == (0.5, 300.0)


def test_the_documented_defaults():
    assert (kubeclient.EXEC_TIMEOUT, kubeclient.INTERACTIVE_EXEC_TIMEOUT) == (60.0, 300.0)


def test_a_failing_plugin_says_its_status_and_last_words(tmp_path, server, pki):
    plugin = script(tmp_path, "fail.sh", "echo 'refreshing…' >&2\necho 'error: the SSO session has expired; "
                                         "run aws sso login' >&2\nexit 3\n")
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, plugin))
    assert_one_line(done, f"the credential plugin {plugin!r} of kubeconfig user 'alice' exited with status 3: error: "
                          "the SSO session has expired; run aws sso login")
    assert server.requests == []


def test_a_missing_plugin(tmp_path, server, pki):
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, "gke-gcloud-auth-plugin-nope"))
    assert_one_line(done, "the credential plugin 'gke-gcloud-auth-plugin-nope' of kubeconfig user 'alice': executable "
                          "not found (install it, or fix the kubeconfig user's exec.command)")


def test_a_missing_plugin_with_its_install_hint(tmp_path, server, pki):
    extra = ", installHint: 'Install it with:\n\n    gcloud components install gke-gcloud-auth-plugin'"
    done, _ = run("plan", "r", "--kubeconfig", kubeconfig(tmp_path, server, pki, "nope-plugin", extra))
    assert_one_line(done, "the credential plugin 'nope-plugin' of kubeconfig user 'alice': executable not found (Install "
                          "it with: gcloud components install gke-gcloud-auth-plugin)")


@pytest.mark.parametrize(("body", "expected"), [
    ("kill -9 $$\n", "was ended by signal SIGKILL"),
    ("echo 'hello'\n", "printed no valid ExecCredential: not JSON: 'hello'"),
    ("true\n", "printed no valid ExecCredential: it printed nothing"),
    ("echo '[1,2]'\n", "printed no valid ExecCredential: no status object"),
    ("echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{}}'\n",
     "printed no valid ExecCredential: status has neither token nor clientCertificateData"),
    ("echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":"
     "{\"token\":\"t\"}}'\n",
     "printed no valid ExecCredential: its apiVersion 'client.authentication.k8s.io/v1beta1' is not the kubeconfig's "
     "'client.authentication.k8s.io/v1'"),
    ("echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":"
     "{\"clientCertificateData\":\"x\"}}'\n",
     "printed no valid ExecCredential: status.clientCertificateData without status.clientKeyData"),
    ("printf '\\377\\376'\n", "printed no valid ExecCredential: not JSON: '\ufffd\ufffd'"),
    ("echo 'x' >&2; exit 255\n", "exited with status 255: x"),
], ids=["signal", "not-json", "nothing", "not-an-object", "no-token", "other-version", "cert-without-key",
        "binary", "status-255"])
def test_a_confused_plugin(tmp_path, server, pki, body, expected):
    plugin = script(tmp_path, "plugin.sh", body)
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, plugin))
    assert_one_line(done, f"the credential plugin {plugin!r} of kubeconfig user 'alice' {expected}".replace(" :", ":"))


def test_a_plugin_that_is_not_executable(tmp_path, server, pki):
    plugin = tmp_path / "plain.sh"
    plugin.write_text("echo hi\n")
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, str(plugin)))
    assert_one_line(done, f"the credential plugin {str(plugin)!r} of kubeconfig user 'alice': cannot run it: "
                          "Permission denied")


def test_a_plugin_that_is_a_directory(tmp_path, server, pki):
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, str(tmp_path)))
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: the credential plugin {str(tmp_path)!r} of kubeconfig user 'alice': ")


def test_the_plugin_is_given_its_exec_info_and_env(tmp_path, server, pki):
    """The protocol as the client's own: KUBERNETES_EXEC_INFO, the kubeconfig's env and args."""
    seen = tmp_path / "seen"
    plugin = script(tmp_path, "ok.sh", f"echo \"$KUBERNETES_EXEC_INFO|$REGION|$1\" > {seen}\necho '{TOKEN}'\n")
    extra = ", args: [--cluster-name], env: [{name: REGION, value: eu-west-1}]"
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, plugin, extra))
    assert done.returncode == 0, done.stderr
    info, region, arg = seen.read_text().strip().split("|")
    assert '"kind": "ExecCredential"' in info and '"interactive": false' in info
    assert (region, arg) == ("eu-west-1", "--cluster-name")


def test_no_library_logging_reaches_stderr(tmp_path, server, pki):
    """Every failing plugin above says one line; here the three the issue saw, checked for the libraries' words."""
    for body in ("exit 1\n", "echo nope\n"):
        plugin = script(tmp_path, "p.sh", body)
        done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, plugin))
        assert done.stderr.count("\n") == 1
        for word in ("ERROR:root", "WARNING", "urllib3", "Retrying", "Traceback"):
            assert word not in done.stderr
    done, _ = run("budgets", "usage", "--kubeconfig", kubeconfig(tmp_path, server, pki, "missing-plugin-xyz"))
    assert done.stderr.count("\n") == 1 and "ERROR:root" not in done.stderr
