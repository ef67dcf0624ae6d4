"""The bad-input corpus: every class of bad input a new user can hand kubectl-runs, run through the installed
command in a child process (so that a segfault shows as a negative return code instead of killing the test
run). For each: the exit code of API.md §5, exactly one line on stderr (the expected one), nothing on stdout, no
"internal error", no "Traceback", never a signal.

Classes: absurd nesting (YAML flow and block, JSON; 50,000 and 100,000 deep), garbage kubeconfigs (random
bytes, binary, not UTF-8, wrongly shaped), closed or full standard output, and (tests/unit/test_strictness.py
adds the rest through ``CORPUS`` below) what the CRDs promise: integers beyond int64, wrong apiVersions,
duplicate keys, duplicate objects, GPU capacities that are not a count. The inputs are generated here (some are
megabytes); ``python -m tests.unit.test_bad_input_corpus DIR`` writes them out for a look.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

AT = "2025-11-02T00:00:00Z"
BUDGET = (b"apiVersion: jobtree.dev/v1alpha1\nkind: Budget\nmetadata: {name: b, namespace: team}\n"
          b"spec:\n  owner: org:a\n  envelopes:\n  - {name: w, flavor: H, concurrency: 1, "
          b"start: '2025-11-01T00:00:00Z', end: '2025-12-01T00:00:00Z'}\n")
TOO_DEEP = "nested more than 256 levels deep at line {line}: refused before parsing (no Kubernetes object is nested " \
           "that deep)"


@dataclass(frozen=True)
class Case:
    id: str
    files: dict[str, bytes]  # written into the case's directory
    args: list[str]  # the command line; {dir} is the case's directory
    code: int
    stderr: str  # the one line, without "error: " / the newline, or "" for no line; {dir} is the case's directory
    stdout: str | None = ""  # None: not checked
    stdout_excludes: str = ""  # characters that must not appear on stdout
    shell: str | None = None  # run through sh -c with this redirection of stdout (">&-", ">/dev/full")
    env: dict[str, str] = field(default_factory=dict)


def _deep_yaml_flow(depth: int) -> bytes:
    return b"apiVersion: v1\nkind: List\nitems: " + b"[" * depth + b"]" * depth + b"\n"


def _deep_yaml_block(depth: int) -> bytes:
    return b"- " * depth + b"x\n"


def _deep_yaml_mapping(depth: int) -> bytes:
    return BUDGET.replace(b"  owner: org:a\n", b"  owner: org:a\n  extra: " + b"{a: " * depth + b"1"
                          + b"}" * depth + b"\n")


def _deep_json(depth: int) -> bytes:
    return b'{"apiVersion": "v1", "kind": "List", "items": [' + b"[" * depth + b"]" * depth + b"]}"


def _deep_json_field(depth: int) -> bytes:
    return (b'{"apiVersion": "jobtree.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "b"},\n "spec": '
            + b'{"a": ' * depth + b"1" + b"}" * depth + b"}")


KUBECONFIG_OK = (b"apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
                 b"users: [{name: u, user: {token: t}}]\n"
                 b"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")


def _kubeconfig_case(case_id: str, data: bytes, message: str) -> Case:
    return Case(case_id, {"kubeconfig": data}, ["budgets", "usage", "--kubeconfig", "{dir}/kubeconfig"], 1,
                "kubeconfig {dir}/kubeconfig: " + message)


CORPUS: list[Case] = [
    # --- absurd nesting: refused before any parser sees it, the file named --------------------------------------
    *(Case(f"yaml-flow-{d}", {"deep.yaml": _deep_yaml_flow(d)}, ["budgets", "usage", "--snapshot", "{dir}/deep.yaml"],
           1, "{dir}/deep.yaml: " + TOO_DEEP.format(line=3)) for d in (50_000, 100_000)),
    *(Case(f"yaml-block-{d}", {"deep.yaml": _deep_yaml_block(d)}, ["leases", "audit", "--snapshot", "{dir}/deep.yaml"],
           1, "{dir}/deep.yaml: " + TOO_DEEP.format(line=1)) for d in (50_000, 100_000)),
    Case("yaml-mapping-in-object", {"b.yaml": _deep_yaml_mapping(50_000)},
         ["budgets", "usage", "--snapshot", "{dir}/b.yaml"], 1, "{dir}/b.yaml: " + TOO_DEEP.format(line=6)),
    Case("yaml-indentation", {"i.yaml": b"".join(b" " * i + b"- \n" for i in range(2_000))},
         ["budgets", "usage", "--snapshot", "{dir}/i.yaml"], 1, "{dir}/i.yaml: " + TOO_DEEP.format(line=257)),
    *(Case(f"json-{d}", {"deep.json": _deep_json(d)}, ["budgets", "usage", "--snapshot", "{dir}/deep.json"],
           1, "{dir}/deep.json: " + TOO_DEEP.format(line=1)) for d in (50_000, 100_000)),
    Case("json-field", {"b.json": _deep_json_field(100_000)}, ["plan", "r", "-n", "team", "--snapshot", "{dir}/b.json"],
         1, "{dir}/b.json: " + TOO_DEEP.format(line=2)),
    Case("json-on-stdin", {}, ["budgets", "usage", "--snapshot", "-"], 1, "<stdin>: " + TOO_DEEP.format(line=1),
         shell="<{dir}/../deep.json"),
    # --- kubeconfigs: the file named, what is wrong said, no Python exception names ------------------------------
    _kubeconfig_case("kubeconfig-random-bytes", bytes((i * 7919 + 13) % 256 for i in range(4096)),
                     "not a kubeconfig: binary data (a NUL byte at offset 61)"),
    _kubeconfig_case("kubeconfig-random-bytes-no-nul", bytes(range(255, 0, -1)) * 4,
                     "not a kubeconfig: not UTF-8 text (byte 0xff at offset 0)"),
    _kubeconfig_case("kubeconfig-latin-1", b"apiVersion: v1\nkind: Config\ncurrent-context: caf\xe9\n",
                     "not a kubeconfig: not UTF-8 text (byte 0xe9 at offset 48)"),
    _kubeconfig_case("kubeconfig-utf-16", "apiVersion: v1\n".encode("utf-16"),
                     "not a kubeconfig: binary data (a NUL byte at offset 3)"),
    _kubeconfig_case("kubeconfig-a-list", b"- apiVersion: v1\n",
                     "not a valid kubeconfig: expected a mapping (apiVersion, kind: Config, clusters, users, "
                     "contexts), got a list"),
    _kubeconfig_case("kubeconfig-scalar", b"hello\n",
                     "not a valid kubeconfig: expected a mapping (apiVersion, kind: Config, clusters, users, "
                     "contexts), got the string 'hello'"),
    _kubeconfig_case("kubeconfig-clusters-mapping", b"clusters: {c: {server: x}}\n",
                     "not a valid kubeconfig: clusters: expected a list of named clusters, got a mapping"),
    _kubeconfig_case("kubeconfig-user-token-number", KUBECONFIG_OK.replace(b"token: t", b"token: 12"),
                     "not a valid kubeconfig: users[0].user.token: expected a string, got a number"),
    _kubeconfig_case("kubeconfig-context-string", KUBECONFIG_OK.replace(b"context: {cluster: c, user: u}",
                                                                        b"context: c"),
                     "not a valid kubeconfig: contexts[0].context: expected a mapping, got the string 'c'"),
    _kubeconfig_case("kubeconfig-no-such-context", KUBECONFIG_OK.replace(b"current-context: x", b"current-context: y"),
                     "Invalid kube-config file. Expected object with name y in {dir}/kubeconfig/contexts list"),
    _kubeconfig_case("kubeconfig-yaml-error", b"clusters: [\n", "not valid YAML at line 2, column 1: did not find "
                     "expected node content"),
    _kubeconfig_case("kubeconfig-nested", b"a: " + b"[" * 50_000 + b"]" * 50_000,
                     "nested more than 256 levels deep at line 1: refused before parsing (no Kubernetes object is "
                     "nested that deep)"),
    Case("kubeconfig-for-a-namespace", {"kubeconfig": b"\x89PNG\r\n\x1a\n\0\0", "s.yaml": BUDGET},
         ["plan", "r", "--snapshot", "{dir}/s.yaml", "--kubeconfig", "{dir}/kubeconfig"], 1,
         "kubeconfig {dir}/kubeconfig: not a kubeconfig: binary data (a NUL byte at offset 8)"),
    # --- standard output: closed, or full ------------------------------------------------------------------------
    # --- output: control characters never reach a CSV; notes name their file -----------------------------------
    Case("csv-control-characters", {"s.yaml": BUDGET.replace(b"name: b, namespace: team",
                                                             b'name: "b\\e]0;pwned\\a\\u202e\\x9b31m", namespace: team')},
         ["budgets", "usage", "--snapshot", "{dir}/s.yaml", "--at", AT, "-o", "csv", "--no-headers"], 0, "",
         stdout=None, stdout_excludes="\x1b\x07\u202e\x9b"),
    Case("note-names-the-file", {"s.yaml": BUDGET + b"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"},
         ["budgets", "usage", "--snapshot", "{dir}/s.yaml", "--at", AT, "-o", "json"], 0,
         "note: ignored 1 object(s) of kind ConfigMap in {dir}/s.yaml: kubectl-runs reads Node, Budget, Run, "
         "Reservation, GPULease", stdout=None),
    Case("stdout-closed", {"s.yaml": BUDGET}, ["budgets", "usage", "--snapshot", "{dir}/s.yaml", "--at", AT], 1,
         "standard output is closed: there is nowhere to print the result", stdout=None, shell=">&-"),
    Case("stdout-closed-version", {}, ["version"], 1,
         "standard output is closed: there is nowhere to print the result", stdout=None, shell=">&-"),
    *(Case(f"stdout-full-{fmt}", {"s.yaml": BUDGET}, ["budgets", "usage", "--snapshot", "{dir}/s.yaml", "--at", AT,
                                                       "-o", fmt],
           1, "cannot write to standard output: No space left on device", stdout=None, shell=">/dev/full")
      for fmt in ("table", "json", "yaml", "csv")),
    *(Case(f"stdout-full-{'-'.join(words) or 'bare'}", {}, words, 1,
           "cannot write to standard output: No space left on device", stdout=None, shell=">/dev/full")
      for words in (["--help"], [], ["budgets"])),
]


def _json(doc: object) -> bytes:
    import json

    return json.dumps(doc).encode()


LEASE = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease", "metadata": {"name": "l", "namespace": "team"},
         "spec": {"owner": "org:a", "runRef": {"namespace": "team", "name": "r"}, "group": 0, "flavor": "H",
                  "slice": {"slots": ["n#0"], "role": "Active"}, "start": "2025-11-01T00:00:00Z", "reason": "Start"}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def _node(gpus: object, resource: str = "nvidia.com/gpu") -> bytes:
    return _json({**NODE, "status": {"allocatable": {resource: gpus}}})


CORPUS += [
    # --- integers beyond int64 -----------------------------------------------------------------------------------
    Case("int64-concurrency-yaml", {"b.yaml": BUDGET.replace(b"concurrency: 1", b"concurrency: 9223372036854775808")},
         ["budgets", "usage", "--snapshot", "{dir}/b.yaml"], 1,
         "{dir}/b.yaml: Budget team/b: spec.envelopes[0].concurrency: expected int <= 9223372036854775807 (an int64)"),
    Case("int64-1e30-yaml", {"b.yaml": BUDGET.replace(b"concurrency: 1", b"concurrency: 1.0e+30")},
         ["budgets", "usage", "--snapshot", "{dir}/b.yaml"], 1,
         "{dir}/b.yaml: Budget team/b: spec.envelopes[0].concurrency: expected int, got float"),
    Case("int64-exponent-yaml", {"b.yaml": BUDGET.replace(b"concurrency: 1", b"concurrency: 1e30")},
         ["budgets", "usage", "--snapshot", "{dir}/b.yaml"], 1,
         "{dir}/b.yaml: Budget team/b: spec.envelopes[0].concurrency: expected int, got float"),
    Case("int64-group-json", {"l.json": _json({**LEASE, "spec": {**LEASE["spec"], "group": 2**64}})},
         ["leases", "audit", "--snapshot", "{dir}/l.json"], 1,
         "{dir}/l.json: GPULease team/l: spec.group: expected int <= 9223372036854775807 (an int64)"),
    Case("int64-1e30-json", {"l.json": b'{"kind": "List", "items": [' + _json(LEASE).replace(b'"group": 0', b'"group": 1e30')
                             + b"]}"},
         ["leases", "audit", "--snapshot", "{dir}/l.json"], 1,
         "{dir}/l.json: GPULease team/l: spec.group: expected int, got float"),
    # --- apiVersions we do not read ------------------------------------------------------------------------------
    Case("apiversion-budget-v9", {"b.yaml": BUDGET.replace(b"jobtree.dev/v1alpha1", b"jobtree.dev/v9")},
         ["budgets", "usage", "--snapshot", "{dir}/b.yaml"], 1, "{dir}/b.yaml: Budget team/b: apiVersion "
         "'jobtree.dev/v9' is not jobtree.dev/v1alpha1 (the version of Budget kubectl-runs reads)"),
    Case("apiversion-lease-in-list", {"l.json": _json({"apiVersion": "v1", "kind": "List", "items": [
        {**LEASE, "apiVersion": "jobtree.dev/v2"}]})}, ["leases", "audit", "--snapshot", "{dir}/l.json"], 1,
         "{dir}/l.json: GPULease team/l: apiVersion 'jobtree.dev/v2' is not jobtree.dev/v1alpha1 (the version of "
         "GPULease kubectl-runs reads)"),
    Case("apiversion-node-v2", {"n.json": _json({**NODE, "apiVersion": "v2"})},
         ["budgets", "usage", "--snapshot", "{dir}/n.json"], 1,
         "{dir}/n.json: Node n1: apiVersion 'v2' is not v1 (the version of Node kubectl-runs reads)"),
    Case("apiversion-list", {"s.json": _json({"apiVersion": "v9", "kind": "List", "items": []})},
         ["budgets", "usage", "--snapshot", "{dir}/s.json"], 1, "{dir}/s.json: List: apiVersion 'v9' is not v1"),
    # --- duplicates: keys, objects --------------------------------------------------------------------------------
    Case("duplicate-key", {"b.yaml": BUDGET.replace(b"  owner: org:a\n", b"  owner: org:a\n  owner: org:b\n")},
         ["budgets", "usage", "--snapshot", "{dir}/b.yaml"], 1,
         "{dir}/b.yaml: not valid YAML at line 6, column 3: duplicate key 'owner' (first given at line 5)"),
    Case("duplicate-key-json", {"b.json": _json({"apiVersion": "v1", "kind": "List", "items": [LEASE]}).replace(
        b'"group": 0', b'"group": 0,\n "group": 3')},
         ["leases", "audit", "--snapshot", "{dir}/b.json"], 1,
         "{dir}/b.json: duplicate key 'group' at line 2 (first given at line 1): an object gives each key once (the "
         "API server refuses it)"),
    Case("duplicate-key-json-nested", {"b.json": b'{"kind": "List", "items": [{"kind": "Node", "metadata": '
                                                 b'{"name": "n1", "labels": {"a": "1",\n"b": "2", "a": "3"}}}]}'},
         ["budgets", "usage", "--snapshot", "{dir}/b.json"], 1,
         "{dir}/b.json: duplicate key 'a' at line 2 (first given at line 1): an object gives each key once (the "
         "API server refuses it)"),
    Case("duplicate-key-kubeconfig", {"kubeconfig": KUBECONFIG_OK + b"current-context: y\n"},
         ["budgets", "usage", "--kubeconfig", "{dir}/kubeconfig"], 1,
         "kubeconfig {dir}/kubeconfig: not valid YAML at line 7, column 1: duplicate key 'current-context' (first "
         "given at line 6)"),
    Case("duplicate-object-differs", {"a.yaml": BUDGET, "b.yaml": BUDGET.replace(b"concurrency: 1", b"concurrency: 2")},
         ["budgets", "usage", "--snapshot", "{dir}/a.yaml", "--snapshot", "{dir}/b.yaml"], 1,
         "{dir}/b.yaml: Budget team/b is also in {dir}/a.yaml with different content: a snapshot holds one copy of "
         "each object (remove the copy that is wrong)"),
    Case("duplicate-object-same-file", {"a.yaml": BUDGET + b"---\n" + BUDGET.replace(b"flavor: H", b"flavor: A")},
         ["budgets", "usage", "--snapshot", "{dir}/a.yaml"], 1,
         "{dir}/a.yaml: Budget team/b is given twice in this file with different content: a snapshot holds one "
         "copy of each object (remove the copy that is wrong)"),
    Case("duplicate-object-identical", {"a.yaml": BUDGET},
         ["budgets", "usage", "--snapshot", "{dir}/a.yaml", "--snapshot", "{dir}/a.yaml", "--at", AT, "-o", "json"], 0,
         "note: 1 object(s) given more than once in {dir}/a.yaml with the same content: read once", stdout=None),
    # --- GPU capacity that is not a count ------------------------------------------------------------------------
    *(Case(f"gpus-{label}", {"n.json": _node(value)}, ["budgets", "usage", "--snapshot", "{dir}/n.json"], 1,
           f"{{dir}}/n.json: Node n1: status: allocatable nvidia.com/gpu: {value!r} is not a whole non-negative "
           "number of GPUs")
      for label, value in (("abc", "abc"), ("negative", "-8"), ("milli", "500m"), ("fraction", "1.5"),
                           ("negative-int", -8))),
    Case("gpus-implausible", {"n.json": _node("1Ei", "amd.com/gpu")}, ["budgets", "usage", "--snapshot", "{dir}/n.json"],
         1, "{dir}/n.json: Node n1: status: allocatable amd.com/gpu: '1Ei' is 1,152,921,504,606,846,976 GPUs, more "
         "than one node can hold (kubectl-runs reads at most 65,536)"),
]


def materialize(case: Case, root: Path) -> Path:
    """Write the case's files into ``root/<id>`` (and the deep JSON once next to it, for the stdin case)."""
    directory = root / case.id
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (directory / name).write_bytes(data)
    if case.shell and "deep.json" in case.shell:
        (root / "deep.json").write_bytes(_deep_json(50_000))
    return directory


