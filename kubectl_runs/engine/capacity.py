"""What the fleet's GPUs offer: GPUs per flavor of the nodes that hold usable slots (not out of service)."""

from __future__ import annotations

from ..model import Snapshot


def fleet_gpus(snapshot: Snapshot) -> dict[str, int]:
    """GPUs per ``gpu.flavor`` of every node not out of service (a node without the label counts under "")."""
    gpus: dict[str, int] = {}
    for node in snapshot.nodes:
        if not node.out_of_service and node.gpus:
            flavor = node.flavor or ""
            gpus[flavor] = gpus.get(flavor, 0) + node.gpus
    return gpus
