"""The fleet gauges of the reconciler's metrics (reconciler/metrics.py): what the engine computes for one
snapshot at one instant — the numbers ``budgets usage`` prints (``accounting.ledger``; nothing here re-derives
them), the Reservations by state, backlog and ETA, the Runs by phase — as Prometheus metric families.

:func:`fleet_families` builds them whole; :class:`Fleet` is the collector that serves the last set, swapped
whole at each update, so an envelope that is gone stops being exported."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily

from ..engine.accounting import Ledger

#: upper bounds (seconds from now until a Pending reservation's earliestStart) of the ETA buckets
ETA_BUCKETS = (0.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 24 * 3600.0, 7 * 86400.0)
CLASS_FIELDS = ("owned", "shared", "borrowed", "unfunded", "spare")
ENVELOPE_LABELS = ("namespace", "budget", "envelope", "flavor", "owner")
STATES = ("Pending", "Activated", "Released", "Failed")
PENDING = (None, "Pending")


class Fleet:
    """The fleet's gauges as computed at one instant; swapped whole by ``families = …``, read by collect()."""

    def __init__(self) -> None:
        self.families: list[Any] = []

    def collect(self) -> Iterable[Any]:
        return list(self.families)

    def describe(self) -> Iterable[Any]:
        return []


def fleet_families(snapshot: Any, at: datetime, book: Ledger, phases: Mapping[str, str | None] | None = None
                   ) -> list[Any]:
    """The fleet gauges of ``snapshot`` at ``at``, ``book`` being the engine's ledger of the same snapshot and
    instant. ``phases`` (Run key -> status.phase) overrides the snapshot's stored phase of the Runs the caller
    has just written (their answers), so the gauges need not wait for a new snapshot."""
    return [*_budget_families(book), *_reservation_families(snapshot, at), _run_family(snapshot, phases or {}),
            GaugeMetricFamily("jobtree_fleet_updated_timestamp_seconds",
                              "Unix time of the instant the fleet gauges were computed at.", value=at.timestamp())]


def _budget_families(book: Ledger) -> list[Any]:
    gpus = GaugeMetricFamily("jobtree_budget_gpus", "GPUs charged to an envelope now, by class.",
                             labels=[*ENVELOPE_LABELS, "class"])
    concurrency = GaugeMetricFamily("jobtree_budget_concurrency_gpus", "GPUs an envelope funds at one instant.",
                                    labels=ENVELOPE_LABELS)
    headroom = GaugeMetricFamily("jobtree_budget_headroom_gpus",
                                 "GPUs an envelope can still fund now (0 outside its window).", labels=ENVELOPE_LABELS)
    consumed = GaugeMetricFamily("jobtree_budget_consumed_gpu_seconds",
                                 "GPU-seconds an envelope paid in its window (budgets usage shows GPU-hours: / 3600).",
                                 labels=ENVELOPE_LABELS)
    active = GaugeMetricFamily("jobtree_budget_window_active", "1 while now is inside the envelope's window.",
                               labels=ENVELOPE_LABELS)
    for _key, usage in sorted(book.envelopes.items()):
        meta = usage.budget.metadata
        labels = [meta.namespace, meta.name, usage.envelope.name, usage.envelope.flavor, usage.owner]
        for cls in CLASS_FIELDS:
            gpus.add_metric([*labels, cls], getattr(usage, cls))
        concurrency.add_metric(labels, usage.envelope.concurrency)
        headroom.add_metric(labels, usage.headroom)
        consumed.add_metric(labels, usage.consumed_seconds)
        active.add_metric(labels, 1 if usage.window_active else 0)
    aggregates = GaugeMetricFamily("jobtree_budget_aggregate_headroom_gpus", "GPUs an aggregate cap still allows now.",
                                   labels=["namespace", "budget", "aggregate"])
    for agg in book.aggregates:
        aggregates.add_metric([agg.budget.metadata.namespace, agg.budget.metadata.name, agg.name], agg.headroom)
    return [gpus, concurrency, headroom, consumed, active, aggregates]


def _reservation_families(snapshot: Any, at: datetime) -> list[Any]:
    states = dict.fromkeys(STATES, 0)
    backlog: dict[str, int] = {}
    etas: dict[str, list[float]] = {}
    for rsv in snapshot.reservations:
        state = rsv.status.state or "Pending"
        states[state] = states.get(state, 0) + 1
        if rsv.status.state in PENDING:
            flavor = rsv.spec.scope.flavor
            backlog[flavor] = backlog.get(flavor, 0) + 1
            etas.setdefault(flavor, []).append((rsv.spec.earliest_start - at).total_seconds())
    by_state = GaugeMetricFamily("jobtree_reservations", "Reservations by state.", labels=["state"])
    for state, count in sorted(states.items()):
        by_state.add_metric([state], count)
    pending = GaugeMetricFamily("jobtree_reservation_backlog", "Pending reservations, by flavor.", labels=["flavor"])
    for flavor, count in sorted(backlog.items()):
        pending.add_metric([flavor], count)
    eta = GaugeHistogramMetricFamily(
        "jobtree_reservation_eta_seconds",
        "Seconds from now until each Pending reservation's earliestStart (le=0: due or overdue).",
        labels=["flavor"],
    )
    for flavor, seconds in sorted(etas.items()):
        buckets = [(_le(bound), sum(1 for s in seconds if s <= bound)) for bound in ETA_BUCKETS]
        buckets.append(("+Inf", len(seconds)))
        eta.add_metric([flavor], buckets, gsum_value=sum(seconds))
    return [by_state, pending, eta]


def _run_family(snapshot: Any, phases: Mapping[str, str | None]) -> Any:
    counts: dict[str, int] = {}
    for run in snapshot.runs:
        phase = phases.get(run.key, run.status.phase)
        counts[phase or ""] = counts.get(phase or "", 0) + 1
    runs = GaugeMetricFamily("jobtree_runs", "Runs by stored status.phase (\"\" = not yet written).", labels=["phase"])
    for phase, count in sorted(counts.items()):
        runs.add_metric([phase], count)
    return runs


def _le(bound: float) -> str:
    return str(float(bound))  # the client's spelling of le ("300.0")
