"""What ``kubectl runs reconcile`` checks before it starts, so a first run fails in one line that says what to do
instead of retrying for ever.

- :func:`check_crds`: the jobtree.dev API group is served with all four kinds (discovery, which every
  authenticated user may read). A missing group is the reports' own error (``kubectl apply -f crds/``); an older
  install that lacks a kind names it.
- :func:`check_lease_namespace`: the leader-election Lease can be created where it is meant to live. A dry-run
  create (``dryRun=All``: authorized and validated like a real one, nothing stored; the reconciler's RBAC already
  allows creating its Lease) answers 404 exactly when the namespace does not exist; without this check the
  elector would retry that create for ever and the replica would never write.

Anything else (unreachable, forbidden, a 5xx) is left to the informers and the elector, which retry and log it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import msgspec

from ..errors import UserError
from ..model import GROUP
from ..sources.cluster import CRD_API, RESOURCES
from .cache import ApiError, request

__all__ = ["check_crds", "check_lease_namespace"]

_KINDS = tuple(r.plural for r in RESOURCES if r.api_version == CRD_API)


class _Resource(msgspec.Struct):
    name: str


class _ResourceList(msgspec.Struct):
    resources: list[_Resource] = []


def _server(api: Any) -> str:
    return getattr(getattr(api, "configuration", None), "host", "") or "the API server"


def check_crds(api: Any, timeout: float | None = None) -> None:
    """Raise UserError when the jobtree.dev CRDs are not installed (or some kind is missing)."""
    server = _server(api)
    try:
        body = request(api, "GET", f"/apis/{CRD_API}", timeout=timeout)
    except ApiError as exc:
        if exc.status == 404:
            raise UserError(f"the {GROUP} CRDs are not installed on {server} ({exc.message or '404 Not Found'}): "
                            "kubectl apply -f crds/") from None
        return  # unreachable, forbidden …: the informers retry and say so
    try:
        served = {r.name for r in msgspec.json.decode(body, type=_ResourceList).resources}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    missing = [kind for kind in _KINDS if kind not in served]
    if missing:
        raise UserError(f"the {GROUP} CRDs on {server} lack {', '.join(missing)} (an older install?): "
                        "kubectl apply --server-side -f crds/")


def check_lease_namespace(api: Any, namespace: str, name: str, timeout: float | None = None) -> None:
    """Raise UserError when ``namespace`` does not exist, so the Lease ``namespace/name`` cannot be created."""
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": "kubectl-runs-preflight", "leaseDurationSeconds": 1},
    }
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    try:
        request(api, "POST", path, query=[("dryRun", "All")], body=lease, timeout=timeout)
    except ApiError as exc:
        if exc.status == 404:
            raise UserError(
                f"leader election: namespace {namespace} does not exist on {_server(api)}, so the Lease "
                f"{namespace}/{name} cannot be created: create it (kubectl create namespace {namespace}), "
                "choose another with --leader-election-namespace NS, or run one replica with --no-leader-elect"
            ) from None
        # 409 (the Lease exists), 403, unreachable …: the elector handles and logs these
