"""The reconciler's API clients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_api_factory(source: Any, pool_size: int = 8) -> Callable[[], Any]:
    """ApiClients built from kubeconfig (sources.cluster), sharing one Configuration: one per informer (each
    holds a watch open) and one for the writes."""
    from ..sources.cluster import _api_client

    configuration = _api_client(source).configuration
    configuration.connection_pool_maxsize = pool_size

    def make() -> Any:
        from kubernetes import client

        return client.ApiClient(configuration)

    return make
