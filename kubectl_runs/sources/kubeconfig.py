"""Kubeconfig files: found and read as kubectl does, and checked before the kubernetes client sees them.

The client turns a file of random bytes into a UnicodeDecodeError and a wrongly shaped one into a TypeError
deep inside itself; kubectl instead says which file is wrong and how (it decodes the whole file into typed
structs). ``read_kubeconfig`` does the same here, in one line naming the file. Reading the context's namespace
needs no import of the kubernetes client.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from ..errors import UserError
from .nesting import too_deep_message, yaml_too_deep
from .strict_yaml import StrictLoader


class KubeconfigError(UserError):
    """A kubeconfig file that cannot be used: names the file and what is wrong, in one line."""


def kubeconfig_paths(explicit: str | None) -> list[str]:
    """``--kubeconfig``, else every file of ``$KUBECONFIG`` (``:``-separated), else ``~/.kube/config``."""
    if explicit:
        return [explicit]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    return [os.path.join(os.path.expanduser("~"), ".kube", "config")]


# --- the shape kubectl decodes a kubeconfig into (clientcmd/api/v1): what each field must be ----------------------

_STR, _BOOL, _STRS, _STR_MAP = "a string", "true or false", "a list of strings", "a mapping of strings"
_CLUSTER = {"server": _STR, "certificate-authority": _STR, "certificate-authority-data": _STR,
            "insecure-skip-tls-verify": _BOOL, "tls-server-name": _STR, "proxy-url": _STR,
            "disable-compression": _BOOL}
_USER = {"token": _STR, "tokenFile": _STR, "client-certificate": _STR, "client-certificate-data": _STR,
         "client-key": _STR, "client-key-data": _STR, "username": _STR, "password": _STR, "as": _STR,
         "as-groups": _STRS, "exec": "exec", "auth-provider": "auth-provider"}
_CONTEXT = {"cluster": _STR, "user": _STR, "namespace": _STR}
_NAMED = {"clusters": ("cluster", _CLUSTER), "users": ("user", _USER), "contexts": ("context", _CONTEXT)}


def _kind_of(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _fits(value: Any, want: str) -> bool:
    if want == _STR:
        return isinstance(value, str)
    if want == _BOOL:
        return isinstance(value, bool)
    if want == _STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if want == _STR_MAP:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return True


def _check_fields(where: str, body: Any, fields: dict[str, str]) -> str | None:
    if body is None:
        return None
    if not isinstance(body, dict):
        return f"{where}: expected a mapping, got {_kind_of(body)}"
    for key, want in fields.items():
        value = body.get(key)
        if value is None:
            continue
        if want == "exec":
            problem = _check_exec(f"{where}.exec", value)
        elif want == "auth-provider":
            problem = _check_fields(f"{where}.auth-provider", value, {"name": _STR, "config": _STR_MAP})
        else:
            problem = None if _fits(value, want) else f"{where}.{key}: expected {want}, got {_kind_of(value)}"
        if problem:
            return problem
    return None


def _check_exec(where: str, body: Any) -> str | None:
    problem = _check_fields(where, body, {"command": _STR, "apiVersion": _STR, "args": _STRS})
    if problem:
        return problem
    env = body.get("env")
    if env is None:
        return None
    if not isinstance(env, list):
        return f"{where}.env: expected a list, got {_kind_of(env)}"
    for index, entry in enumerate(env):
        problem = _check_fields(f"{where}.env[{index}]", entry, {"name": _STR, "value": _STR})
        if problem or not isinstance(entry, dict):
            return problem or f"{where}.env[{index}]: expected a mapping, got {_kind_of(entry)}"
    return None


def kubeconfig_shape_problem(doc: Any) -> str | None:
    """What is wrong with the shape of a decoded kubeconfig (None: nothing)."""
    if doc is None:
        return None
    if not isinstance(doc, dict):
        return f"expected a mapping (apiVersion, kind: Config, clusters, users, contexts), got {_kind_of(doc)}"
    for key in ("current-context", "apiVersion", "kind"):
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key}: expected a string, got {_kind_of(value)}"
    for key in ("preferences",):
        value = doc.get(key)
        if value is not None and not isinstance(value, dict):
            return f"{key}: expected a mapping, got {_kind_of(value)}"
    for key, (inner, fields) in _NAMED.items():
        entries = doc.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            return f"{key}: expected a list of named {inner}s, got {_kind_of(entries)}"
        for index, entry in enumerate(entries):
            where = f"{key}[{index}]"
            if not isinstance(entry, dict):
                return f"{where}: expected a mapping with name and {inner}, got {_kind_of(entry)}"
            if not isinstance(entry.get("name"), str):
                return f"{where}.name: expected a string, got {_kind_of(entry.get('name'))}"
            problem = _check_fields(f"{where}.{inner}", entry.get(inner), fields)
            if problem:
                return problem
    return None


def read_kubeconfig(path: str) -> dict:
    """One kubeconfig file, decoded and checked ({} when it is empty). Raises KubeconfigError naming the file:
    unreadable, binary, not UTF-8, not YAML, nested absurdly deep, or not shaped like a kubeconfig. A missing
    file raises FileNotFoundError (callers decide whether that matters)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise KubeconfigError(f"kubeconfig {path}: is a directory, not a file") from None
    except OSError as exc:
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {exc.strerror or exc}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig: binary data (a NUL byte at offset {nul})")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig: not UTF-8 text (byte 0x{data[exc.start]:02x} "
                              f"at offset {exc.start})") from None
    line = yaml_too_deep(data)
    if line is not None:
        raise KubeconfigError("kubeconfig " + too_deep_message(path, line))
    try:
        doc = yaml.load(data, Loader=StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise KubeconfigError(f"kubeconfig {path}: not valid YAML{where}: {problem}") from None
    problem = kubeconfig_shape_problem(doc)
    if problem:
        raise KubeconfigError(f"kubeconfig {path}: not a valid kubeconfig: {problem}")
    return doc or {}


def context_namespace(explicit: str | None, context: str | None) -> str | None:
    """The namespace of ``context`` (else of current-context); the first file that sets a value wins, as
    kubectl merges them. Missing files are skipped; a broken one is an error naming it (as in kubectl)."""
    docs = []
    for path in kubeconfig_paths(explicit):
        try:
            docs.append(read_kubeconfig(path))
        except FileNotFoundError:
            continue
    current = context or next((d.get("current-context") for d in docs if d.get("current-context")), None)
    if not current:
        return None
    for doc in docs:
        for entry in doc.get("contexts") or []:
            if entry.get("name") == current:
                ns = (entry.get("context") or {}).get("namespace")
                if ns:
                    return str(ns)
                return None
    return None
