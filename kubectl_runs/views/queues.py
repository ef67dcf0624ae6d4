"""The views of the Kueue reports: `queues usage` (rows per ClusterQueue × flavor × GPU resource, cohorts,
findings) and `explain workload|kaiwojob` (a few lines, the flavors tried, the remedies)."""

from __future__ import annotations

from ..kueue.explain import WorkloadExplanation
from ..kueue.model import show_quantity
from ..kueue.reports import plain
from ..kueue.usage import QueueRow, QueuesUsage
from ..render import TABLE, Column, Document, Section
from ..text import counted
from . import labelled_lines


def _limit(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def usage_document(report: QueuesUsage) -> Document:
    rows = report.rows
    queues_count = len({r.cluster_queue for r in rows})
    summary = [
        f"ClusterQueues: {counted(queues_count, 'queue')}, {counted(len(rows), 'flavor row')}"
        + (f", {counted(len(report.findings), 'finding')}" if report.findings else ""),
        f"GPUs: {sum(r.reserved for r in rows):,} reserved of {sum(r.nominal for r in rows):,} nominal; "
        f"{sum(r.pending for r in rows):,} pending; {sum(r.available for r in rows):,} available now "
        f"({sum(r.headroom for r in rows):,} own, {sum(r.cohort_can_lend for r in rows):,} from cohorts)",
    ]
    columns = (
        Column("CLUSTERQUEUE", lambda r: r.cluster_queue),
        Column("COHORT", lambda r: r.cohort or None, wide=True),
        Column("FLAVOR", lambda r: r.flavor),
        Column("RESOURCE", lambda r: r.resource),
        Column("NOMINAL", lambda r: r.nominal),
        Column("BORROW-LIMIT", lambda r: r.borrowing_limit, show=lambda r: _limit(r.borrowing_limit), wide=True),
        Column("LEND-LIMIT", lambda r: r.lending_limit, show=lambda r: _limit(r.lending_limit), wide=True),
        Column("RESERVED", lambda r: r.reserved),
        Column("ADMITTED", lambda r: r.admitted, wide=True),
        Column("PENDING", lambda r: r.pending, show=_pending),
        Column("HEADROOM", lambda r: r.headroom),
        Column("COHORT-LENDS", lambda r: r.cohort_can_lend),
        Column("MAX", lambda r: r.maximum, wide=True),
        Column("NODES", lambda r: r.nodes, wide=True),
        Column("NODE-GPUS", lambda r: r.node_gpus),
        Column("KUEUE-RESERVED", lambda r: r.kueue_reserved, wide=True),
    )
    cohorts = Section(
        "Cohorts",
        report.cohorts,
        (
            Column("COHORT", lambda c: c.cohort),
            Column("PARENT", lambda c: c.parent or None, wide=True),
            Column("FLAVOR", lambda c: c.flavor),
            Column("RESOURCE", lambda c: c.resource),
            Column("OWN-QUOTA", lambda c: c.nominal),
            Column("POOLED", lambda c: c.pooled),
            Column("IN-USE", lambda c: c.used),
            Column("FREE", lambda c: c.free),
        ),
    )
    findings = Section(
        "Findings",
        report.findings,
        (
            Column("KIND", lambda f: f.kind),
            Column("OBJECT", lambda f: f.object),
            Column("DETAIL", lambda f: f.detail, prose=True),
        ),
    )
    return Document(
        data=plain(report.report),
        rows=rows,
        columns=columns,
        summary=summary if rows else (),
        sections=(cohorts, findings),
        empty="No ClusterQueues found.",
    )


def _pending(row: QueueRow) -> str:
    if not row.pending:
        return "0"
    return f"{row.pending:,} ({row.pending_workloads})"


def workload_document(info: WorkloadExplanation, fmt: str) -> Document:
    wrap = fmt == TABLE
    w = info.workload
    lines: list[tuple[str, str]] = []
    if info.kaiwo:
        lines.append(("Kaiwo", info.kaiwo))
    lines.append(("Workload", f"{w.key}, {info.state}, priority {info.priority}"
                  + (f" ({w.spec.priority_class_name})" if w.spec.priority_class_name else "")))
    queue = info.local_queue or "(no queue-name)"
    if info.cluster_queue:
        queue += f" -> ClusterQueue {info.cluster_queue}" + (f" in cohort {info.cohort}" if info.cohort else "")
    else:
        queue += " -> no ClusterQueue"
    lines.append(("Queue", queue))
    asks = "; ".join(
        f"pod set {p.name}: {p.count} × " + (", ".join(f"{n} {r}" for r, n in sorted(p.per_pod.items())) or "no GPUs")
        for p in info.pod_sets
    )
    lines.append(("Asks", asks or "no pod sets"))
    if info.may_use:
        lines.append(("Flavor", "; ".join(f"pod set {ps}: {f or 'none fits'}" for ps, f in info.may_use.items())))
    if info.kueue_message:
        lines.append(("Kueue says", f'{info.kueue_reason or "-"}: "{info.kueue_message}"'))
    if info.matches_kueue is False and info.assignment_message:
        lines.append(("Now", f'"{info.assignment_message}" (the quota changed since Kueue last looked)'))
    for s in info.shortfalls:
        lines.append(("Shortfall", _shortfall_text(s)))
    if info.never_admitted:
        lines.append(("Never", _never_text(info)))
    if info.position is not None:
        p = info.position
        lines.append(("Position", f"{p.position} of {p.pending} pending in ClusterQueue {info.cluster_queue} "
                                  f"(priority, then creation time); {p.gpus_ahead} GPUs ahead"))
    for note in info.notes:
        lines.append(("Note", note))
    summary = labelled_lines(lines, wrap=wrap)
    flavors = Section(
        "Flavors",
        info.flavors,
        (
            Column("POD-SET", lambda f: f.pod_set),
            Column("FLAVOR", lambda f: f.flavor),
            Column("VERDICT", lambda f: f.verdict),
            Column("WHY", lambda f: "; ".join(f.reasons) or "-", prose=True),
        ),
    )
    remedies = Section(
        "Remedies",
        list(enumerate(info.remedies, 1)),
        (
            Column("#", lambda r: r[0]),
            Column("KIND", lambda r: r[1].kind),
            Column("GPUS", lambda r: r[1].gpus),
            Column("MESSAGE", lambda r: r[1].message, prose=True),
        ),
    )
    return Document(data=plain(info.report), summary=summary, sections=(flavors, remedies))


def _shortfall_text(s) -> str:
    limit = "no borrowing limit" if s.borrowing_limit is None else f"borrowing limit {s.borrowing_limit}"
    text = (f"{s.needed} {s.resource} in {s.flavor}: own quota {s.own_free} free ({s.nominal} nominal, "
            f"{s.reserved} reserved) -> short {s.own_short}; the cohort lends {s.cohort_free} ({limit}) -> "
            f"short {s.quota_short}")
    if s.quota_short:
        text += f" (Kueue: {s.quota_short} more needed)"
    text += (f"; nodes: {s.pods_fit} of its {s.pods} pods ({s.gpus_per_pod} GPUs each) fit whole on the "
             f"flavor's {s.nodes} node{'s' if s.nodes != 1 else ''} -> short {s.physical_short}")
    return text


def _never_text(info: WorkloadExplanation) -> str:
    """Why the queue as configured can never admit it: each pod set's request against the maximum per flavor."""
    by_pod_set: dict[tuple[str, str], list[str]] = {}
    for b in info.beyond_capacity:
        if info.may_use.get(b.pod_set) == "":  # the pod sets no flavor can hold (not one that took another flavor)
            by_pod_set.setdefault((b.pod_set, b.asks(show_quantity)), []).append(
                f"{show_quantity(b.maximum, b.resource)} in {b.flavor}")
    asks = "; ".join(f"pod set {ps} asks {asked}, the most ClusterQueue {info.cluster_queue} can ever admit is "
                     f"{', '.join(most)}" for (ps, asked), most in by_pod_set.items())
    return (f"{asks} (nominal quota plus what it may borrow): it can never be admitted by ClusterQueue "
            f"{info.cluster_queue} as configured")
