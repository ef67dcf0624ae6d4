"""Namespaces and object names are checked as the API server checks them (DNS-1123 labels / subdomains) before
they reach a request path: ``-n '../../../api/v1'`` used to list ``/api/v1/budgets`` and say "No budgets found",
exit 0. Each hostile value is a usage error, exit 2, one line naming the flag or argument and the rule — and no
request is sent (a real local server records what reaches it)."""

from __future__ import annotations

import pytest
from local_servers import Server, write_kubeconfig

from kubectl_runs.cli.main import main
from kubectl_runs.sources.names import LABEL_RULE, SUBDOMAIN_RULE, label_problem, shown, subdomain_problem

HOSTILE = {
    "dot-dot": "..",
    "dot": ".",
    "traversal": "../../../api/v1",
    "slash": "a/b",
    "encoded-dots": "%2e%2e",
    "encoded-slash": "a%2fb",
    "upper": "Team-A",
    "underscore": "team_a",
    "leading-dash": "-a",
    "trailing-dash": "a-",
    "space": "a b",
    "tab": "a\tb",
    "newline": "a\nb",
    "nul": "a\x00b",
    "del": "a\x7fb",
    "unicode": "ünïcode",
    "zero-width": "a\u200bb",
    "fullwidth": "ａｂ",
    "rtl-override": "a\u202eb",
    "query": "a?b=c",
    "fragment": "a#b",
    "semicolon": "a;b",
    "backslash": "a\\b",
    "quote": 'a"b',
    "empty": "",
    "too-long": "a" * 254,
    "url": "http://x",
    "at": "a@b",
    "star": "*",
    "tilde": "~",
}
LABEL_ONLY = {"dotted": "a.b", "64": "a" * 64}  # fine names, not namespaces
VALID = {"simple": "team-a", "digits": "123-abc", "one": "a", "63": "a" * 63}


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_values_are_neither_labels_nor_subdomains(value):
    assert label_problem(value)
    assert subdomain_problem(value)


@pytest.mark.parametrize("value", list(LABEL_ONLY.values()), ids=list(LABEL_ONLY))
def test_subdomains_that_are_not_labels(value):
    assert label_problem(value) and not subdomain_problem(value)


@pytest.mark.parametrize("value", list(VALID.values()), ids=list(VALID))
def test_valid_names(value):
    assert not label_problem(value) and not subdomain_problem(value)


def test_the_api_servers_words():
    assert label_problem("A") == LABEL_RULE
    assert subdomain_problem("A") == SUBDOMAIN_RULE
    assert label_problem("") == subdomain_problem("") == "must not be empty"
    assert label_problem("a" * 64) == "must be no more than 63 characters (it has 64)"
    assert subdomain_problem("a" * 254) == "must be no more than 253 characters (it has 254)"
    assert subdomain_problem("a." * 126 + "a") is None  # 253 characters of labels


def test_shown_escapes_what_a_terminal_would_hide():
    assert shown("a\x00b") == '"a\\x00b"'
    assert shown("a\u200bb") == '"a\\u200bb"'
    assert shown('a"b') == '"a\\"b"'
    assert shown("a" * 100) == '"' + "a" * 60 + '… (100 characters)"'


class Recorder(Server):
    """A plain HTTP server that records every request and answers an empty list (to see what reached it)."""

    def serve(self, conn):
        self.requests.append(conn.recv(65536))
        body = b'{"kind":"List","metadata":{},"items":[]}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        conn.close()


@pytest.fixture
def recorder():
    server = Recorder()
    yield server
    server.close()


COMMANDS = {
    "budgets": (["budgets", "usage"], "budgets usage"),
    "audit": (["leases", "audit"], "leases audit"),
    "queues": (["queues", "usage"], "queues usage"),
    "save": (["snapshot", "save"], "snapshot save"),
    "plan": (["plan", "r"], "plan"),
    "explain": (["explain", "r"], "explain"),
    "verify": (["seeds", "verify"], "seeds verify"),
}


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("command", list(COMMANDS), ids=list(COMMANDS))
def test_a_hostile_namespace_flag_is_a_usage_error_and_sends_nothing(tmp_path, capsys, recorder, command, value):
    words, path = COMMANDS[command]
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    code = main([*words, "--kubeconfig", config, "-n", value])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (f"error: -n/--namespace {shown(value)} is not a valid namespace: {label_problem(value)}\n"
                   f"See 'kubectl runs {path} --help' for usage.\n")
    assert recorder.requests == []


def test_the_issue_case_with_a_snapshot_too(capsys):
    code = main(["budgets", "usage", "--snapshot", "examples/fleet.yaml", "-n", "../../../api/v1"])
    assert code == 2 and "is not a valid namespace" in capsys.readouterr().err


