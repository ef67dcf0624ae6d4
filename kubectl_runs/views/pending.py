"""The view of `kubectl runs pending`: one row per pending GPU consumer, a headline of the fleet's GPUs and the
rows per reason."""

from __future__ import annotations

from ..engine.reports import plain
from ..pods.pending import PendingReport
from ..render import Column, Document, Section
from ..text import counted


def pending_document(report: PendingReport) -> Document:
    g = report.gpus
    rows = report.rows
    blocks = ("" if g.smallest_pending_request is None else
              f", {g.free_in_large_enough_blocks:,} in blocks of {g.smallest_pending_request}+")
    summary = [
        f"GPUs: {g.total:,} in all; {g.held_by_leases:,} held by leases, {g.held_by_pods_outside_leases:,} by pods "
        f"outside leases; {g.free:,} free{blocks}",
        f"Pending: {counted(len(rows), 'consumer')} asking {sum(r.gpus for r in rows):,} GPUs"
        + ("; " + ", ".join(f"{c.reason} {c.rows}" for c in report.reasons) if report.reasons else ""),
    ]
    columns = (
        Column("KIND", lambda r: r.kind),
        Column("NAMESPACE", lambda r: r.namespace),
        Column("NAME", lambda r: r.name),
        Column("PODS", lambda r: r.pods if r.kind != "Run" or r.pods else None),
        Column("GPUS", lambda r: r.gpus),
        Column("RESOURCE", lambda r: r.gpu_resource or r.flavor or (r.device_class and f"DRA {r.device_class}"),
               wide=True),
        Column("WAITING-SINCE", lambda r: r.waiting_since, wide=True),
        Column("ADMITTED-BY", lambda r: r.admitted_by),
        Column("REASON", lambda r: r.reason),
        Column("MESSAGE", lambda r: r.message, prose=True, wide=True),
    )
    reasons = Section(
        "Reasons",
        report.reasons,
        (Column("REASON", lambda c: c.reason), Column("ROWS", lambda c: c.rows), Column("GPUS", lambda c: c.gpus)),
    )
    return Document(data=plain(report), rows=rows, columns=columns, summary=summary if rows else (), sections=(reasons,),
                    empty="No pending GPU consumers found.")
