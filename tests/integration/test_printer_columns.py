"""``kubectl get`` of the jobtree.dev kinds as a user reads it: an instant in the future (a Reservation's
earliestStart, a Run's status.earliestStart) is printed as the timestamp, not ``<invalid>`` (what kubectl shows for
a ``date`` column in the future)."""

from __future__ import annotations

import json

NS = "printer-columns"
FUTURE = "2099-01-01T00:00:00Z"


def _reservation() -> dict:
    return {
        "apiVersion": "jobtree.dev/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "later", "namespace": NS},
        "spec": {"runRef": {"namespace": NS, "name": "big"}, "scope": {"flavor": "H100-80GB"},
                 "payingEnvelope": {"budget": "b", "envelope": "e"}, "earliestStart": FUTURE},
    }


def test_future_earliest_start_is_readable(cluster):
    cluster.kubectl("create", "namespace", NS)
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_reservation()))
        table = cluster.kubectl("get", "reservations", "-n", NS).stdout
        header, row = table.splitlines()[:2]
        assert "EARLIESTSTART" in header
        assert FUTURE in row and "<invalid>" not in row, table
        run = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": "big", "namespace": NS},
               "spec": {"resources": {"gpuType": "H100-80GB", "totalGPUs": 8}}}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(run))
        cluster.kubectl("patch", "run", "big", "-n", NS, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"earliestStart": FUTURE}}))
        wide = cluster.kubectl("get", "runs", "-n", NS, "-o", "wide").stdout
        assert "EARLIESTSTART" in wide.splitlines()[0]
        assert FUTURE in wide and "<invalid>" not in wide, wide
    finally:
        # The objects first: this control plane runs no namespace controller, so a deleted namespace keeps what
        # is in it (Terminating) and other tests that read "the first Reservation" would meet this one.
        cluster.kubectl("delete", "reservations,runs", "--all", "-n", NS, "--wait=true", check=False)
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
