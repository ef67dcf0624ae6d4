"""Where the leader-election Lease lives: a ``coordination.k8s.io/v1`` Lease read and written through the
kubeconfig's ApiClient (client-go's ``resourcelock.LeaseLock``). reconciler/leader.py's elector only sees the
:class:`LeaseStore` protocol, so its tests can run it over a store of their own."""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import quote

__all__ = ["Conflict", "KubeLeaseStore", "LeaseError", "LeaseStore"]


class LeaseError(Exception):
    """A Lease request failed (transport, or an answer other than the ones the election handles)."""


class Conflict(LeaseError):
    """409: the Lease changed since it was read (update) or already exists (create)."""


class LeaseStore(Protocol):
    """Where the Lease lives. ``get`` returns the object or None (404); ``create`` and ``update`` return the
    stored object and raise :class:`Conflict` on 409 (``update`` sends ``metadata.resourceVersion``)."""

    def get(self) -> dict | None: ...
    def create(self, lease: dict) -> dict: ...
    def update(self, lease: dict) -> dict: ...


class KubeLeaseStore:
    """The Lease ``namespace/name`` on the API server of ``api_client`` (a configured kubernetes ApiClient)."""

    def __init__(self, api_client: Any, namespace: str, name: str, *, timeout: float = 5.0):
        self.api = api_client
        self.namespace = namespace
        self.name = name
        self.timeout = timeout
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases"
        self.path = f"{self.collection}/{quote(name)}"

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = self.api.param_serialize(
            method=method, resource_path=path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            response = self.api.call_api(*request, _request_timeout=self.timeout)
            response.read()
            status, data = response.status, response.data
        except ApiException as exc:
            status, data = exc.status, exc.body
        except Exception as exc:  # transport: refused, TLS, timeout
            raise LeaseError(f"{method} {path}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = data
        return status, decoded

    def _check(self, method: str, path: str, status: int, body: Any) -> dict:
        if 200 <= status <= 299 and isinstance(body, dict):
            return body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        if status == 409:
            raise Conflict(f"{method} {path}: 409 {message}")
        raise LeaseError(f"{method} {path}: {status} {message}")

    def get(self) -> dict | None:
        status, body = self._request("GET", self.path)
        if status == 404:
            return None
        return self._check("GET", self.path, status, body)

    def create(self, lease: dict) -> dict:
        status, body = self._request("POST", self.collection, lease)
        return self._check("POST", self.collection, status, body)

    def update(self, lease: dict) -> dict:
        status, body = self._request("PUT", self.path, lease)
        return self._check("PUT", self.path, status, body)
