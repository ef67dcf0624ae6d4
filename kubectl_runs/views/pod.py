"""The view of `kubectl runs explain pod`: a few labelled lines, kube-scheduler's verdict beside ours per reason,
the nearest nodes and the remedies."""

from __future__ import annotations

from ..engine.reports import plain
from ..pods.explain import NOT_CREATED, ExplainPodReport
from ..render import Column, Document, Section


def pod_document(report: ExplainPodReport) -> Document:
    d = report.deficit
    said = report.scheduler
    summary = [
        f"Pod:        {report.pod} ({report.workload}), {report.phase}, scheduler {report.scheduler_name}",
        f"Asks:       {report.gpus} {_unit(report)} on one node"
        + (f", waiting since {report.waiting_since}" if report.waiting_since else ""),
        f"Reason:     {report.reason}: {report.message}",
        f"Scheduler:  {said.message}" if said.message else "Scheduler:  no verdict (it has not tried, or another "
                                                              "scheduler or a gate holds the pod)",
        f"Ours:       {report.ours.message or 'it fits on some node now'}",
        "Agreement:  " + {True: "the scheduler's counts per reason equal ours",
                          False: "the scheduler and our recomputation differ (rows below); its message is the "
                                 "authority",
                          None: "nothing to compare"}[report.agrees],
        f"Deficit:    {d.kind}: {d.free_on_eligible} {'devices' if report.claims else 'GPUs'} free on the nodes it "
        "may use, at most "
        f"{d.largest_free_block} on one; the largest such node has {d.largest_node}",
    ]
    reasons = Section("Nodes per reason", report.reasons, (
        Column("REASON", lambda r: r.reason),
        Column("SCHEDULER", lambda r: r.scheduler),
        Column("OURS", lambda r: r.ours),
    ))
    nodes = Section("Nearest nodes", report.nodes, (
        Column("NODE", lambda n: n.node),
        Column("FREE", lambda n: n.free_gpus),
        Column("GPUS", lambda n: n.gpus),
        Column("FILTER", lambda n: n.filter or "fits"),
        Column("HOLDERS", lambda n: ", ".join(n.holders) or None, prose=True),
    ))
    remedies = Section("Remedies", report.remedies, (
        Column("KIND", lambda r: r.kind),
        Column("REMEDY", lambda r: r.message, prose=True),
    ))
    quota = Section("ResourceQuota refusals", report.quota, (
        Column("QUOTA", lambda q: q.quota),
        Column("RESOURCE", lambda q: q.resource),
        Column("HARD", lambda q: q.hard),
        Column("USED", lambda q: q.used),
        Column("ASKED", lambda q: q.requested),
        Column("RAISE-BY", lambda q: q.raise_by),
    ))
    claims = Section("DRA claims", report.claims, (
        Column("CLAIM", lambda c: c.claim),
        Column("SOURCE", lambda c: c.source, wide=True),
        Column("REQUEST", lambda c: c.request),
        Column("DEVICECLASS", lambda c: c.device_class),
        Column("DEVICES", lambda c: "All" if c.devices is None else c.devices),
        Column("ALLOCATED-ON", lambda c: ", ".join(c.allocated_on) or None),
    ))
    if report.phase == NOT_CREATED:  # a controller's pod the API server refused: no scheduler has seen it
        summary = [*summary[:3],
                   "Scheduler:  no pod exists (the API server refused it: FailedCreate), so no scheduler judged it",
                   f"Event:      {report.quota[0].event}" if report.quota else "Event:      none left"]
        return Document(data=plain(report), summary=summary, sections=(quota, remedies))
    sections = (*((claims,) if report.claims else ()), reasons, nodes, *((quota,) if report.quota else ()), remedies)
    return Document(data=plain(report), summary=summary, sections=sections)


def _unit(report: ExplainPodReport) -> str:
    if report.claims:  # GPUs claimed through DRA: devices of the driver its DeviceClass selects
        return f"{report.gpu_resource} devices (DRA)"
    return report.gpu_resource or "GPUs"