@pytest.mark.parametrize("value", [v for v in HOSTILE.values() if "/" not in v], ids=[k for k, v in HOSTILE.items() if "/" not in v])
@pytest.mark.parametrize(("words", "kind", "path"), [
    (["plan"], "run", "plan"), (["explain"], "run", "explain"), (["seeds", "verify"], "reservation", "seeds verify"),
    (["explain", "workload"], "workload", "explain"), (["explain", "kaiwojob"], "kaiwojob", "explain"),
], ids=["plan", "explain", "verify", "explain-workload", "explain-kaiwojob"])
def test_a_hostile_object_name_is_a_usage_error(tmp_path, capsys, recorder, value, words, kind, path):
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    code = main([*words, "--kubeconfig", config, "--", value])  # "--": "-a" is a name here, not an option
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    if value == "":
        assert err.startswith(f"error: {kind} name \"\" is not a valid name: must not be empty\n")
    else:
        assert err == (f"error: {kind} name {shown(value)} is not a valid name: {subdomain_problem(value)}\n"
                       f"See 'kubectl runs {path} --help' for usage.\n")
    assert recorder.requests == []


@pytest.mark.parametrize("value", [v for v in HOSTILE.values() if "/" not in v and v], ids=[k for k, v in HOSTILE.items() if "/" not in v and v])
def test_a_hostile_namespace_in_namespace_slash_name(tmp_path, capsys, recorder, value):
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    code = main(["plan", "--kubeconfig", config, "--", f"{value}/r"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith(f"error: run {shown(value + '/r')}: {shown(value)} is not a valid namespace: ")
    assert err.count("\n") == 2 and recorder.requests == []


def test_a_valid_namespace_reaches_the_server_quoted(tmp_path, capsys, recorder):
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    code = main(["plan", "team-a/r", "--kubeconfig", config])
    capsys.readouterr()
    assert code == 1  # an empty cluster: no such run
    assert recorder.requests and all(b"/../" not in r for r in recorder.requests)


def test_a_hostile_namespace_in_the_kubeconfig_context(tmp_path, capsys, recorder):
    """The context's namespace goes into paths as -n does: refused naming where it came from (a file, exit 1)."""
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    text = (tmp_path / "kc").read_text().replace("namespace: team", "namespace: '../../api/v1'")
    (tmp_path / "kc").write_text(text)
    code = main(["plan", "r", "--kubeconfig", config])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == (f'error: the namespace "../../api/v1" of the kubeconfig context is not a valid namespace: {LABEL_RULE} '
                   "(fix the context, or give -n)\n")
    assert recorder.requests == []


@pytest.mark.parametrize(("flag", "value", "what", "rule"), [
    ("--leader-election-namespace", "../x", "namespace", LABEL_RULE),
    ("--leader-election-namespace", "", "namespace", "must not be empty"),
    ("--leader-election-namespace", "A", "namespace", LABEL_RULE),
    ("--leader-election-id", "a/b", "name", SUBDOMAIN_RULE),
    ("--leader-election-id", "", "name", "must not be empty"),
    ("--leader-election-id", "a" * 254, "name", "must be no more than 253 characters (it has 254)"),
    ("--leader-election-id", "a\x00", "name", SUBDOMAIN_RULE),
])
def test_reconcile_leader_election_names(tmp_path, capsys, recorder, flag, value, what, rule):
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    code = main(["reconcile", "--kubeconfig", config, flag, value])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (f"error: {flag} {shown(value)} is not a valid {what}: {rule}\n"
                   "See 'kubectl runs reconcile --help' for usage.\n")
    assert recorder.requests == []


def test_completion_never_lists_a_hostile_namespace(tmp_path, recorder, monkeypatch):
    """Completing ``../x/`` sends nothing (and prints nothing)."""
    import click

    from kubectl_runs.cli.completion import _complete_names
    from kubectl_runs.cli.main import cli
    from kubectl_runs.cli.options import GlobalOptions

    ctx = click.Context(cli)
    opts = ctx.ensure_object(GlobalOptions)
    opts.kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{recorder.port}")
    assert _complete_names(ctx, "runs", "Run", "..%2f../") == []
    assert _complete_names(ctx, "runs", "Run", "Team/") == []
    assert recorder.requests == []


@pytest.mark.parametrize("args", [["budgets", "usage", "-n", "Rai-Sys"], ["plan", "rai-sys/Pretrain_32"]])
def test_troubleshooting_quotes_the_lines(capsys, args):
    from pathlib import Path

    code = main([*args, "--snapshot", "examples/fleet.yaml"])
    first = capsys.readouterr().err.splitlines()[0]
    assert code == 2
    assert f"`{first}`" in (Path(__file__).parents[2] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("written", ["../../api/v1", "Kube-System", "a" * 64])
def test_the_pods_namespace_file_is_checked_too(tmp_path, monkeypatch, written):
    """In a pod the Lease's namespace comes from the service account's namespace file: it goes into a path too."""
    from kubectl_runs.cli import reconcile
    from kubectl_runs.errors import UserError

    path = tmp_path / "namespace"
    path.write_text(written + "\n")
    monkeypatch.setattr(reconcile, "_IN_CLUSTER_NAMESPACE", str(path))
    with pytest.raises(UserError) as caught:
        reconcile.leader_namespace(None)
    assert str(caught.value.message).startswith(f"{path}: {shown(written)} is not a valid namespace: ")
    assert str(caught.value.message).endswith("(give --leader-election-namespace)")
    path.write_text("kubectl-runs-system\n")
    assert reconcile.leader_namespace(None) == "kubectl-runs-system"
