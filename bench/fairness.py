"""A fairness simulation of the ledger keeper (issue 25): the real ``plan_ledger`` + ``apply_writes``
(kubectl_runs/reconciler/ledger/) driven over simulated time on a generated, oversubscribed fleet. Pure and
offline: no API server, no wall clock, a seeded RNG; the same arguments give the same result.

    from bench.fairness import simulate, render
    result = simulate(days=7, seed=1)                       # today's LedgerOptions()
    result = simulate(days=7, seed=1, options={"min_run_time": timedelta(hours=1)})   # LedgerOptions(**options)
    print(render(result))

``bench/bench_fairness.py`` is the command line (``python -m bench.bench_fairness --days 7``).

**The fleet** (``FLEETS``): fabric domains of 8-GPU nodes of one or two flavors, one node cordoned; a handful of
teams, one namespace and one Budget each, whose envelope concurrencies add up to more than the schedulable
capacity of each flavor (one team lends to ``org:ai:*``; some runs may borrow). Every envelope's window covers
the whole simulation.

**The workload** (``workload``): Runs arrive as a Poisson process (``arrivals_per_day``), each of one of the
shapes of ``SHAPES`` — 8 GPUs; 16 or 32 in groups of 8 (spread allowed); 16 or 32 in groups of 8 or 16 kept in
one domain (``allowCrossGroupSpread: false``); elastic 16→32 in steps of 8; 16 in groups of 8 with one spare
per group — never wider (spares included) than its team's envelope for the flavor or than the flavor's
schedulable capacity (one domain's, when kept in one domain): every generated run fits the fleet. Each run
needs a *work duration* (log-uniform, 1–24 h); about half report an ETA.

**The model of a run** (the choices, stated once):

- A run *runs* — accumulates work — while it holds its start width: every group of its start shape
  (``minTotalGPUs`` when elastic, else ``totalGPUs``, in groups of ``groupGPUs``) fully covered by open Active
  leases. Spares are not needed to make progress. An elastic run progresses at the same pace at any width at or
  above its minimum (growth is not modelled as speed-up).
- A preempted run **keeps the work it did** (it resumes from a checkpoint): losing a group stops its progress;
  when it holds its start width again it goes on where it stopped. A run that still holds some groups but not
  all of them holds those GPUs without progress (counted in utilization, not in useful utilization).
- A run that reports an ETA has ``status.eta.estimatedCompletion`` = the instant its remaining work completes
  if it keeps running, set when it starts running and removed when it stops (a stale ETA would mislead the
  forecast); a run that does not report has none.
- A run finishes at the instant it has received its work duration of running time: the driver sets
  ``status.phase: Succeeded`` at that instant, before the pass of that instant (which closes its leases).

**Time** steps to the next change, never on a fixed timer: the next arrival, the next completion, the next
pending Reservation's ``spec.earliestStart``, and ``settle`` (default 5 s) after each pass that wrote
something (or after which the driver changed a run) — but never sooner than ``min_gap`` (default 5 minutes)
after the previous pass: what falls due in between is taken at that pass (an arrival is admitted, a completed
run's leases are closed, a Reservation activates — evaluated at its ``earliestStart`` as the keeper always
does — up to ``min_gap`` late). Why: on today's keeper an activation can free GPUs that another run takes, and
the reserving run makes a new Reservation that falls due ``settle_delay`` (10 s) later, again and again for
hours (see bench/RESULTS.md, "Fairness simulation"); stepping every 10 s through that costs minutes per
simulated hour. With ``min_gap`` such a loop turns once per ``min_gap``: the *number* of such activations
scales with it (``--min-gap 60s`` gives four to six times as many), the waits and utilization barely move.
Each step at instant ``t``: the arrivals and completions
due at ``t``; ``writes = plan_ledger(snapshot, t, options)`` (as the reconciler's loop runs it: ``Keeper``); ``snapshot = apply_writes(snapshot, writes)``; then
the driver's bookkeeping (which runs started or stopped running, their ETAs). Arrivals stop after ``days``;
the simulation goes on for at most ``drain`` more (default 3 days) so that the backlog can finish, and stops
early when every run has finished. ``max_steps`` caps the loop (``Result.capped`` says it was hit).

**What is measured** (``Result``): see its fields. Lottery victims are the runs whose leases a pass closed
with ``closureReason: RandomPreempt``; one activation that takes several groups of a run is *one* preemption of
that run. ``ReclaimUnfunded`` (the other preempting kind) and the non-preempting ``DropSpare`` and ``Shrink``
closures are counted separately. An activation *preempted* when its actions include a preempting kind
(``Lottery`` or ``ReclaimUnfunded``); it *did not start its run* when, after the writes of that same pass, the
reserving run does not hold its start width. A run *fits the fleet* when its start width plus spares can be
placed on the schedulable nodes of its flavor when nothing else runs (in one domain when it must be); it is
*starved* when it fits and never started. Utilization = GPU-hours of open leases (Active and Spare) ÷
GPU-hours of schedulable capacity, over the arrival horizon ``[start, start + days]``; useful utilization
counts only the Active GPUs of runs that are running.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from kubectl_runs.engine.lottery import PREEMPTING_KINDS
from kubectl_runs.engine.packing import group_unit, place
from kubectl_runs.model import Budget, Eta, Node, Run, Snapshot
from kubectl_runs.reconciler.actions import Create, PatchStatus
from kubectl_runs.reconciler.ledger import Keeper, LedgerOptions, apply_writes
from kubectl_runs.timeutil import rfc3339

START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday; the simulated clock starts here
HOUR, DAY = 3600, 86400
GPUS_PER_NODE = 8
RANDOM_PREEMPT, RECLAIM_UNFUNDED = "RandomPreempt", "ReclaimUnfunded"
DROP_SPARE, SHRINK, COMPLETED = "DropSpare", "Shrink", "Completed"


# --- the fleet ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Team:
    namespace: str
    owner: str
    concurrency: Mapping[str, int]  # flavor -> envelope concurrency
    lends: bool = False
    weight: float = 1.0  # share of the arrivals


@dataclass(frozen=True)
class Fleet:
    name: str
    domains: tuple[tuple[str, str, int], ...]  # (domain, flavor, nodes of 8 GPUs)
    cordoned: tuple[str, ...]  # node names
    teams: tuple[Team, ...]
    arrivals_per_day: float  # the default arrival rate: offered load a little above capacity


FLEETS: dict[str, Fleet] = {
    # 128 GPUs, 120 schedulable (H100 88 in two domains, A100 32); envelopes 112 H100 and 48 A100.
    "default": Fleet(
        name="default",
        domains=(("h100-a", "H100-80GB", 6), ("h100-b", "H100-80GB", 6), ("a100-a", "A100-80GB", 4)),
        cordoned=("h100-b-06",),
        teams=(
            Team("llm", "org:ai:llm", {"H100-80GB": 40, "A100-80GB": 8}, weight=1.4),
            Team("vision", "org:ai:vision", {"H100-80GB": 32, "A100-80GB": 16}, weight=1.2),
            Team("speech", "org:ai:speech", {"H100-80GB": 24, "A100-80GB": 8}, lends=True, weight=0.8),
            Team("eval", "org:ai:eval", {"H100-80GB": 16, "A100-80GB": 16}, weight=1.0),
        ),
        arrivals_per_day=25.0,
    ),
    # 48 GPUs, 40 schedulable, one flavor in two domains; envelopes 56: for the tests (a day or two in seconds).
    "small": Fleet(
        name="small",
        domains=(("h100-a", "H100-80GB", 3), ("h100-b", "H100-80GB", 3)),
        cordoned=("h100-b-03",),
        teams=(
            Team("llm", "org:ai:llm", {"H100-80GB": 24}, weight=1.3),
            Team("vision", "org:ai:vision", {"H100-80GB": 16}),
            Team("speech", "org:ai:speech", {"H100-80GB": 16}, lends=True, weight=0.7),
        ),
        arrivals_per_day=9.0,
    ),
}


def fleet_objects(fleet: Fleet, until: datetime) -> tuple[tuple[Node, ...], tuple[Budget, ...]]:
    """The Nodes and Budgets of ``fleet``; every envelope's window covers [START − 1 day, ``until`` + 30 days)."""
    nodes = []
    for domain, flavor, count in fleet.domains:
        for i in range(1, count + 1):
            name = f"{domain}-{i:02d}"
            nodes.append({
                "kind": "Node",
                "metadata": {"name": name, "labels": {"gpu.flavor": flavor, "fabric.domain": domain}},
                "spec": {"unschedulable": True} if name in fleet.cordoned else {},
                "status": {"allocatable": {"nvidia.com/gpu": str(GPUS_PER_NODE)}},
            })
    window = {"start": rfc3339(START - timedelta(days=1)), "end": rfc3339(until + timedelta(days=30))}
    budgets = []
    for team in fleet.teams:
        envelopes = []
        for flavor, concurrency in team.concurrency.items():
            envelope: dict[str, Any] = {"name": flavor.split("-")[0].lower(), "flavor": flavor,
                                        "concurrency": concurrency, **window}
            if team.lends:
                envelope["lending"] = {"allow": True, "to": ["org:ai:*"]}
            envelopes.append(envelope)
        budgets.append({"kind": "Budget", "metadata": {"name": team.namespace, "namespace": team.namespace},
                        "spec": {"owner": team.owner, "envelopes": envelopes}})
    return (tuple(msgspec.convert(n, Node) for n in nodes), tuple(msgspec.convert(b, Budget) for b in budgets))


