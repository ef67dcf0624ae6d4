"""Connections and credentials against the real kube-apiserver (issue 28): a kubeconfig whose CA is another
cluster's, an exec credential plugin that hands over the real token (and one that fails), and a hostile ``-n``
— each as a user meets it, through ``python -m kubectl_runs``."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from conftest import run_plugin


def stranger_ca(directory: Path) -> str:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", "stranger.key", "-out", "stranger.crt", "-days", "2", "-subj", "/CN=another-cluster"],
                   cwd=directory, check=True, capture_output=True, timeout=60)
    return base64.b64encode((directory / "stranger.crt").read_bytes()).decode()


def edited_kubeconfig(cluster, tmp_path: Path, edit) -> str:
    config = json.loads(Path(cluster.admin_kubeconfig).read_text())
    edit(config)
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def test_another_clusters_ca_is_unknown_authority_for_reports_and_reconcile(cluster, tmp_path):
    """A recreated cluster or a wrong context: was ``internal error: AttributeError …``."""
    data = stranger_ca(tmp_path)

    def swap(config):
        config["clusters"][0]["cluster"]["certificate-authority-data"] = data

    kubeconfig = edited_kubeconfig(cluster, tmp_path, swap)
    for args in (["budgets", "usage"], ["leases", "audit"], ["plan", "rai-sys/pretrain-32"], ["snapshot", "save"]):
        done = run_plugin(*args, kubeconfig=kubeconfig)
        assert (done.returncode, done.stdout) == (1, ""), args
        assert done.stderr == (
            f"error: unable to connect to the server at {cluster.server}: x509: certificate signed by unknown "
            "authority (the kubeconfig's certificate-authority-data does not match this server: a wrong context, or "
            "a cluster recreated since the kubeconfig was written? Get a fresh kubeconfig)\n"), args
    done = run_plugin("reconcile", "--once", kubeconfig=kubeconfig)
    assert done.returncode == 1
    assert "x509: certificate signed by unknown authority" in done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_a_tls_server_name_the_api_servers_certificate_does_not_list(cluster, tmp_path):
    def rename(config):
        config["clusters"][0]["cluster"]["tls-server-name"] = "not-this-cluster.example"

    done = run_plugin("budgets", "usage", kubeconfig=edited_kubeconfig(cluster, tmp_path, rename))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"error: unable to connect to the server at {cluster.server}: x509: certificate is not valid "
                           "for not-this-cluster.example (the tls-server-name of the kubeconfig's cluster is not among "
                           "the names in the server's certificate)\n")


def plugin_user(tmp_path: Path, body: str) -> dict:
    script = tmp_path / "credential-plugin"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}


def test_an_exec_plugin_that_hands_over_the_real_token(cluster, tmp_path):
    token = cluster.token_for("admin")
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                             "status": {"token": token}})

    def use_plugin(config):
        config["users"][0]["user"] = plugin_user(tmp_path, f"echo '{credential}'\n")

    done = run_plugin("budgets", "usage", "-o", "json", kubeconfig=edited_kubeconfig(cluster, tmp_path, use_plugin))
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["envelopes"]  # the fleet, read with the token the plugin gave


def test_an_exec_plugin_that_fails_is_one_line(cluster, tmp_path):
    def use_plugin(config):
        config["users"][0]["user"] = plugin_user(tmp_path, "echo 'error: no cached token; run login' >&2\nexit 1\n")

    done = run_plugin("budgets", "usage", kubeconfig=edited_kubeconfig(cluster, tmp_path, use_plugin))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"error: the credential plugin '{tmp_path / 'credential-plugin'}' of kubeconfig user 'admin' "
                           "exited with status 1: error: no cached token; run login\n")


def test_a_path_in_the_namespace_flag_reaches_no_other_resource(cluster):
    """``-n ../../../api/v1`` listed /api/v1/budgets and said "No budgets found" (exit 0)."""
    done = run_plugin("budgets", "usage", "-n", "../../../api/v1", kubeconfig=cluster.admin_kubeconfig)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith('error: -n/--namespace "../../../api/v1" is not a valid namespace: a lowercase RFC '
                                  "1123 label")
    done = run_plugin("budgets", "usage", "-n", "rai-sys", kubeconfig=cluster.admin_kubeconfig)
    assert done.returncode == 0 and done.stdout
