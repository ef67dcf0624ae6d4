"""Pending GPU consumers that are plain pods: the lean Pod record, and kube-scheduler's filters recomputed over the
Nodes (``fit``) so a pending pod's verdict can be explained node by node and checked against the scheduler's own."""