def run_case(case: Case, root: Path) -> subprocess.CompletedProcess:
    directory = materialize(case, root)
    args = [a.replace("{dir}", str(directory)) for a in case.args]
    env = {**os.environ, "KUBECONFIG": str(directory / "no-kubeconfig"), **case.env}
    env.pop("KUBECTL_RUNS_DEBUG", None)
    command = [sys.executable, "-m", "kubectl_runs", *args]
    if case.shell:
        import shlex

        redirect = case.shell.replace("{dir}", str(directory))
        return subprocess.run(["sh", "-c", f"exec {shlex.join(command)} {redirect}"], capture_output=True,
                              env=env, timeout=120)
    return subprocess.run(command, capture_output=True, env=env, timeout=120)


def check(case: Case, done: subprocess.CompletedProcess, directory: Path) -> None:
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {err[-300:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-500:]
    if not case.stderr:
        assert (done.returncode, err) == (case.code, "")
    else:
        assert err.count("\n") == 1 and err.endswith("\n"), f"not one line on stderr: {err[-500:]!r}"
        prefix = "note: " if case.stderr.startswith("note: ") else "error: "
        expected = prefix + case.stderr.removeprefix("note: ").replace("{dir}", str(directory))
        assert (done.returncode, err) == (case.code, expected + "\n")
    out = done.stdout.decode("utf-8", "replace")
    if case.stdout is not None:
        assert out == case.stdout
    assert not any(ch in out for ch in case.stdout_excludes), repr(out)


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_bad_input(case, tmp_path):
    done = run_case(case, tmp_path)
    check(case, done, tmp_path / case.id)


def test_the_corpus_covers_every_class():
    """One class per line of the issue: a new class of bad input gets cases here, or the test fails to say so."""
    classes = {c.id.split("-")[0] for c in CORPUS}
    assert {"yaml", "json", "kubeconfig", "stdout", "csv", "note", "int64", "apiversion", "duplicate", "gpus"} <= classes


if __name__ == "__main__":  # python -m tests.unit.test_bad_input_corpus DIR
    out = Path(sys.argv[1])
    for case in CORPUS:
        materialize(case, out)
    print(f"wrote {len(CORPUS)} cases under {out}")
