"""Dynamic Resource Allocation's kinds (resource.k8s.io: ResourceClaims, their templates, DeviceClasses,
ResourceSlices), listed for ``pending``, ``explain pod`` and ``snapshot save`` at the version the server prefers:
v1beta1 (Kubernetes 1.32), v1beta2 (1.33) or v1 (1.34 on). One record reads the three (kubectl_runs.pods.model).
A server that serves no resource.k8s.io has DRA off: it has no claims, and that is not worth a note."""

from __future__ import annotations

import msgspec

from .cluster import Cluster, Forbidden, NotFound, Resource

DRA_GROUP = "resource.k8s.io"
# kind, plural, namespaced
_KINDS = (("ResourceClaim", "resourceclaims", True), ("ResourceClaimTemplate", "resourceclaimtemplates", True),
          ("DeviceClass", "deviceclasses", False), ("ResourceSlice", "resourceslices", False))
_KNOWN = ("v1", "v1beta2", "v1beta1")


class _Version(msgspec.Struct, frozen=True, rename="camel"):
    version: str = ""


class _Group(msgspec.Struct, frozen=True, rename="camel"):
    preferred_version: _Version = _Version()
    versions: tuple[_Version, ...] = ()


def claim_resources(cluster: Cluster) -> tuple[Resource, ...]:
    """DRA's kinds at the server's preferred version of resource.k8s.io (else the newest it serves that kubectl-runs
    reads); () when it serves none. An error other than a 404 is the caller's to report."""
    try:
        body = cluster.get(f"/apis/{DRA_GROUP}")
    except (NotFound, Forbidden):
        return ()
    try:
        group = msgspec.json.decode(body, type=_Group)
    except msgspec.DecodeError:
        return ()
    served = [v.version for v in group.versions]
    version = group.preferred_version.version
    if version not in _KNOWN:
        version = next((v for v in _KNOWN if v in served), "")
    if not version:
        return ()
    return tuple(Resource(kind, plural, f"{DRA_GROUP}/{version}", namespaced) for kind, plural, namespaced in _KINDS)


def served_claim_resources(source) -> tuple[Resource, ...]:
    """``claim_resources`` of the cluster ``source`` names."""
    return claim_resources(Cluster(source))