# --- the workload --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    weight: float
    total: int
    group: int | None = None
    spread: bool = True
    spares: int = 0
    elastic: tuple[int, int, int] | None = None  # (min, max, step); desired = max


SHAPES = (
    Shape("w8", 0.26, 8),
    Shape("w16-g8", 0.16, 16, group=8),
    Shape("w32-g8", 0.10, 32, group=8),
    Shape("w16-g8-local", 0.10, 16, group=8, spread=False),
    Shape("w32-g16-local", 0.10, 32, group=16, spread=False),
    Shape("elastic16-32", 0.16, 32, group=8, elastic=(16, 32, 8)),
    Shape("w16-g8-spare", 0.12, 16, group=8, spares=1),
)


@dataclass(frozen=True)
class Arrival:
    """One generated run: when it is created, its manifest, the running time it needs, whether it reports ETAs."""

    at: int  # seconds after START
    namespace: str
    name: str
    flavor: str
    shape: str
    spec: dict
    work: int  # seconds of running time to finish
    reports_eta: bool
    borrows: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _shape_spec(shape: Shape, flavor: str, borrows: bool) -> dict:
    spec: dict[str, Any] = {"resources": {"gpuType": flavor, "totalGPUs": shape.total}}
    if shape.group:
        spec["locality"] = {"groupGPUs": shape.group, "allowCrossGroupSpread": shape.spread}
    if shape.spares:
        spec["sparesPerGroup"] = shape.spares
    if shape.elastic:
        low, high, step = shape.elastic
        spec["malleable"] = {"minTotalGPUs": low, "maxTotalGPUs": high, "stepGPUs": step, "desiredTotalGPUs": high}
    if borrows:
        spec["funding"] = {"allowBorrow": True}
    return spec


