"""The lean connection (issue 28) against the kubernetes client it stands in for: for each kind of kubeconfig the
reports take without the client, the settings ``lean_client`` derives are the ones the client's own loader puts
on its Configuration (server, Authorization header, CA, client certificate and key, verification, TLS server
name); the kubeconfigs it leaves to the client go to the client; and a report on the lean path never imports
``kubernetes``."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_runs.sources import Source
from kubectl_runs.sources.cluster import Cluster
from kubectl_runs.sources.kubeclient import _kubeconfig_files, _load_kube_config
from kubectl_runs.sources.lean_client import LeanApi, NeedsClient, lean_settings

CA = "-----BEGIN CERTIFICATE-----\nMIIBfakeCA\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nMIIBfakeclient\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN EC PRIVATE KEY-----\nMHcfakekey\n-----END EC PRIVATE KEY-----\n"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig(cluster: dict, user: dict | None, *, name: str = "c", extra_users: list | None = None) -> dict:
    users = ([{"name": "u", "user": user}] if user is not None else []) + (extra_users or [])
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "k", "cluster": cluster}], "users": users,
            "contexts": [{"name": name, "context": {"cluster": "k", "user": "u"}}]}


def plugin(tmp_path: Path, status: dict) -> dict:
    script = tmp_path / "plugin"
    body = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status})
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{body}\nEOF\n")
    script.chmod(0o755)
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}


def content(path: str | None) -> str | None:
    return Path(path).read_text() if path else None


def client_settings(source: Source) -> dict:
    from kubernetes import client

    configuration = client.Configuration()
    _load_kube_config(source, configuration)
    auth = configuration.auth_settings().get("BearerToken")
    return {"host": configuration.host, "authorization": auth["value"] if auth else None,
            "ssl_ca_cert": content(configuration.ssl_ca_cert), "cert_file": content(configuration.cert_file),
            "key_file": content(configuration.key_file), "verify_ssl": configuration.verify_ssl,
            "tls_server_name": configuration.tls_server_name}


def lean(source: Source) -> dict:
    _paths, _files, docs = _kubeconfig_files(source)
    settings = lean_settings(source, docs)
    for key in ("ssl_ca_cert", "cert_file", "key_file"):
        settings[key] = content(settings[key])
    return settings


def write(tmp_path: Path, config: dict, name: str = "kubeconfig") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture(autouse=True)
def no_proxy_in_environment(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


HTTPS = "https://127.0.0.1:6443"

CASES = {
    "token and CA data": lambda d: kubeconfig({"server": HTTPS + "/", "certificate-authority-data": b64(CA)},
                                              {"token": "abc"}),
    "token file and CA file, relative to the kubeconfig": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority": "ca.crt"}, {"tokenFile": "token"}),
    "client certificate data": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}),
    "client certificate files": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority": str(d / "ca.crt")},
        {"client-certificate": "client.crt", "client-key": "client.key"}),
    "user name and password, insecure": lambda d: kubeconfig(
        {"server": HTTPS, "insecure-skip-tls-verify": True}, {"username": "ann", "password": "s3cret"}),
    "exec plugin token": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority-data": b64(CA)}, {"exec": plugin(d, {"token": "from-plugin"})}),
    "exec plugin certificate replaces the user's": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority-data": b64(CA)},
        {"exec": plugin(d, {"clientCertificateData": CERT, "clientKeyData": KEY}),
         "client-certificate": "other.crt", "client-key": "other.key"}),
    "a token wins over an exec plugin": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority-data": b64(CA)},
        {"token": "tok", "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent"}}),
    "tls-server-name": lambda d: kubeconfig(
        {"server": HTTPS, "certificate-authority-data": b64(CA), "tls-server-name": "api.example"}, {"token": "t"}),
    "http server: no CA read": lambda d: kubeconfig({"server": "http://127.0.0.1:8080"}, {"token": "t"}),
    "an empty user": lambda d: kubeconfig({"server": HTTPS, "certificate-authority-data": b64(CA)}, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lean_settings_are_the_clients(case, tmp_path):
    (tmp_path / "ca.crt").write_text(CA)
    (tmp_path / "token").write_text("from-file")
    (tmp_path / "client.crt").write_text(CERT)
    (tmp_path / "client.key").write_text(KEY)
    (tmp_path / "other.crt").write_text("other")
    (tmp_path / "other.key").write_text("other")
    source = Source(kubeconfig=write(tmp_path, CASES[case](tmp_path)))
    assert lean(source) == client_settings(source)


def test_several_files_merge_as_the_client_merges_them(tmp_path):
    first = kubeconfig({"server": HTTPS, "certificate-authority-data": b64(CA)}, {"token": "first"}, name="a")
    second = kubeconfig({"server": "https://10.0.0.1:443", "insecure-skip-tls-verify": True}, {"token": "second"},
                        name="b")
    second["contexts"].append({"name": "a", "context": {"cluster": "k", "user": "u"}})  # a's name: the first wins
    paths = f"{write(tmp_path, first, 'one')}:{write(tmp_path, second, 'two')}"
    for context in (None, "a", "b"):  # None: the last file's current-context (the client's rule)
        source = Source(kubeconfig=paths, context=context)
        assert lean(source) == client_settings(source), context


@pytest.mark.parametrize("edit", [
    lambda c: c["users"][0]["user"].update({"auth-provider": {"name": "oidc", "config": {"id-token": "x"}}}),
    lambda c: c["clusters"][0]["cluster"].update({"proxy-url": "http://proxy:3128"}),
    lambda c: c.update({"current-context": "elsewhere"}),
    lambda c: c["contexts"][0]["context"].update({"user": "nobody"}),
    lambda c: c["contexts"][0]["context"].update({"cluster": "nowhere"}),
    lambda c: c["clusters"][0]["cluster"].pop("server"),
    lambda c: c["clusters"][0]["cluster"].update({"certificate-authority": "missing.crt"}),
    lambda c: c["users"][0]["user"].update({"token": None}),
], ids=["auth-provider", "proxy-url", "no such context", "no such user", "no such cluster", "no server",
        "a missing CA file", "a null token"])
def test_what_the_client_answers_goes_to_the_client(edit, tmp_path):
    config = kubeconfig({"server": HTTPS, "certificate-authority-data": b64(CA)}, {"token": "t"})
    config["clusters"][0]["cluster"].pop("certificate-authority-data")
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    edit(config)
    source = Source(kubeconfig=write(tmp_path, config))
    _paths, _files, docs = _kubeconfig_files(source)
    with pytest.raises(NeedsClient):
        lean_settings(source, docs)


@pytest.mark.parametrize("edit", [
    lambda c: c["users"][0]["user"].update({"auth-provider": {"name": "oidc", "config": {"id-token": "x"}}}),
    lambda c: c["clusters"][0]["cluster"].update({"proxy-url": "http://proxy:3128"}),
], ids=["auth-provider", "proxy-url"])
def test_an_auth_provider_or_a_proxy_is_the_clients(edit, tmp_path):
    config = kubeconfig({"server": HTTPS, "insecure-skip-tls-verify": True}, {"token": "t"})
    edit(config)
    api = Cluster(Source(kubeconfig=write(tmp_path, config))).api
    assert type(api).__module__ == "kubernetes.client.api_client"


def test_a_proxy_in_the_environment_goes_to_the_client(tmp_path, monkeypatch):
    source = Source(kubeconfig=write(tmp_path, kubeconfig({"server": HTTPS, "insecure-skip-tls-verify": True},
                                                          {"token": "t"})))
    assert isinstance(Cluster(source).api, LeanApi)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    api = Cluster(source).api
    assert not isinstance(api, LeanApi) and api.configuration.proxy == "http://proxy.example:3128"


def test_a_report_on_the_lean_path_imports_no_kubernetes(tmp_path):
    path = write(tmp_path, kubeconfig({"server": HTTPS, "certificate-authority-data": b64(CA)}, {"token": "t"}))
    code = ("import sys\nfrom kubectl_runs.sources import Source\nfrom kubectl_runs.sources.cluster import Cluster\n"
            f"api = Cluster(Source(kubeconfig={path!r})).api\n"
            "print(type(api).__name__, sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "LeanApi []\n"
