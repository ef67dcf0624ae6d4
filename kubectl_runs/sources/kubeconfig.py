"""Just enough kubeconfig reading to find a context's namespace without importing the kubernetes client."""

from __future__ import annotations

import os

import yaml


def kubeconfig_paths(explicit: str | None) -> list[str]:
    """``--kubeconfig``, else every file of ``$KUBECONFIG`` (``:``-separated), else ``~/.kube/config``."""
    if explicit:
        return [explicit]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    return [os.path.join(os.path.expanduser("~"), ".kube", "config")]


def context_namespace(explicit: str | None, context: str | None) -> str | None:
    """The namespace of ``context`` (else of current-context); the first file that sets a value wins, as
    kubectl merges them."""
    docs = []
    for path in kubeconfig_paths(explicit):
        try:
            with open(path, encoding="utf-8") as handle:
                doc = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    current = context or next((d.get("current-context") for d in docs if d.get("current-context")), None)
    if not current:
        return None
    for doc in docs:
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == current:
                ns = (entry.get("context") or {}).get("namespace")
                if ns:
                    return str(ns)
                return None
    return None
