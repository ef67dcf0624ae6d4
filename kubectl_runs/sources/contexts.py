"""Several clusters: the kubeconfig contexts to read (``--context`` repeated, ``--all-contexts``), the server of
each, and the cluster a snapshot file was saved from (``snapshot save`` stamps it: annotations
``jobtree.dev/snapshot-context`` and ``jobtree.dev/snapshot-server``).

Read with PyYAML, like the context's namespace (kubeconfig.py): no import of the kubernetes client. Imported only
when a command is asked for more than one context or snapshot (cli/clusters.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import UsageError
from ..model import SNAPSHOT_CONTEXT_ANNOTATION, SNAPSHOT_SERVER_ANNOTATION
from .kubeconfig import kubeconfig_paths, read_kubeconfig

PEEK_BYTES = 64 * 1024  # the List's metadata comes before its items: `snapshot save` writes it first


@dataclass(frozen=True)
class Target:
    """One cluster to report on: a kubeconfig context (live), or the snapshot files saved from one cluster."""

    context: str
    server: str | None = None
    snapshots: tuple[str, ...] = ()


def _docs(kubeconfig: str | None) -> list[dict]:
    docs = []
    for path in kubeconfig_paths(kubeconfig):
        try:
            docs.append(read_kubeconfig(path))
        except FileNotFoundError:
            continue
    return docs


def context_names(kubeconfig: str | None) -> list[str]:
    """Every context of the kubeconfig (its files merged as kubectl merges them: the first of a name wins), in
    the order the files list them."""
    names: list[str] = []
    for doc in _docs(kubeconfig):
        for entry in doc.get("contexts") or []:
            name = entry.get("name")
            if name and name not in names:
                names.append(name)
    return names


def context_server(kubeconfig: str | None, context: str) -> str | None:
    """The ``server`` of the cluster a context names (None: no such context or cluster)."""
    docs = _docs(kubeconfig)
    cluster = None
    for doc in docs:
        for entry in doc.get("contexts") or []:
            if entry.get("name") == context:
                cluster = (entry.get("context") or {}).get("cluster")
                break
        if cluster is not None:
            break
    for doc in docs:
        for entry in doc.get("clusters") or []:
            if cluster is not None and entry.get("name") == cluster:
                return (entry.get("cluster") or {}).get("server")
    return None


def current_context(kubeconfig: str | None) -> str | None:
    return next((d["current-context"] for d in _docs(kubeconfig) if d.get("current-context")), None)


def live_targets(kubeconfig: str | None, contexts: list[str], every: bool) -> list[Target]:
    """The contexts asked for, each once, in the order given (``--all-contexts``: the kubeconfig's order). A
    context the kubeconfig does not have is a usage error naming the ones it has."""
    known = context_names(kubeconfig)
    names = list(known) if every else list(dict.fromkeys(contexts))
    if every and not names:
        raise UsageError("--all-contexts: the kubeconfig has no contexts")
    unknown = [n for n in names if n not in known]
    if unknown:
        have = ", ".join(known) if known else "none"
        raise UsageError(f"--context {unknown[0]}: no such context in the kubeconfig (contexts: {have})")
    return [Target(context=n, server=context_server(kubeconfig, n)) for n in names]


_JSON = {key: re.compile(rf'"{re.escape(key)}"\s*:\s*"((?:[^"\\]|\\.)*)"')
         for key in (SNAPSHOT_CONTEXT_ANNOTATION, SNAPSHOT_SERVER_ANNOTATION)}
_YAML = {key: re.compile(rf"^\s*['\"]?{re.escape(key)}['\"]?\s*:\s*['\"]?([^'\"\n]*)['\"]?\s*$", re.M)
         for key in (SNAPSHOT_CONTEXT_ANNOTATION, SNAPSHOT_SERVER_ANNOTATION)}


def recorded_cluster(path: str) -> tuple[str | None, str | None]:
    """(context, server) that ``snapshot save`` recorded in the head of a snapshot file; (None, None) for stdin,
    a directory, an unreadable file or one that records none (it is then read as today, and fails as today)."""
    if path == "-" or not os.path.isfile(path):
        return None, None
    try:
        with open(path, "rb") as handle:
            head = handle.read(PEEK_BYTES).decode("utf-8", "replace")
    except OSError:
        return None, None
    found = []
    for key in (SNAPSHOT_CONTEXT_ANNOTATION, SNAPSHOT_SERVER_ANNOTATION):
        match = _JSON[key].search(head) or _YAML[key].search(head)
        found.append(match.group(1).strip() if match else None)
    return found[0] or None, found[1] or None


def snapshot_targets(paths: list[str]) -> list[Target] | None:
    """Snapshot files grouped by the cluster each recorded, in the order given; None when they name fewer than
    two clusters (then they are one snapshot, merged, as before). Files that record no cluster among files of
    several clusters: a usage error (which cluster they belong to cannot be told)."""
    recorded = [(path, *recorded_cluster(path)) for path in paths]
    contexts = list(dict.fromkeys(c for _, c, _ in recorded if c))
    if len(contexts) < 2:
        return None
    bare = [path for path, c, _ in recorded if not c]
    if bare:
        raise UsageError(f"--snapshot {bare[0]} records no cluster, while the other snapshots are of "
                         f"{', '.join(contexts)}: give the snapshots of one cluster at a time, or save it again "
                         "with `kubectl runs snapshot save`")
    return [
        Target(context=c, server=next((s for _, cc, s in recorded if cc == c and s), None),
               snapshots=tuple(p for p, cc, _ in recorded if cc == c))
        for c in contexts
    ]