def _start_need(shape: Shape) -> tuple[int, int | None]:
    """(start width + spares, the group's footprint) of a shape."""
    width = shape.elastic[0] if shape.elastic else shape.total
    groups = -(-width // shape.group) if shape.group else 1
    return width + shape.spares * groups, group_unit(shape.group, shape.spares)


def _fits(fleet: Fleet, shape: Shape, flavor: str, team: Team) -> bool:
    need, unit = _start_need(shape)
    if need > team.concurrency[flavor]:
        return False
    free = _schedulable_by_domain(fleet, flavor)
    return place(free, unit, shape.spread)[0] >= need


def _schedulable_by_domain(fleet: Fleet, flavor: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for domain, fl, count in fleet.domains:
        if fl != flavor:
            continue
        cordoned = sum(1 for i in range(1, count + 1) if f"{domain}-{i:02d}" in fleet.cordoned)
        out[domain] = out.get(domain, 0) + (count - cordoned) * GPUS_PER_NODE
    return out


def workload(fleet: Fleet, days: float, seed: int, arrivals_per_day: float | None = None,
             eta_fraction: float = 0.5, borrow_fraction: float = 0.3) -> list[Arrival]:
    """The runs that arrive in ``[0, days)`` (seeded): Poisson arrivals, a team by weight, a flavor by the team's
    envelopes, a shape of ``SHAPES`` that fits the team's envelope and the flavor's schedulable capacity."""
    rng = random.Random(seed)
    rate = (arrivals_per_day or fleet.arrivals_per_day) / DAY
    out: list[Arrival] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= days * DAY:
            return out
        team = rng.choices(fleet.teams, weights=[x.weight for x in fleet.teams])[0]
        flavors = sorted(team.concurrency)
        flavor = rng.choices(flavors, weights=[team.concurrency[f] for f in flavors])[0]
        shapes = [s for s in SHAPES if _fits(fleet, s, flavor, team)]
        shape = rng.choices(shapes, weights=[s.weight for s in shapes])[0]
        hours = math.exp(rng.uniform(0.0, math.log(24.0)))  # log-uniform 1–24 h (mean ~7.2 h)
        reports = rng.random() < eta_fraction
        borrows = rng.random() < borrow_fraction
        index = len(out)
        out.append(Arrival(
            at=int(t), namespace=team.namespace, name=f"{shape.name}-{index:04d}", flavor=flavor,
            shape=shape.name, spec=_shape_spec(shape, flavor, borrows), work=int(hours * 60) * 60,
            reports_eta=reports, borrows=borrows,
        ))


def fits_fleet(fleet: Fleet, arrival: Arrival) -> bool:
    """The run's start width plus spares can be placed on the schedulable nodes of its flavor with nothing else
    running (in one domain when its groups must stay in one)."""
    shape = next(s for s in SHAPES if s.name == arrival.shape)
    need, unit = _start_need(shape)
    return place(_schedulable_by_domain(fleet, arrival.flavor), unit, shape.spread)[0] >= need


# --- the result ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    key: str
    shape: str
    flavor: str
    arrived: float  # hours after START
    work_hours: float
    reports_eta: bool
    fits: bool
    first_start: float | None  # hours after START
    finished: float | None
    work_done_hours: float
    lottery_preemptions: tuple[float, ...]  # hours after START, one per activation that took its groups
    other_preemptions: int  # ReclaimUnfunded activations that took its groups

    @property
    def wait_hours(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.arrived


@dataclass(frozen=True)
class Result:
    """What one simulation measured. Times in hours; utilization as a fraction."""

    fleet: str
    seed: int
    days: float
    drain_days: float
    options: Mapping[str, Any]
    protection_hours: float
    capacity_gpus: int  # schedulable GPUs
    offered_load: float  # GPU-hours of work arrived (start width × work) ÷ capacity GPU-hours of the horizon
    runs_arrived: int
    runs_started: int
    runs_finished: int
    lottery_preemptions: int  # (activation, victim run) pairs with RandomPreempt closures
    lottery_victims: int  # runs preempted by a lottery at least once
    max_lottery_per_run: int
    lottery_twice_within_protection: int  # runs lottery victims twice or more within protection_hours
    reclaim_unfunded_preemptions: int  # (activation, run) pairs with ReclaimUnfunded closures
    closures: Mapping[str, int]  # leases closed, by closureReason
    reservations_created: int
    activations: int  # Reservations Activated (a decision recorded)
    activations_took_nothing: int  # Activated with no action
    activations_failed: int  # Failed (NotEnoughToFree, NotPlaceable, NotFunded, NotAuthorized): took nothing
    activations_took: int  # Activated with at least one action: took GPUs from other runs (any kind)
    activations_took_not_started: int  # of those: the reserving run still below its start width after the pass
    activations_preempting: int  # Activated with a Lottery or ReclaimUnfunded action (a preemption proper)
    activations_preempted_not_started: int  # of those: the reserving run still below its start width after the pass
    wait_median_hours: float | None
    wait_p95_hours: float | None
    wait_max_hours: float | None
    fitting_never_started: int  # starvation: fits the fleet, never started by the end
    unfinished: int  # started but not finished by the end
    utilization: float
    useful_utilization: float
    steps: int
    passes_with_writes: int
    writes: int
    ended_hours: float  # the simulated instant the simulation stopped at, hours after START
    capped: bool  # max_steps was reached before the end
    wall_seconds: float
    runs: tuple[RunRecord, ...] = field(default=(), repr=False)
    wasted_activations: tuple[str, ...] = field(default=(), repr=False)  # "reservation at HOURS h"
    starved: tuple[str, ...] = field(default=(), repr=False)

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["options"] = {k: str(v) for k, v in self.options.items()}
        return out


# --- the simulation ---------------------------------------------------------------------------------------------


@dataclass
class _Live:
    arrival: Arrival
    start_shape: tuple[int, ...]
    running_since: int | None = None
    work_done: int = 0
    first_start: int | None = None
    finished: int | None = None
    lottery: list[int] = field(default_factory=list)
    reclaimed: int = 0

    def completes_at(self) -> int | None:
        if self.running_since is None:
            return None
        return self.running_since + self.arrival.work - self.work_done


def _start_shape(spec: dict) -> tuple[int, ...]:
    malleable = spec.get("malleable")
    width = malleable["minTotalGPUs"] if malleable else spec["resources"]["totalGPUs"]
    group = (spec.get("locality") or {}).get("groupGPUs")
    if not group:
        return (width,)
    return tuple(min(group, width - i * group) for i in range(-(-width // group)))


def _at(seconds: int) -> datetime:
    return START + timedelta(seconds=seconds)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(q * len(ordered)) - 1)  # nearest rank
    return ordered[rank]


def ledger_options(options: Mapping[str, Any] | None) -> LedgerOptions:
    """``LedgerOptions(**options)`` when options are given, else today's defaults (``LedgerOptions()``): a field
    the running code does not have is its TypeError."""
    return LedgerOptions(**options) if options else LedgerOptions()


def simulate(days: float = 7.0, seed: int = 1, **settings: Any) -> Result:
    """Drive ``plan_ledger`` + ``apply_writes`` over ``days`` of arrivals and at most ``drain_days`` more; see the
    module's docstring and ``Simulation`` for the settings. ``options`` go to ``LedgerOptions(**options)`` only
    when given."""
    return Simulation(days, seed, **settings).run()


class Simulation:
    """One simulation (``simulate`` is ``Simulation(...).run()``); after ``run`` its ``snapshot`` is the fleet at
    ``ended`` (seconds after START), for tests that look at the objects themselves."""

    def __init__(
        self,
        days: float = 7.0,
        seed: int = 1,
        *,
        fleet: str | Fleet = "default",
        arrivals_per_day: float | None = None,
        drain_days: float = 3.0,
        protection: timedelta = timedelta(hours=6),
        settle: int = 5,
        min_gap: int = 300,
        max_steps: int = 50_000,
        prune: bool | str = True,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if settle < 1:
            raise ValueError("settle must be at least one second")
        self.fleet = FLEETS[fleet] if isinstance(fleet, str) else fleet
        self.days, self.seed, self.drain_days = days, seed, drain_days
        self.protection, self.settle, self.max_steps = protection, settle, max_steps
        self.min_gap, self.prune = max(1, min_gap), prune
        self.options = dict(options or {})
        self.ledger_options = ledger_options(options)
        self.keeper = Keeper(self.ledger_options)  # plan_ledger, each pass starting from the last one's values
        self.horizon = int(days * DAY)
        self.end = self.horizon + int(drain_days * DAY)
        self.arrivals = workload(self.fleet, days, seed, arrivals_per_day)
        nodes, budgets = fleet_objects(self.fleet, _at(self.end))
        self.capacity = sum(n.gpus for n in nodes if n.schedulable)
        self.snapshot = Snapshot(nodes=nodes, budgets=budgets)
        self.live: dict[str, _Live] = {}
        self.ended = 0

    @property
    def ended_at(self) -> datetime:
        """The simulated instant the last pass ran at."""
        return _at(self.ended)

    def run(self) -> Result:
        began = time.perf_counter()
        arrivals, horizon, end, settle = self.arrivals, self.horizon, self.end, self.settle
        snap = self.snapshot
        live = self.live
        next_arrival = 0
        closures: dict[str, int] = {}
        reclaim_pairs = 0
        reservations_created = activations = took_nothing = took = failed = preempting = wasted_preempting = 0
        wasted: list[str] = []
        lease_gpu_seconds = useful_gpu_seconds = 0
        steps = passes_with_writes = total_writes = 0
        t = 0
        capped = False

        while True:
            if steps >= self.max_steps:
                capped = True
                break
            steps += 1
            at = _at(t)
            # --- the workload changes due at t: completions, then arrivals
            changed_runs: dict[str, Run] = {}
            finished_now: set[str] = set()
            runs_by_key = snap.runs_by_key
            for state in live.values():
                done = state.completes_at()
                if done is not None and done <= t:
                    state.work_done = state.arrival.work
                    state.running_since = None
                    state.finished = t
                    finished_now.add(state.arrival.key)
                    run = runs_by_key[state.arrival.key]
                    changed_runs[run.key] = msgspec.structs.replace(
                        run, status=msgspec.structs.replace(run.status, phase="Succeeded", eta=None))
            new_runs = []
            while next_arrival < len(arrivals) and arrivals[next_arrival].at <= t:
                arrival = arrivals[next_arrival]
                next_arrival += 1
                new_runs.append(msgspec.convert({
                    "kind": "Run",
                    "metadata": {"name": arrival.name, "namespace": arrival.namespace,
                                 "creationTimestamp": rfc3339(_at(arrival.at))},
                    "spec": arrival.spec,
                }, Run))
                live[arrival.key] = _Live(arrival, _start_shape(arrival.spec))
            if changed_runs or new_runs:
                snap = _with_runs(snap, changed_runs, new_runs)

            # --- the ledger keeper's pass
            writes = self.keeper(snap, at)
            before = snap
            snap = apply_writes(snap, writes)
            total_writes += len(writes)
            if writes:
                passes_with_writes += 1

            # --- what the pass did
            lottery_pairs: set[tuple[str, str]] = set()
            reclaim_set: set[tuple[str, str]] = set()
            decided: list[tuple[str, dict]] = []
            for write in writes:
                if isinstance(write, Create) and write.kind == "Reservation":
                    reservations_created += 1
                if not isinstance(write, PatchStatus):
                    continue
                if write.kind == "GPULease" and "closureReason" in write.status:
                    reason = write.status["closureReason"]
                    closures[reason] = closures.get(reason, 0) + 1
                    lease = before.leases_by_key.get(write.key)
                    preemption = write.status.get("preemption") or {}
                    if lease is not None and reason == RANDOM_PREEMPT:
                        lottery_pairs.add((lease.run_key, preemption.get("reservation", "")))
                    elif lease is not None and reason == RECLAIM_UNFUNDED:
                        reclaim_set.add((lease.run_key, preemption.get("reservation", "")))
                elif write.kind == "Reservation":
                    state_ = write.status.get("state")
                    if state_ == "Activated" and "activation" in write.status:
                        decided.append((write.key, write.status["activation"]))
                    elif state_ == "Failed":
                        failed += 1
            for run_key, _reservation in sorted(lottery_pairs):
                if run_key in live:
                    live[run_key].lottery.append(t)
            for run_key, _reservation in sorted(reclaim_set):
                if run_key in live:
                    live[run_key].reclaimed += 1
            reclaim_pairs += len(reclaim_set)

            # --- who holds its start width now (the leases open after the pass)
            active: dict[str, dict[int, int]] = {}
            held_gpus = 0
            for lease in snap.leases:
                if not lease.open_at(at):
                    continue
                held_gpus += lease.gpus
                if lease.spec.slice.role == "Active":
                    groups = active.setdefault(lease.run_key, {})
                    groups[lease.spec.group] = groups.get(lease.spec.group, 0) + lease.gpus

            def running(state: _Live, active=active) -> bool:
                groups = active.get(state.arrival.key, {})
                return all(groups.get(i, 0) >= size for i, size in enumerate(state.start_shape))

            for key, activation in decided:
                activations += 1
                actions = activation.get("actions") or []
                if not actions:
                    took_nothing += 1
                    continue
                took += 1
                lottery = any(a.get("kind") in PREEMPTING_KINDS for a in actions)
                preempting += lottery
                reservation = snap.reservations_by_key.get(key)
                run_key = reservation.spec.run_ref.key if reservation is not None else ""
                state = live.get(run_key)
                if state is not None and state.finished is None and not running(state):
                    kinds = ",".join(sorted({a.get("kind", "") for a in actions}))
                    wasted.append(f"{key} at {t / HOUR:.2f} h ({kinds})")
                    wasted_preempting += lottery

            eta_changes: dict[str, Run] = {}
            runs_by_key = snap.runs_by_key
            for state in live.values():
                if state.finished is not None:
                    continue
                now_running = running(state)
                if now_running and state.running_since is None:
                    state.running_since = t
                    if state.first_start is None:
                        state.first_start = t
                    if state.arrival.reports_eta:
                        run = runs_by_key[state.arrival.key]
                        eta = Eta(estimated_completion=_at(t + state.arrival.work - state.work_done),
                                  source="workload")
                        eta_changes[run.key] = msgspec.structs.replace(
                            run, status=msgspec.structs.replace(run.status, eta=eta))
                elif not now_running and state.running_since is not None:
                    state.work_done += t - state.running_since
                    state.running_since = None
                    run = runs_by_key[state.arrival.key]
                    if run.status.eta is not None:
                        eta_changes[run.key] = msgspec.structs.replace(
                            run, status=msgspec.structs.replace(run.status, eta=None))
            if eta_changes:
                snap = _with_runs(snap, eta_changes, [])
            if self.prune:
                snap = _pruned(snap, finished_now, at, inert=self.prune != "finished")

            # --- the next instant: an arrival, a completion, a pending Reservation's earliestStart, a settle
            if t >= end or (next_arrival >= len(arrivals) and all(s.finished is not None for s in live.values())):
                break
            candidates = []
            if next_arrival < len(arrivals):
                candidates.append(arrivals[next_arrival].at)
            candidates.extend(c for c in (s.completes_at() for s in live.values()) if c is not None)
            for reservation in snap.reservations:
                if reservation.status.state in (None, "Pending") and reservation.status.activation is None:
                    candidates.append(int((reservation.spec.earliest_start - START).total_seconds()))
            if writes or eta_changes:
                candidates.append(t + settle)
            following = min(max(t + self.min_gap, min(candidates, default=end)), end)
            span = _clip(t, following, horizon)
            lease_gpu_seconds += span * held_gpus
            useful_gpu_seconds += span * sum(
                sum(active[s.arrival.key].values()) for s in live.values() if s.running_since is not None)
            t = following

        self.snapshot, self.ended = snap, t
        return self._result(
            began=began, closures=closures, reclaim_pairs=reclaim_pairs,
            reservations_created=reservations_created, activations=activations, took_nothing=took_nothing,
            took=took, failed=failed, preempting=preempting, wasted=wasted, wasted_preempting=wasted_preempting, lease_gpu_seconds=lease_gpu_seconds,
            useful_gpu_seconds=useful_gpu_seconds, steps=steps, passes_with_writes=passes_with_writes,
            total_writes=total_writes, capped=capped,
        )

    def _result(self, *, began: float, closures: dict[str, int], reclaim_pairs: int, reservations_created: int,
                activations: int, took_nothing: int, took: int, failed: int, preempting: int, wasted: list[str],
                wasted_preempting: int,
                lease_gpu_seconds: int, useful_gpu_seconds: int, steps: int, passes_with_writes: int,
                total_writes: int, capped: bool) -> Result:
        t, horizon, capacity = self.ended, self.horizon, self.capacity
        records = []
        for state in self.live.values():
            a = state.arrival
            work_done = state.work_done + (t - state.running_since if state.running_since is not None else 0)
            records.append(RunRecord(
                key=a.key, shape=a.shape, flavor=a.flavor, arrived=a.at / HOUR, work_hours=a.work / HOUR,
                reports_eta=a.reports_eta, fits=fits_fleet(self.fleet, a),
                first_start=None if state.first_start is None else state.first_start / HOUR,
                finished=None if state.finished is None else state.finished / HOUR,
                work_done_hours=work_done / HOUR,
                lottery_preemptions=tuple(x / HOUR for x in state.lottery), other_preemptions=state.reclaimed,
            ))
        window = self.protection.total_seconds()
        twice = sum(1 for s in self.live.values()
                    if any(b - a < window for a, b in zip(s.lottery, s.lottery[1:], strict=False)))
        waits = [w for w in (r.wait_hours for r in records) if w is not None]
        starved = tuple(r.key for r in records if r.fits and r.first_start is None)
        offered = sum(a.work / HOUR * sum(_start_shape(a.spec)) for a in self.arrivals)
        gpu_seconds = capacity * horizon
        return Result(
            fleet=self.fleet.name, seed=self.seed, days=self.days, drain_days=self.drain_days,
            options=dict(self.options), protection_hours=window / HOUR, capacity_gpus=capacity,
            offered_load=offered * HOUR / gpu_seconds if gpu_seconds else 0.0,
            runs_arrived=len(records),
            runs_started=sum(1 for r in records if r.first_start is not None),
            runs_finished=sum(1 for r in records if r.finished is not None),
            lottery_preemptions=sum(len(r.lottery_preemptions) for r in records),
            lottery_victims=sum(1 for r in records if r.lottery_preemptions),
            max_lottery_per_run=max((len(r.lottery_preemptions) for r in records), default=0),
            lottery_twice_within_protection=twice,
            reclaim_unfunded_preemptions=reclaim_pairs,
            closures=dict(sorted(closures.items())),
            reservations_created=reservations_created,
            activations=activations, activations_took_nothing=took_nothing, activations_failed=failed,
            activations_took=took, activations_took_not_started=len(wasted),
            activations_preempting=preempting, activations_preempted_not_started=wasted_preempting,
            wait_median_hours=statistics.median(waits) if waits else None,
            wait_p95_hours=_percentile(waits, 0.95), wait_max_hours=max(waits, default=None),
            fitting_never_started=len(starved),
            unfinished=sum(1 for r in records if r.first_start is not None and r.finished is None),
            utilization=lease_gpu_seconds / gpu_seconds if gpu_seconds else 0.0,
            useful_utilization=useful_gpu_seconds / gpu_seconds if gpu_seconds else 0.0,
            steps=steps, passes_with_writes=passes_with_writes, writes=total_writes, ended_hours=t / HOUR,
            capped=capped, wall_seconds=time.perf_counter() - began,
            runs=tuple(records), wasted_activations=tuple(wasted), starved=starved,
        )


def _clip(start: int, stop: int, horizon: int) -> int:
    """Seconds of [start, stop) inside [0, horizon)."""
    return max(0, min(stop, horizon) - max(start, 0))


def _with_runs(snap: Snapshot, changed: Mapping[str, Run], new: list[Run]) -> Snapshot:
    runs = tuple(changed.get(r.key, r) for r in snap.runs) + tuple(new)
    return dataclasses.replace(snap, runs=runs)


def _pruned(snap: Snapshot, finished: set[str], at: datetime, *, inert: bool = True) -> Snapshot:
    """``snap`` without what no later decision of the keeper reads, so that a pass costs what the live fleet
    costs, not what the history has piled up (on today's keeper a run can gather a Reservation a minute):

    - the GPULeases and Reservations of runs that finished, once none of their leases is open (the Runs stay): a
      finished run's closed leases only add GPU-hours (no envelope here has maxGPUHours), its Reservations are
      Released or Activated with every recorded closure done;
    - of a live run, its Released and Failed Reservations that record no activation (``plan`` reads only a
      pending Reservation), and its Activated ones whose recorded closures are all done, except the latest
      (what gives the run its place at the head of the admission order, and its activated domain).

    The one thing that changes: the keeper numbers a run's Reservations by how many it has, so a later
    Reservation of a live run may get a lower number, hence another name, hence another seed, than without
    pruning (the same kind of draw, not the same draw). ``prune="finished"`` (``inert=False``) drops only the
    objects of finished runs, which changes nothing at all (tests/unit/test_fairness_sim.py); ``prune=False``
    keeps everything."""
    done = {k for k in finished
            if not any(x.open_at(at) or not x.status.closed for x in snap.leases_by_run.get(k, ()))}
    leases = snap.leases_by_key
    latest_activated: dict[str, str] = {}
    for r in snap.reservations:
        if r.status.state == "Activated":
            latest_activated[r.spec.run_ref.key] = r.key

    def keep(r) -> bool:
        run = r.spec.run_ref.key
        if run in done:
            return False
        if not inert:
            return True
        state, activation = r.status.state, r.status.activation
        if state in ("Released", "Failed") and (activation is None or not activation.seed):
            return False
        if state == "Activated" and latest_activated.get(run) != r.key and activation is not None:
            return any(a.lease in leases and not leases[a.lease].status.closed for a in activation.actions)
        return True

    reservations = tuple(r for r in snap.reservations if keep(r))
    if not done and len(reservations) == len(snap.reservations):
        return snap
    return dataclasses.replace(
        snap,
        leases=tuple(x for x in snap.leases if x.run_key not in done) if done else snap.leases,
        reservations=reservations,
    )


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} h"


def render(result: Result) -> str:
    """The result as a Markdown table (what bench/RESULTS.md quotes)."""
    r = result
    options = ", ".join(f"{k}={v}" for k, v in r.options.items()) or "LedgerOptions() defaults"
    closures = ", ".join(f"{k} {v}" for k, v in r.closures.items()) or "none"
    rows = [
        ("fleet", f"{r.fleet}: {r.capacity_gpus} schedulable GPUs; seed {r.seed}; {r.days:g} days of arrivals "
                  f"+ up to {r.drain_days:g} days of drain; offered load (start widths × work) {r.offered_load:.2f}× capacity"),
        ("ledger options", options),
        ("runs arrived / started / finished", f"{r.runs_arrived} / {r.runs_started} / {r.runs_finished}"),
        ("lottery preemptions (RandomPreempt; activation × run)",
         f"{r.lottery_preemptions} of {r.lottery_victims} runs; at most {r.max_lottery_per_run} of one run"),
        (f"runs lottery victims twice or more within {r.protection_hours:g} h", str(r.lottery_twice_within_protection)),
        ("ReclaimUnfunded preemptions (activation × run)", str(r.reclaim_unfunded_preemptions)),
        ("leases closed, by closureReason", closures),
        ("Reservations created", str(r.reservations_created)),
        ("activations: total / took nothing / failed (nothing taken: Failed)",
         f"{r.activations} / {r.activations_took_nothing} / {r.activations_failed}"),
        ("activations that took GPUs / of them did not start their run in that pass",
         f"{r.activations_took} / **{r.activations_took_not_started}**"),
        ("activations with a Lottery or ReclaimUnfunded / of them did not start their run",
         f"{r.activations_preempting} / **{r.activations_preempted_not_started}**"),
        ("wait, arrival to first start: median / p95 / max",
         f"{_hours(r.wait_median_hours)} / {_hours(r.wait_p95_hours)} / {_hours(r.wait_max_hours)}"),
        ("runs that fit the fleet and never started (starvation)", str(r.fitting_never_started)),
        ("runs started but not finished at the end", str(r.unfinished)),
        ("GPU utilization over the arrival horizon (open leases / useful)",
         f"{r.utilization:.1%} / {r.useful_utilization:.1%}"),
        ("passes (with writes) / writes", f"{r.steps} ({r.passes_with_writes}) / {r.writes}"),
        ("ended at", f"{r.ended_hours:.1f} h{' (max_steps reached)' if r.capped else ''}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'measure'.ljust(width)} | value |", f"|{'-' * (width + 2)}|---|"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines)
