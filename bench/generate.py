"""A seeded generator of realistic fleets, written as one snapshot file (a JSON ``List``, API.md §2).

    python -m bench.generate --size large -o bench/out/large.json
    python -m bench.generate --nodes 64 --envelopes 64 --leases 2000 --seed 7 -o /tmp/fleet.json
    python -m bench.generate --size runs10k -o /tmp/runs10k.json    # issue 27's reconciler fleet (runs1k too)

(``runs1k``/``runs10k`` are not this generator's fleets: they write bench/scale_fleet.py's — issue 12's shape of
1,000 / 10,000 runs with 20,000 / 200,000 leases, the fleet bench/bench_scale.py loads into a live API server.)

What it builds (the same seed gives the same bytes):

* **Nodes** over three regions, two clusters each, in fabric domains of up to 32 nodes of 8 GPUs; flavors
  H100-80GB and A100-80GB (``nvidia.com/gpu``) and MI300X (``amd.com/gpu``); a few cordoned nodes and a few
  out of service (their last lease closed with ``NodeFailure``, none open since).
* **Budgets** for a family tree ``org:ai`` → ``org:ai:<team>`` → ``org:ai:<team>:<sub>``, one namespace per
  owner; every owner has an envelope per (region, flavor) whose window covers the whole history, plus
  envelopes of past and future quarters; one sub of each team lends to ``org:ai:*``; some aggregate caps.
  The current envelopes share each (region, flavor)'s GPUs (subs 1.5× by appetite, teams 0.3×, the org
  0.2×); every run is admitted as the reconciler would — paid by the first envelope (mostly its own, else a
  relative's, else a lender's) with room in every hour it runs, else minted unfunded — so no instant of the
  history is overdrawn; aggregate caps sit above the peak their envelopes reach.
* **Runs** of every shape — fixed, grouped (8/16/32-GPU groups on 1/2/4 nodes of one domain), elastic (Grow
  and Shrink leases), with spares (a GPU failure swaps a spare in), borrowing (paid by another team's lending
  envelope), shared (paid by the parent, the org or a sibling), a few minted unfunded — and pending runs, some
  with a pending Reservation.
* **GPULeases**: one lease = one group slice. Every node's slots are held by at most one lease at any instant
  over the whole history; the history is generated backwards from the snapshot time, so the leases open at
  that time are exactly the newest ones, and it spreads over months before it (Nov 2025 ± a few months).
  Closed leases carry realistic ``closureReason``s: Completed, Shrink, DropSpare, NodeFailure, RunDeleted, and
  ReclaimUnfunded / RandomPreempt from **activated Reservations** whose recorded seed, conflict set and actions
  follow API.md §4 exactly (computed here with hashlib, independently of the engine, so ``seeds verify`` is a
  real cross-check).
* **Planted findings** (unless ``--no-plants``), one of each kind ``leases audit`` reports, each on one named
  lease: DoubleBooked, UnknownNode, UnknownRun, UnknownEnvelope, ACLViolation, Overdraft, UnboundNamespace.
  Nothing else in the fleet is a finding.

Next to the snapshot it writes ``<path>.meta.json``: the sizes, counts, the evaluation time, the planted
findings and a pending run for ``plan`` to look at.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import math
import os
import random
import sys
import time
import uuid
from array import array
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

# --- the clock of every generated fleet ---------------------------------------------------------------------


def epoch(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


SNAPSHOT_TIME = "2025-11-20T12:00:00Z"
SNAPSHOT_AT = epoch(SNAPSHOT_TIME)
HISTORY_FROM = epoch("2025-07-01T00:00:00Z")  # the history is sized to start about here
NEXT_YEAR = epoch("2026-01-01T00:00:00Z")
MINUTE, HOUR, DAY = 60, 3600, 86400
SNAPSHOT_TIME_ANNOTATION = "jobtree.dev/snapshot-time"
API_VERSION = "jobtree.dev/v1alpha1"
GPUS_PER_NODE = 8
# Funding is admitted against hourly buckets of each envelope's usage (a lease counts in every hour it
# touches, so a bucket bound is an upper bound of every instant in it).
BUCKET_FROM = epoch("2024-07-01T00:00:00Z")
BUCKETS = (SNAPSHOT_AT - BUCKET_FROM) // HOUR + 1


@dataclass(frozen=True)
class Size:
    nodes: int
    envelopes: int
    leases: int


SIZES = {
    "small": Size(nodes=256, envelopes=128, leases=10_000),
    "large": Size(nodes=4096, envelopes=2000, leases=200_000),  # issue 2's fleet
    "history": Size(nodes=4096, envelopes=2000, leases=1_000_000),
}
SCALE_SIZES = {"runs1k": 10, "runs10k": 100}  # blocks of 100 runs of bench/scale_fleet.py (issue 27)

# flavor -> (short name, GPU resource, fabric name, instance type)
FLAVORS = {
    "H100-80GB": ("h100", "nvidia.com/gpu", "nvl", "gpu-h100x8"),
    "A100-80GB": ("a100", "nvidia.com/gpu", "nvl", "gpu-a100x8"),
    "MI300X": ("mi300", "amd.com/gpu", "xgmi", "gpu-mi300x8"),
}
REGIONS = {"us-west": "usw", "us-east": "use", "eu-central": "euc"}
# (region, flavor) -> share of the fleet's domains
COMBOS = {
    ("us-west", "H100-80GB"): 3.0,
    ("us-east", "H100-80GB"): 3.0,
    ("us-west", "A100-80GB"): 2.0,
    ("us-east", "MI300X"): 1.5,
    ("eu-central", "A100-80GB"): 1.5,
    ("eu-central", "MI300X"): 1.0,
}
TEAMS = (
    "rai", "mm", "nlp", "speech", "robotics", "infra", "safety", "search", "ads", "recsys", "vision", "audio", "code",
    "math", "bio", "chem", "climate", "games", "health", "legal", "finance", "maps", "music", "video", "translate",
    "agents", "alignment", "eval", "data", "tools", "retrieval", "chat", "cloud", "edge", "security", "privacy",
    "fraud", "ranking", "ocr", "docs", "shopping", "travel", "weather", "sports", "news", "kids", "education",
    "science", "quantum", "materials", "energy", "design", "photo", "avatar", "voice", "dialog", "planning",
    "reasoning",
)
SUBS = ("sys", "eval", "data", "research", "prod", "exp", "perf", "core")
RUN_WORDS = {
    1: ("eval", "sweep", "sft", "probe", "ablation", "bench"),
    2: ("finetune", "sft", "distill", "rlhf", "eval", "vit"),
    4: ("pretrain", "train", "rlhf", "distill", "asr", "diffusion"),
}
EXTRA_WINDOWS = (  # envelopes of other quarters: future ones not open yet, a past one long closed
    ("2026q1", epoch("2026-01-01T00:00:00Z"), epoch("2026-04-01T00:00:00Z")),
    ("2026q2", epoch("2026-04-01T00:00:00Z"), epoch("2026-07-01T00:00:00Z")),
    ("2025q1", epoch("2025-01-01T00:00:00Z"), epoch("2025-04-01T00:00:00Z")),
)
OWNED, SHARED, BORROWED, UNFUNDED = "owned", "shared", "borrowed", "unfunded"
CLASS_RANK = {UNFUNDED: 0, BORROWED: 1, SHARED: 2, OWNED: 3}
PLANTED_LEASES = 7  # DoubleBooked, UnknownNode, UnknownRun, UnknownEnvelope, ACLViolation, 2 for Overdraft
FAILURE_REASONS = ("NodeFailure", "RandomPreempt", "ReclaimUnfunded", "RunDeleted")


# --- API.md arithmetic, written out independently of the engine ------------------------------------------------


def parent(owner: str) -> str | None:
    head, sep, _ = owner.rpartition(":")
    return head if sep else None


def is_ancestor(ancestor: str, owner: str) -> bool:
    return ancestor != "" and owner.startswith(ancestor + ":")


def relation(lease_owner: str, envelope_owner: str) -> str:
    """The class of a funded slot (API.md §3 Classes)."""
    if lease_owner == envelope_owner:
        return OWNED
    if is_ancestor(lease_owner, envelope_owner) or is_ancestor(envelope_owner, lease_owner):
        return SHARED
    if parent(lease_owner) is not None and parent(lease_owner) == parent(envelope_owner):
        return SHARED
    return BORROWED


def derive_seed(reservation: str, at: int) -> str:
    """API.md §4: ``"0x" + sha256(f"{ns}/{name}|{at}")[:16]``."""
    return "0x" + hashlib.sha256(f"{reservation}|{iso(at)}".encode()).hexdigest()[:16]


def ticket(seed: str, run: str, group: int) -> str:
    return hashlib.sha256(f"{seed}|{run}|{group}".encode()).hexdigest()


# --- the fleet's records ----------------------------------------------------------------------------------------


class Envelope:
    __slots__ = ("budget", "concurrency", "end", "flavor", "lending_max", "lends", "lent", "max_gpu_hours", "name",
                 "region", "selector", "start", "used")

    def __init__(self, budget: Budget, name: str, region: str | None, flavor: str, start: int | None,
                 end: int | None, *, lends: bool = False, selector: dict[str, str] | None = None):
        self.budget, self.name, self.region, self.flavor = budget, name, region, flavor
        self.start, self.end = start, end  # None = the current window, fixed once the history is known
        self.lends = lends
        self.selector = selector if selector is not None else {"region": region}
        self.concurrency = 0
        self.lending_max = 0
        self.max_gpu_hours: int | None = None
        self.used: array | None = None  # GPUs charged per hour of the history (an upper bound)
        self.lent: array | None = None  # of which borrowed

    def room(self, first: int, last: int, gpus: int, borrowed: bool) -> bool:
        """Can it fund ``gpus`` more in every hour bucket from ``first`` to ``last``?"""
        held = 0 if self.used is None else max(self.used[first:last + 1])
        if held + gpus > self.concurrency:
            return False
        if borrowed and self.lent is not None and max(self.lent[first:last + 1]) + gpus > self.lending_max:
            return False
        return not borrowed or gpus <= self.lending_max

    def charge(self, first: int, last: int, gpus: int, borrowed: bool) -> None:
        if self.used is None:
            self.used = array("i", bytes(4 * BUCKETS))
        used = self.used
        for b in range(first, last + 1):
            used[b] += gpus
        if borrowed:
            if self.lent is None:
                self.lent = array("i", bytes(4 * BUCKETS))
            lent = self.lent
            for b in range(first, last + 1):
                lent[b] += gpus

    @property
    def owner(self) -> str:
        return self.budget.owner


class Budget:
    __slots__ = ("caps", "current", "envelopes", "name", "namespace", "owner")

    def __init__(self, namespace: str, name: str, owner: str):
        self.namespace, self.name, self.owner = namespace, name, owner
        self.envelopes: list[Envelope] = []
        self.current: dict[tuple[str, str], Envelope] = {}  # (region, flavor) -> the envelope of this window
        self.caps: list[tuple[str, list[Envelope], int]] = []

    def add(self, envelope: Envelope) -> Envelope:
        self.envelopes.append(envelope)
        return envelope


class Owner:
    """A sub-team that runs jobs: its namespace, Budget and relatives' Budgets."""

    __slots__ = ("budget", "name", "namespace", "siblings", "team", "team_budget")

    def __init__(self, name: str, namespace: str, budget: Budget, team: str, team_budget: Budget):
        self.name, self.namespace, self.budget, self.team, self.team_budget = name, namespace, budget, team, team_budget
        self.siblings: list[Owner] = []


class Run:
    __slots__ = ("created", "deleted", "eta", "failure", "flavor", "name", "namespace", "owner", "pending",
                 "phase", "preemptions", "spec")

    def __init__(self, namespace: str, name: str, owner: str, flavor: str, spec: dict[str, Any], created: int):
        self.namespace, self.name, self.owner, self.flavor, self.spec, self.created = (
            namespace, name, owner, flavor, spec, created)
        self.phase = "Running"
        self.failure = ""  # why a finished run failed
        self.eta: int | None = None
        self.deleted: int | None = None
        self.pending = ""  # a pending Reservation's name
        self.preemptions: list[dict[str, Any]] = []

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Lease:
    __slots__ = ("closure", "end", "group", "idx", "name", "namespace", "nodes", "owner", "payer", "preemption",
                 "reason", "role", "run", "run_ref", "start")

    def __init__(self, run: Run, name: str, group: int, nodes: tuple[str, ...], start: int, end: int | None,
                 payer: Envelope | None, *, role: str = "Active", reason: str = "Start",
                 idx: tuple[int, ...] | None = None):
        self.run, self.name, self.group, self.nodes, self.start, self.end, self.payer = (
            run, name, group, nodes, start, end, payer)
        self.namespace = run.namespace
        self.owner = run.owner
        self.run_ref = run.name
        self.role, self.reason = role, reason
        self.idx = idx  # slot ordinals on the (single) node; None = every slot of every node
        self.closure: str | None = "Completed" if end is not None else None
        self.preemption: tuple[str, str] | None = None

    @property
    def gpus(self) -> int:
        return GPUS_PER_NODE * len(self.nodes) if self.idx is None else len(self.idx)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def open_at(self, at: int) -> bool:
        return self.start <= at and (self.end is None or at < self.end)

    def slots(self) -> list[str]:
        if self.idx is None:
            return [f"{node}#{i}" for node in self.nodes for i in range(GPUS_PER_NODE)]
        node = self.nodes[0]
        return [f"{node}#{i}" for i in self.idx]


class Lane:
    """1, 2 or 4 nodes of one domain that always hold one group together; ``frontier`` is the earliest start
    of the leases on it so far (the history is generated backwards)."""

    __slots__ = ("domain", "frontier", "index", "nodes", "out_of_service", "reserved")

    def __init__(self, domain: Domain, nodes: tuple[str, ...], index: int):
        self.domain, self.nodes, self.index = domain, nodes, index
        self.frontier = SNAPSHOT_AT
        self.out_of_service = False
        self.reserved = False  # idle at the snapshot time: the planted findings go here


class Pool:
    __slots__ = ("domain", "lanes", "width")

    def __init__(self, domain: Domain, width: int, lanes: list[Lane]):
        self.domain, self.width, self.lanes = domain, width, lanes

    def latest(self) -> int:
        return max(lane.frontier for lane in self.lanes)


class Domain:
    """One fabric domain: nodes of one flavor, region and cluster. *Mixed* domains also host elastic runs,
    runs with spares, cordoned and failed nodes; *batch* domains host fixed and grouped runs only, so that
    their activations need only ReclaimUnfunded and the lottery."""

    __slots__ = ("cluster", "cordoned", "flavor", "leases", "mixed", "name", "nodes", "pools", "region")

    def __init__(self, name: str, region: str, cluster: str, flavor: str, mixed: bool, nodes: list[str]):
        self.name, self.region, self.cluster, self.flavor, self.mixed, self.nodes = (
            name, region, cluster, flavor, mixed, nodes)
        self.pools: list[Pool] = []
        self.leases: list[Lease] = []
        self.cordoned: set[str] = set()


@dataclass
class Activation:
    namespace: str
    name: str
    run: Run
    domain: Domain
    payer: Envelope
    at: int
    seed: str
    deficit: int
    conflict_set: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    freed: int


@dataclass
class PendingReservation:
    namespace: str
    name: str
    run: Run
    domain: Domain | None
    payer: Envelope
    earliest: int
    created: int


# --- the generator --------------------------------------------------------------------------------------------


class FleetGenerator:
    def __init__(self, *, nodes: int, envelopes: int, leases: int, seed: int = 1, plants: bool = True,
                 activations: int | None = None):
        if nodes < 64 or nodes % GPUS_PER_NODE:
            raise ValueError("--nodes must be a multiple of 8, at least 64")
        if leases < 200:
            raise ValueError("--leases must be at least 200")
        self.size = Size(nodes, envelopes, leases)
        self.seed = seed
        self.plants = plants
        self.rng = random.Random(seed)
        self.id_rng = random.Random(seed * 7919 + 17)  # uids only, so that they do not move the fleet
        self.runs: list[Run] = []
        self.leases: list[Lease] = []
        self.activations: list[Activation] = []
        self.pending: list[PendingReservation] = []
        self.planted: list[dict[str, Any]] = []
        self.extra_nodes: list[str] = []
        self.run_seq = 0
        self.domains: list[Domain] = []
        self.pools: list[Pool] = []
        self._layout()
        self._organisation()
        wanted = activations if activations is not None else max(2, leases // 10_000)
        batch = [d for d in self.domains if not d.mixed]
        self.activation_plan = [self.rng.randint(2, 5) for _ in range(min(wanted, 2 * len(batch)))]
        self.base_leases = leases - (PLANTED_LEASES if plants else 0) - sum(self.activation_plan)
        self._calibrate()

    # --- layout: regions, clusters, domains, nodes, lanes -------------------------------------------------------

    def _layout(self) -> None:
        nodes = self.size.nodes
        per_domain = 32 if nodes >= 256 else 8
        counts = {combo: 0 for combo in COMBOS}
        index_in_region: dict[str, int] = {}
        self.domain_of: dict[str, Domain] = {}
        left = nodes
        number = 0
        while left:
            size = min(per_domain, left)
            left -= size
            combo = min(COMBOS, key=lambda c: (counts[c] / COMBOS[c], list(COMBOS).index(c)))
            counts[combo] += 1
            region, flavor = combo
            position = index_in_region.get(region, 0)
            index_in_region[region] = position + 1
            cluster = f"{REGIONS[region]}{position % 2 + 1}"
            short, _resource, fabric, _instance = FLAVORS[flavor]
            name = f"{cluster}-{fabric}{position // 2:02d}"
            node_names = [f"{short}-{name}-n{i:02d}" for i in range(size)]
            domain = Domain(name, region, cluster, flavor, mixed=number % 2 == 0, nodes=node_names)
            number += 1
            self.domains.append(domain)
            self.domain_of.update(dict.fromkeys(node_names, domain))
            self._lanes(domain)

    def _lanes(self, domain: Domain) -> None:
        size = len(domain.nodes)
        widths = [4] * (size // 8) + [2] * (size // 8) + [1] * (size - 6 * (size // 8))
        by_width: dict[int, list[Lane]] = {}
        position = 0
        for width in widths:
            lane = Lane(domain, tuple(domain.nodes[position:position + width]), position)
            position += width
            by_width.setdefault(width, []).append(lane)
        for width in sorted(by_width, reverse=True):
            pool = Pool(domain, width, by_width[width])
            domain.pools.append(pool)
            self.pools.append(pool)

    # --- organisation: owners, namespaces, budgets, envelopes ------------------------------------------------

    def _organisation(self) -> None:
        rng = self.rng
        combos = list(COMBOS)
        per_budget = len(combos)
        plant_envelopes = 4 if self.plants else 0
        subs_per_team = 4
        room = self.size.envelopes - plant_envelopes
        teams = int(0.7 * room / (per_budget * (1 + subs_per_team)))
        while teams < 2 and subs_per_team > 2:
            subs_per_team -= 1
            teams = int(room / (per_budget * (1 + subs_per_team)))
        teams = max(2, teams)
        needed = (1 + teams * (1 + subs_per_team)) * per_budget + plant_envelopes
        if needed > self.size.envelopes:
            raise ValueError(f"--envelopes must be at least {needed} for this fleet's budget tree")
        self.budgets: list[Budget] = []
        org = self._budget("ai-platform", "ai", "org:ai")
        self.org_budget = org
        self.owners: list[Owner] = []
        self.lenders: list[Owner] = []
        for t in range(teams):
            team = TEAMS[t % len(TEAMS)] + ("" if t < len(TEAMS) else str(t // len(TEAMS) + 1))
            team_budget = self._budget(f"{team}-platform", team, f"org:ai:{team}")
            members = []
            for s in range(subs_per_team):
                sub = SUBS[s % len(SUBS)]
                budget = self._budget(f"{team}-{sub}", f"{team}-{sub}", f"org:ai:{team}:{sub}", lends=s == 0)
                owner = Owner(budget.owner, budget.namespace, budget, team, team_budget)
                members.append(owner)
                if s == 0:
                    self.lenders.append(owner)
            for owner in members:
                owner.siblings = [o for o in members if o is not owner]
            self.owners.extend(members)
        # some teams run much more than others
        weights = [rng.paretovariate(1.2) for _ in self.owners]
        self.owner_weights = [min(w, 20.0) for w in weights]
        self.combos_with_nodes = sorted({(d.region, d.flavor) for d in self.domains}, key=combos.index)
        self._budget_sizes(teams)

    def _budget_sizes(self, teams: int) -> None:
        """Concurrency of the current envelopes, set before any run is admitted: the subs' envelopes share 1.2×
        each (region, flavor)'s GPUs by their owner's appetite, the teams' 0.2× and the org's 0.1× more."""
        rng = self.rng
        capacity: dict[tuple[str, str], int] = {}
        for domain in self.domains:
            combo = (domain.region, domain.flavor)
            capacity[combo] = capacity.get(combo, 0) + GPUS_PER_NODE * len(domain.nodes)
        total_weight = sum(self.owner_weights)
        shares = [(o.budget, 1.5 * w / total_weight) for o, w in zip(self.owners, self.owner_weights, strict=True)]
        teams_seen = {id(o.team_budget): o.team_budget for o in self.owners}
        shares += [(budget, 0.3 / teams) for budget in teams_seen.values()]
        shares.append((self.org_budget, 0.2))
        for budget, share in shares:
            for combo, envelope in budget.current.items():
                gpus = capacity.get(combo, 0)
                envelope.concurrency = _round8(gpus * share) if gpus else 8 * rng.randint(1, 8)
                if envelope.lends:
                    envelope.lending_max = _round8(envelope.concurrency * 0.5)

    def _budget(self, namespace: str, name: str, owner: str, *, lends: bool = False) -> Budget:
        budget = Budget(namespace, name, owner)
        for region, flavor in COMBOS:
            envelope = Envelope(budget, f"{region}-{FLAVORS[flavor][0]}", region, flavor, None, None, lends=lends)
            budget.current[(region, flavor)] = budget.add(envelope)
        self.budgets.append(budget)
        return budget

    # --- durations ----------------------------------------------------------------------------------------------

    def _calibrate(self) -> None:
        """Pick the median run length so that ``base_leases`` fill the lanes from HISTORY_FROM to the snapshot."""
        lanes = sum(len(p.lanes) for p in self.pools)
        segments = self.base_leases / 1.15  # a few runs have more than one lease per group
        mean = lanes * (SNAPSHOT_AT - HISTORY_FROM) * 0.78 / segments
        self.sigma = 0.9
        self.median = mean / math.exp(self.sigma**2 / 2)

    def duration(self) -> int:
        value = self.median * math.exp(self.sigma * self.rng.gauss(0.0, 1.0))
        return int(min(max(value, 10 * MINUTE), 21 * DAY))

    def gap(self) -> int:
        return self.rng.randint(MINUTE, 30 * MINUTE)

    # --- the history, backwards from the snapshot time ------------------------------------------------------

    def generate(self) -> None:
        rng = self.rng
        for domain in self.domains:
            for pool in domain.pools:
                for lane in pool.lanes:
                    if rng.random() < 0.12:
                        lane.frontier = SNAPSHOT_AT - rng.randint(10 * MINUTE, 18 * HOUR)  # idle now
                    else:
                        lane.frontier = SNAPSHOT_AT + rng.randint(HOUR, 4 * DAY)  # busy: ends then
        self._mark_special_lanes()
        count = 0
        for lane in self._lanes_where(lambda lane: lane.out_of_service):
            count += self._failed_node_run(lane)
        count = self._fill(count, self.base_leases)
        made = sum(self._activate(domain_index, k) for domain_index, k in enumerate(self.activation_plan))
        planned = sum(self.activation_plan)
        self._fill(count, self.base_leases + planned - made)  # an activation that found no instant
        self._pending_runs()
        if self.plants:
            self._plant()
        self._finish_runs()
        self._size_envelopes()

    def _lanes_where(self, keep) -> list[Lane]:
        return [lane for pool in self.pools for lane in pool.lanes if keep(lane)]

    def _mark_special_lanes(self) -> None:
        rng = self.rng
        singles = [lane for lane in self._lanes_where(lambda lane: len(lane.nodes) == 1) if lane.domain.mixed]
        if self.plants:
            by_domain: dict[str, list[Lane]] = {}
            for lane in singles:
                by_domain.setdefault(lane.domain.name, []).append(lane)
            pair_domain = next((d for d in self.domains if len(by_domain.get(d.name, ())) >= 2), None)
            if pair_domain is None:
                raise ValueError("the fleet is too small to plant findings")
            pair = by_domain[pair_domain.name][:2]
            others = [lane for lane in singles if lane not in pair]
            step = max(1, len(others) // 3)
            chosen = pair + others[::step][:3]
            if len(chosen) < 5:
                raise ValueError("the fleet is too small to plant findings")
            self.plant_lanes = chosen
            for lane in chosen:
                lane.reserved = True
                lane.frontier = SNAPSHOT_AT - rng.randint(3 * HOUR, 8 * HOUR)
        free = [lane for lane in singles if not lane.reserved]
        failed = max(1, self.size.nodes // 512)
        for lane in free[len(free) // 2::max(1, len(free) // (2 * failed))][:failed]:
            lane.out_of_service = True
            lane.frontier = SNAPSHOT_AT - rng.randint(6 * HOUR, 5 * DAY)
        mixed_nodes = [n for d in self.domains if d.mixed for n in d.nodes]
        cordoned = max(1, self.size.nodes // 256)
        failed_nodes = {lane.nodes[0] for lane in self._lanes_where(lambda lane: lane.out_of_service)}
        planted_nodes = {n for lane in self._lanes_where(lambda lane: lane.reserved) for n in lane.nodes}
        candidates = [n for n in mixed_nodes if n not in failed_nodes and n not in planted_nodes]
        for name in rng.sample(candidates, min(cordoned, len(candidates))):
            domain = next(d for d in self.domains if name in d.nodes)
            domain.cordoned.add(name)

    def _fill(self, count: int, target: int) -> int:
        heap = [(-pool.latest(), i) for i, pool in enumerate(self.pools)]
        heapq.heapify(heap)
        while count < target:
            _, i = heapq.heappop(heap)
            pool = self.pools[i]
            count += self._history_run(pool, target - count)
            heapq.heappush(heap, (-pool.latest(), i))
        return count

    def _failed_node_run(self, lane: Lane) -> int:
        """The last run on a node that then went out of service: closed with NodeFailure, the run Failed."""
        owner = self._pick_owner()
        end = lane.frontier
        start = end - self.duration()
        run = self._new_run(owner, lane.domain.flavor, "eval", {"resources": self._resources(lane.domain, 8)}, start)
        lease = Lease(run, f"{run.name}-g0", 0, lane.nodes, start, end, None)
        lease.closure = "NodeFailure"
        self._fund(run, [lease], owner, lane.domain)
        run.phase, run.failure = "Failed", "NodeFailure"
        self._keep(run, [lease])
        lane.frontier = start
        return 1

    def _history_run(self, pool: Pool, remaining: int) -> int:
        rng = self.rng
        domain = pool.domain
        lanes = sorted(pool.lanes, key=lambda lane: (-lane.frontier, lane.index))
        r = rng.random()
        if pool.width == 1:
            shape = "fixed" if r < 0.3 else ("spares" if domain.mixed and r < 0.6 else "grouped")
        else:
            shape = "fixed" if r < 0.25 else (
                "elastic" if domain.mixed and len(lanes) >= 2 and r < 0.45 else "grouped")
        if shape == "fixed":
            k = 1
        elif shape == "elastic":
            k = rng.randint(2, len(lanes))
        else:
            k = rng.choices(range(1, len(lanes) + 1), weights=[1 / n for n in range(1, len(lanes) + 1)])[0]
        chosen = lanes[:k]
        end = min(lane.frontier for lane in chosen) - self.gap()
        length = self.duration()
        start = end - length
        if end > SNAPSHOT_AT and start >= SNAPSHOT_AT - 5 * MINUTE:
            start = SNAPSHOT_AT - rng.randint(5 * MINUTE, max(10 * MINUTE, length // 2))
        owner = self._pick_owner()
        plan = self._shape(shape, chosen, pool.width, owner, start, end)
        if plan is None or len(plan[1]) > remaining:
            plan = self._shape("fixed", lanes[:1], pool.width, owner, start, end)
            chosen = lanes[:1]
        run, leases = plan
        self._fund(run, leases, owner, domain)
        first = min(lease.start for lease in leases)
        for lane in chosen:
            lane.frontier = min(lane.frontier, first)
        self._keep(run, leases)
        return len(leases)

    def _pick_owner(self) -> Owner:
        return self.rng.choices(self.owners, weights=self.owner_weights)[0]

    def _candidates(self, owner: Owner, domain: Domain) -> list[tuple[Envelope, Owner | None]]:
        """Envelopes that may pay for ``owner`` here, in the order it tries them: mostly its own first, then its
        parent's, the org's or a sibling's (shared), or another team's lending envelope (borrowed)."""
        rng = self.rng
        combo = (domain.region, domain.flavor)
        own = (owner.budget.current[combo], None)
        relatives = [(owner.team_budget.current[combo], None), (self.org_budget.current[combo], None)]
        if owner.siblings:
            relatives.append((rng.choice(owner.siblings).budget.current[combo], None))
        rng.shuffle(relatives)
        lender = rng.choice([o for o in self.lenders if o.team != owner.team])
        borrowed = [(lender.budget.current[combo], lender)]
        r = rng.random()
        if r < 0.80:
            return [own, *relatives, *borrowed]
        if r < 0.90:
            return [*relatives, own, *borrowed]
        return [*borrowed, own, *relatives]

    def _fund(self, run: Run, leases: list[Lease], owner: Owner, domain: Domain,
              candidates: list[tuple[Envelope, Owner | None]] | None = None) -> Envelope | None:
        """Pay for the run's leases from the first envelope with room in every hour they touch (as the
        reconciler admits runs), else mint them unfunded; a few runs in batch domains start unfunded anyway,
        on idle capacity."""
        if candidates is None:
            if not domain.mixed and self.rng.random() < 0.03:
                candidates = []
            else:
                candidates = self._candidates(owner, domain)
        first = _bucket(min(lease.start for lease in leases))
        last = max(_last_bucket(lease) for lease in leases)
        gpus = sum(lease.gpus for lease in leases)
        for envelope, lender in candidates:
            borrowed = lender is not None
            if envelope.room(first, last, gpus, borrowed):
                for lease in leases:
                    lease.payer = envelope
                    envelope.charge(_bucket(lease.start), _last_bucket(lease), lease.gpus, borrowed)
                if borrowed:
                    run.spec["funding"] = {"allowBorrow": True, "maxBorrowGPUs": run.spec["resources"]["totalGPUs"],
                                           "sponsors": [lender.name]}
                elif self.rng.random() < 0.08:
                    sponsor = self.rng.choice([o for o in self.lenders if o.team != owner.team])
                    run.spec["funding"] = {"allowBorrow": True, "maxBorrowGPUs": GPUS_PER_NODE,
                                           "sponsors": [sponsor.name]}
                return envelope
        return None

    def _resources(self, domain: Domain, gpus: int) -> dict[str, Any]:
        return {"gpuType": domain.flavor, "totalGPUs": gpus}

    def _new_run(self, owner: Owner, flavor: str, word: str, spec: dict[str, Any], start: int) -> Run:
        self.run_seq += 1
        total = spec["resources"]["totalGPUs"]
        run = Run(owner.namespace, f"{word}-{total}-{self.run_seq:06d}", owner.name, flavor, spec,
                  start - self.rng.randint(MINUTE, 2 * HOUR))
        return run

    def _shape(self, shape: str, chosen: list[Lane], width: int, owner: Owner, start: int,
               end: int) -> tuple[Run, list[Lease]] | None:
        rng = self.rng
        domain = chosen[0].domain
        group_gpus = GPUS_PER_NODE * width
        k = len(chosen)
        word = rng.choice(RUN_WORDS[width])
        spec: dict[str, Any]
        if shape == "fixed":
            spec = {"resources": self._resources(domain, group_gpus)}
        elif shape == "spares":
            group_gpus = rng.choice((6, 7))
            spec = {
                "resources": self._resources(domain, group_gpus * k),
                "locality": {"groupGPUs": group_gpus, "allowCrossGroupSpread": True},
                "sparesPerGroup": GPUS_PER_NODE - group_gpus,
            }
        else:
            spec = {
                "resources": self._resources(domain, group_gpus * k),
                "locality": {"groupGPUs": group_gpus, "allowCrossGroupSpread": rng.random() < 0.7},
            }
        if shape == "elastic":
            k_min = rng.randint(1, k - 1)
            k_start = rng.randint(k_min, k)
            spec["resources"]["totalGPUs"] = group_gpus * k
            spec["malleable"] = {
                "minTotalGPUs": group_gpus * k_min,
                "maxTotalGPUs": group_gpus * k,
                "stepGPUs": group_gpus,
                "desiredTotalGPUs": group_gpus * k,
            }
        payer = None  # chosen by _fund once the leases are known
        run = self._new_run(owner, domain.flavor, word, spec, start)
        open_run = end > SNAPSHOT_AT
        stop = None if open_run else end
        leases: list[Lease] = []
        if shape in ("fixed", "grouped"):
            for g, lane in enumerate(chosen):
                leases.append(Lease(run, f"{run.name}-g{g}", g, lane.nodes, start, stop, payer))
        elif shape == "elastic":
            length = end - start
            grow_at = start + int(length * rng.uniform(0.1, 0.4))
            shrink = rng.random() < 0.35
            shrink_count = rng.randint(1, k - k_min) if shrink else 0
            shrink_at = end - int(length * rng.uniform(0.05, 0.3))
            for g, lane in enumerate(chosen):
                grown = g >= k_start
                begin = grow_at if grown else start
                if begin >= SNAPSHOT_AT:
                    continue
                lease = Lease(run, f"{run.name}-g{g}", g, lane.nodes, begin, stop, payer,
                              reason="Grow" if grown else "Start")
                if g >= k - shrink_count and begin < shrink_at < SNAPSHOT_AT:
                    lease.end, lease.closure = shrink_at, "Shrink"
                leases.append(lease)
        else:  # spares
            spares = GPUS_PER_NODE - group_gpus
            swap_group = rng.randrange(k) if rng.random() < 0.25 else None
            for g, lane in enumerate(chosen):
                active = tuple(range(group_gpus))
                spare = tuple(range(group_gpus, GPUS_PER_NODE))
                name = f"{run.name}-g{g}"
                first = Lease(run, name, g, lane.nodes, start, stop, payer, idx=active)
                backup = Lease(run, f"{name}-spare", g, lane.nodes, start, stop, payer, role="Spare", idx=spare)
                leases += [first, backup]
                limit = min(end, SNAPSHOT_AT)
                if g == swap_group and limit - start > HOUR:
                    at = start + int((limit - start) * rng.uniform(0.2, 0.9))
                    broken = rng.randrange(group_gpus)
                    first.end = backup.end = at
                    first.closure = backup.closure = "NodeFailure"
                    swapped = (*(i for i in active if i != broken), group_gpus)
                    leases.append(Lease(run, f"{name}-swap1", g, lane.nodes, at, stop, payer, reason="Swap",
                                        idx=swapped))
                    if spares > 1:
                        leases.append(Lease(run, f"{name}-spare-swap1", g, lane.nodes, at, stop, payer,
                                            role="Spare", reason="Swap", idx=spare[1:]))
                elif rng.random() < 0.1 and limit - start > HOUR:
                    backup.end = start + int((limit - start) * rng.uniform(0.2, 0.9))
                    backup.closure = "DropSpare"
        if not leases:
            return None
        if open_run:
            run.phase = "Running"
            if rng.random() < 0.7:
                run.eta = end
        else:
            fate = rng.random()
            if fate < 0.02 and shape != "spares":
                victim = rng.choice(leases)
                if victim.closure == "Completed":
                    victim.closure = "NodeFailure"
                    run.phase, run.failure = "Failed", "NodeFailure"
            elif fate < 0.1 and end > SNAPSHOT_AT - 3 * DAY:
                for lease in leases:
                    if lease.end == end:
                        lease.closure = "RunDeleted"
                run.deleted = end - self.rng.randint(MINUTE, 10 * MINUTE)
                run.phase, run.failure = "Failed", "RunDeleted"
        return run, leases

    def _keep(self, run: Run, leases: list[Lease]) -> None:
        self.runs.append(run)
        self.leases.extend(leases)
        domain = self.domain_of[leases[0].nodes[0]]
        if not domain.mixed:
            domain.leases.extend(leases)

    # --- activations (API.md §4) -------------------------------------------------------------------------------

    def _activate(self, number: int, k: int) -> int:
        """A Reservation that activated in a batch domain: free ``k`` nodes for a run of k 8-GPU groups by
        ReclaimUnfunded first, then the lottery. Returns the leases it added (0 when no instant fits)."""
        rng = self.rng
        batch = [d for d in self.domains if not d.mixed]
        domain = batch[number % len(batch)]
        lanes = [lane for pool in domain.pools for lane in pool.lanes]
        low = max(lane.frontier for lane in lanes) + DAY  # every lane has history before this instant
        high = SNAPSHOT_AT - HOUR
        if low >= high:
            return 0
        for _attempt in range(80):
            owner = self._pick_owner()
            at = rng.randrange(low, high)
            holding = [lease for lease in domain.leases if lease.role == "Active" and lease.open_at(at)]
            busy = {node for lease in holding for node in lease.nodes}
            free = [node for node in domain.nodes if node not in busy]
            if len(free) >= k:
                continue
            deficit = GPUS_PER_NODE * (k - len(free))
            run_name = f"reserved-{GPUS_PER_NODE * k}-{self.run_seq + 1:06d}"
            reservation = f"{run_name}-r1"
            seed = derive_seed(f"{owner.namespace}/{reservation}", at)

            def draw_key(lease: Lease, seed: str = seed) -> tuple[int, str]:
                cls = UNFUNDED if lease.payer is None else relation(lease.owner, lease.payer.owner)
                return (CLASS_RANK[cls], ticket(seed, lease.run.key, lease.group))

            unfunded = sorted((lease for lease in holding if lease.payer is None), key=draw_key)
            freed = 0
            actions: list[tuple[str, Lease]] = []
            for lease in unfunded:
                if freed >= deficit:
                    break
                actions.append(("ReclaimUnfunded", lease))
                freed += lease.gpus
            reclaimed = {id(lease) for _, lease in actions}
            left = sorted((lease for lease in holding if id(lease) not in reclaimed), key=draw_key)
            for lease in left:
                if freed >= deficit:
                    break
                actions.append(("Lottery", lease))
                freed += lease.gpus
            if freed < deficit:
                continue
            nodes = (free + [node for _, lease in actions for node in lease.nodes])[:k]
            wanted = set(nodes)
            next_start: int | None = None
            for lease in domain.leases:
                if lease.start > at and wanted.intersection(lease.nodes):
                    next_start = lease.start if next_start is None else min(next_start, lease.start)
            if next_start is not None:
                end: int | None = next_start - self.gap()
            else:
                end = at + self.duration()
                end = None if end >= SNAPSHOT_AT else end
            if end is not None and end - at < 30 * MINUTE:
                continue
            payer = owner.budget.current[(domain.region, domain.flavor)]
            stop = SNAPSHOT_AT + 1 if end is None else end
            if not payer.room(_bucket(at), (stop - 1 - BUCKET_FROM) // HOUR, GPUS_PER_NODE * k, False):
                continue
            return self._record_activation(owner, domain, payer, k, at, seed, deficit, nodes, end, left,
                                           actions, reservation)
        return 0

    def _record_activation(self, owner: Owner, domain: Domain, payer: Envelope, k: int, at: int, seed: str,
                           deficit: int, nodes: list[str], end: int | None, left: list[Lease],
                           actions: list[tuple[str, Lease]], reservation: str) -> int:
        spec = {
            "resources": self._resources(domain, GPUS_PER_NODE * k),
            "locality": {"groupGPUs": GPUS_PER_NODE, "allowCrossGroupSpread": False},
        }
        run = self._new_run(owner, domain.flavor, "reserved", spec, at - self.rng.randint(HOUR, 2 * DAY))
        run.created = min(run.created, at - HOUR)
        key = f"{owner.namespace}/{reservation}"
        conflict_set = []
        for lease in left:
            cls = UNFUNDED if lease.payer is None else relation(lease.owner, lease.payer.owner)
            conflict_set.append({"run": lease.run.key, "group": lease.group, "owner": lease.owner, "class": cls,
                                 "gpus": lease.gpus, "ticket": ticket(seed, lease.run.key, lease.group)})
        recorded = []
        for kind, lease in actions:
            recorded.append({"kind": kind, "run": lease.run.key, "group": lease.group, "lease": lease.key,
                             "gpus": lease.gpus})
            lease.end = at
            lease.closure = "ReclaimUnfunded" if kind == "ReclaimUnfunded" else "RandomPreempt"
            lease.preemption = (key, seed)
            lease.run.preemptions.append({"reservation": key, "seed": seed, "at": iso(at), "gpus": lease.gpus})
        added = [Lease(run, f"{run.name}-g{g}", g, (node,), at, end, None) for g, node in enumerate(nodes)]
        self._fund(run, added, owner, domain, [(payer, None)])
        if end is None and self.rng.random() < 0.7:
            run.eta = SNAPSHOT_AT + self.rng.randint(HOUR, 3 * DAY)
        self._keep(run, added)
        self.activations.append(Activation(owner.namespace, reservation, run, domain, payer, at, seed, deficit,
                                           conflict_set, recorded, sum(a["gpus"] for a in recorded)))
        return len(added)

    # --- pending runs --------------------------------------------------------------------------------------

    def _pending_runs(self) -> None:
        rng = self.rng
        count = max(3, self.size.leases // 20_000)
        for i in range(count):
            owner = self._pick_owner() if i else max(self.owners, key=lambda o: self.owner_weights[self.owners.index(o)])
            region, flavor = self.combos_with_nodes[i % len(self.combos_with_nodes)]
            group = rng.choice((8, 16, 32)) if i else 32
            groups = rng.randint(1, 8) if i else 8
            spec: dict[str, Any] = {
                "resources": {"gpuType": flavor, "totalGPUs": group * groups},
                "locality": {"groupGPUs": group, "allowCrossGroupSpread": rng.random() < 0.6},
            }
            if i % 4 == 0:
                lender = rng.choice([o for o in self.lenders if o.team != owner.team])
                spec["funding"] = {"allowBorrow": True, "maxBorrowGPUs": group * max(1, groups // 2),
                                   "sponsors": [lender.name]}
            if i % 5 == 3 and groups >= 2:
                spec["malleable"] = {"minTotalGPUs": group, "maxTotalGPUs": group * groups, "stepGPUs": group,
                                     "desiredTotalGPUs": group * groups}
            created = SNAPSHOT_AT - rng.randint(10 * MINUTE, 6 * HOUR)
            run = self._new_run(owner, flavor, "queued", spec, created + MINUTE)
            run.created = created
            run.phase = "Pending"
            self.runs.append(run)
            if i % 2 == 0:
                domains = [d for d in self.domains if (d.region, d.flavor) == (region, flavor)]
                scoped = rng.choice(domains) if rng.random() < 0.5 and i else None  # the plan target: any domain
                run.phase = "Reserved"
                run.pending = f"{run.name}-r1"
                self.pending.append(PendingReservation(
                    owner.namespace, run.pending, run, scoped, owner.budget.current[(region, flavor)],
                    SNAPSHOT_AT + rng.randint(30 * MINUTE, 3 * DAY), created + 2 * MINUTE))
            if i == 0:
                self.plan_target = run

    # --- planted findings ------------------------------------------------------------------------------------

    def _plant(self) -> None:
        rng = self.rng
        lanes = self.plant_lanes
        owner = self.owners[0]

        def planted_run(who: Owner, word: str, domain: Domain, gpus: int, start: int) -> Run:
            spec = {"resources": self._resources(domain, gpus), "locality": {"groupGPUs": 8}}
            run = self._new_run(who, domain.flavor, word, spec, start)
            run.eta = SNAPSHOT_AT + rng.randint(HOUR, 2 * DAY)
            self.runs.append(run)
            return run

        def record(kind: str, lease: Lease | None, namespace: str = "", also: str = "") -> None:
            self.planted.append({"kind": kind, "lease": lease.key if lease else None,
                                 "namespace": namespace or (lease.namespace if lease else ""), "also": also})

        # DoubleBooked: a second open lease on the slots of a node that an open lease already holds.
        # It starts after the lease it collides with, so that it collides with that one lease only.
        held = next(lease for lease in self.leases
                    if lease.end is None and lease.idx is None and self.domain_of[lease.nodes[0]].mixed
                    and lease.start < SNAPSHOT_AT - HOUR)
        domain = self.domain_of[held.nodes[0]]
        who = next(o for o in self.owners if o.name != held.owner)
        begin = max(held.start + 10 * MINUTE, SNAPSHOT_AT - 90 * MINUTE)
        run = planted_run(who, "dup", domain, 8, begin)
        lease = Lease(run, f"{run.name}-g0", 0, held.nodes[:1], begin, None,
                      who.budget.current[(domain.region, domain.flavor)])
        self._charge_planted(lease)
        record("DoubleBooked", lease, also=held.key)

        # Overdraft: a burst envelope of 8 GPUs paying for two 8-GPU groups; the later one is overdrawn.
        pair = lanes[:2]
        domain = pair[0].domain
        burst = owner.budget.add(Envelope(owner.budget, f"burst-{FLAVORS[domain.flavor][0]}", domain.region,
                                          domain.flavor, None, None))
        burst.concurrency = 8
        self.burst = burst
        run = planted_run(owner, "burst", domain, 16, SNAPSHOT_AT - 2 * HOUR)
        first = Lease(run, f"{run.name}-g0", 0, pair[0].nodes, SNAPSHOT_AT - 2 * HOUR, None, burst)
        second = Lease(run, f"{run.name}-g1", 1, pair[1].nodes, SNAPSHOT_AT - 100 * MINUTE, None, burst)
        second.reason = "Grow"
        self.leases += [first, second]
        record("Overdraft", second)

        # UnknownNode: an open lease on a node that is not in the snapshot (decommissioned).
        lane = lanes[2]
        domain = lane.domain
        run = planted_run(owner, "stale", domain, 8, SNAPSHOT_AT - 75 * MINUTE)
        gone = f"{FLAVORS[domain.flavor][0]}-{domain.name}-n{len(domain.nodes) + 40:02d}"
        self.extra_nodes.append(gone)
        lease = Lease(run, f"{run.name}-g0", 0, (gone,), SNAPSHOT_AT - 75 * MINUTE, None,
                      owner.budget.current[(domain.region, domain.flavor)])
        self._charge_planted(lease)
        record("UnknownNode", lease)

        # UnknownRun: an open lease whose Run does not exist.
        lane = lanes[3]
        domain = lane.domain
        ghost = Run(owner.namespace, f"ghost-8-{self.run_seq + 1:06d}", owner.name, domain.flavor, {}, 0)
        self.run_seq += 1
        lease = Lease(ghost, f"{ghost.name}-g0", 0, lane.nodes, SNAPSHOT_AT - 70 * MINUTE, None,
                      owner.budget.current[(domain.region, domain.flavor)])
        self._charge_planted(lease)
        record("UnknownRun", lease)

        # UnknownEnvelope: paid by an envelope its Budget does not have.
        lane = lanes[4]
        domain = lane.domain
        run = planted_run(owner, "retired", domain, 8, SNAPSHOT_AT - 65 * MINUTE)
        missing = Envelope(owner.budget, f"{domain.region}-{FLAVORS[domain.flavor][0]}-2024q4", domain.region,
                           domain.flavor, None, None)
        lease = Lease(run, f"{run.name}-g0", 0, lane.nodes[:1], SNAPSHOT_AT - 65 * MINUTE, None, missing)
        lease.idx = (0, 1, 2, 3)
        self.leases.append(lease)
        self.unknown_envelope = missing
        record("UnknownEnvelope", lease)

        # ACLViolation: a partner outside org:ai paid by an envelope that does not lend.
        partner_budget = Budget("partner", "partner", "org:ext:partner")
        partner_budget.add(Envelope(partner_budget, f"{domain.region}-{FLAVORS[domain.flavor][0]}",
                                    domain.region, domain.flavor, None, None))
        self.budgets.append(partner_budget)
        partner = Owner("org:ext:partner", "partner", partner_budget, "partner", partner_budget)
        run = planted_run(partner, "ext", domain, 4, SNAPSHOT_AT - 60 * MINUTE)
        run.spec = {"resources": self._resources(domain, 4)}
        acl_payer = self.owners[1].budget.current[(domain.region, domain.flavor)]
        lease = Lease(run, f"{run.name}-g0", 0, lane.nodes[:1], SNAPSHOT_AT - 60 * MINUTE, None, acl_payer)
        lease.idx = (4, 5, 6, 7)
        self.leases.append(lease)
        self.acl_lease = lease
        record("ACLViolation", lease)

        # UnboundNamespace: two Budgets of two owners in one namespace, and a run waiting there.
        for letter in "ab":
            budget = Budget("shared-lab", f"lab-{letter}", f"org:ai:lab:{letter}")
            budget.add(Envelope(budget, "any-h100", None, "H100-80GB", None, None, selector={}))
            self.budgets.append(budget)
        lab = Owner("org:ai:lab:a", "shared-lab", self.budgets[-2], "lab", self.budgets[-2])
        run = self._new_run(lab, "H100-80GB", "lab", {"resources": {"gpuType": "H100-80GB", "totalGPUs": 8}},
                            SNAPSHOT_AT - 3 * HOUR)
        run.phase = "Pending"
        self.runs.append(run)
        record("UnboundNamespace", None, namespace="shared-lab")

    def _charge_planted(self, lease: Lease) -> None:
        """A planted lease other than the overdraft is paid within its envelope: grow the envelope if needed."""
        payer = lease.payer
        first, last = _bucket(lease.start), _last_bucket(lease)
        if not payer.room(first, last, lease.gpus, False):
            payer.concurrency += _round8(lease.gpus)
        payer.charge(first, last, lease.gpus, False)
        self.leases.append(lease)

    # --- run phases, envelope sizes, windows ------------------------------------------------------------------

    def _finish_runs(self) -> None:
        by_run: dict[int, list[Lease]] = {}
        for lease in self.leases:
            by_run.setdefault(id(lease.run), []).append(lease)
        for run in self.runs:
            leases = by_run.get(id(run))
            if not leases or run.phase in ("Pending", "Reserved"):
                continue
            if any(lease.end is None for lease in leases):
                run.phase = "Running"
                continue
            run.eta = None
            if run.failure:
                run.phase = "Failed"
            elif run.preemptions:
                run.phase, run.failure = "Failed", "Preempted"
            else:
                run.phase = "Succeeded"

    def _size_envelopes(self) -> None:
        rng = self.rng
        first = min(lease.start for lease in self.leases)
        day = datetime.fromtimestamp(first, UTC)
        self.window_start = int(datetime(day.year, day.month, 1, tzinfo=UTC).timestamp())
        events: dict[int, list[tuple[int, int]]] = {}
        unpaid = {id(self.acl_lease)} if self.plants else set()
        for lease in self.leases:
            payer = lease.payer
            if payer is None or id(lease) in unpaid or (self.plants and payer is self.unknown_envelope):
                continue
            stop = lease.end if lease.end is not None else 1 << 40
            pair = ((lease.start, lease.gpus), (stop, -lease.gpus))
            events.setdefault(id(payer), []).extend(pair)
        # top the envelope count up to the size asked for with other quarters' envelopes
        total = sum(len(b.envelopes) for b in self.budgets)
        extra = self.size.envelopes - total
        subs = [o.budget for o in self.owners]
        candidates = [(label, start, end, budget, combo) for label, start, end in EXTRA_WINDOWS
                      for combo in COMBOS for budget in subs]
        if extra > len(candidates):
            raise ValueError(f"--envelopes at most {total + len(candidates)} for this fleet's budget tree")
        for label, start, end, budget, (region, flavor) in candidates[:extra]:
            budget.add(Envelope(budget, f"{region}-{FLAVORS[flavor][0]}-{label}", region, flavor, start, end))
        for budget in self.budgets:
            for envelope in budget.envelopes:
                if envelope.start is None:
                    envelope.start, envelope.end = self.window_start, NEXT_YEAR
                if envelope.concurrency == 0:  # other quarters' envelopes, the planted Budgets
                    envelope.concurrency = 8 * rng.randint(1, 24)
                if envelope.lends and not envelope.lending_max:
                    envelope.lending_max = _round8(envelope.concurrency * 0.5)
                if rng.random() < 0.5:
                    hours = (envelope.end - envelope.start) // HOUR
                    envelope.max_gpu_hours = int(envelope.concurrency * hours * rng.uniform(0.3, 0.8)) // 100 * 100
        for owner in self.owners:
            if rng.random() < 0.25:
                members = [e for e in owner.budget.envelopes
                           if e.end == NEXT_YEAR and events.get(id(e)) and not (self.plants and e is self.burst)]
                if len(members) >= 2:
                    union = [event for e in members for event in events[id(e)]]
                    cap = _round8(_peak(union) * rng.uniform(1.0, 1.2)) + 8
                    owner.budget.caps.append(("all-current", members, cap))

    # --- writing --------------------------------------------------------------------------------------------------

    def write(self, path: str) -> dict[str, Any]:
        """Stream the List to ``path`` (one item at a time: a 1M-lease file never sits in memory as JSON)."""
        encoder = msgspec.json.Encoder()
        self.version = 1000
        header = {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": "", "annotations": {SNAPSHOT_TIME_ANNOTATION: SNAPSHOT_TIME}},
        }
        head = encoder.encode(header)[:-1] + b',"items":['
        tmp = f"{path}.tmp"
        with open(tmp, "wb", buffering=1 << 20) as out:
            out.write(head)
            first = True
            for item in self._items():
                if not first:
                    out.write(b",")
                first = False
                out.write(encoder.encode(item))
            out.write(b"]}\n")
        os.replace(tmp, path)
        meta = self.meta(path)
        with open(f"{path}.meta.json", "wb") as out:
            out.write(msgspec.json.format(msgspec.json.encode(meta), indent=2) + b"\n")
        return meta

    def meta(self, path: str) -> dict[str, Any]:
        closed = sum(1 for lease in self.leases if lease.end is not None)
        return {
            "seed": self.seed,
            "size": {"nodes": self.size.nodes, "envelopes": self.size.envelopes, "leases": self.size.leases},
            "at": SNAPSHOT_TIME,
            "bytes": os.path.getsize(path),
            "counts": {
                "nodes": sum(len(d.nodes) for d in self.domains),
                "domains": len(self.domains),
                "budgets": len(self.budgets),
                "envelopes": sum(len(b.envelopes) for b in self.budgets),
                "runs": len(self.runs),
                "reservations": len(self.activations) + len(self.pending),
                "activations": len(self.activations),
                "leases": len(self.leases),
                "openLeases": len(self.leases) - closed,
                "closedLeases": closed,
            },
            "historyFrom": iso(min(lease.start for lease in self.leases)),
            "plan": {"namespace": self.plan_target.namespace, "name": self.plan_target.name},
            "planted": self.planted,
        }

    def _uid(self) -> str:
        return str(uuid.UUID(int=self.id_rng.getrandbits(128), version=4))

    def _meta(self, name: str, namespace: str | None, created: int, **more: Any) -> dict[str, Any]:
        self.version += 1
        meta: dict[str, Any] = {"name": name}
        if namespace is not None:
            meta["namespace"] = namespace
        meta["uid"] = self._uid()
        meta["resourceVersion"] = str(self.version)
        if namespace is not None:
            meta["generation"] = 1
        meta["creationTimestamp"] = iso(created)
        meta.update(more)
        return meta

    def _items(self):
        """Every object, each kind in the order the API server lists it (by namespace, then name), as
        ``kubectl get nodes,budgets,runs,reservations,gpuleases -A -o json`` prints them."""
        node_created = epoch("2025-03-03T09:00:00Z")
        failed = {n for lane in self._lanes_where(lambda lane: lane.out_of_service) for n in lane.nodes}
        by_name = sorted(((name, domain, i) for domain in self.domains for i, name in enumerate(domain.nodes)),
                         key=lambda entry: entry[0])
        for name, domain, i in by_name:
            _short, resource, _fabric, instance = FLAVORS[domain.flavor]
            labels = {
                "gpu.flavor": domain.flavor,
                "fabric.domain": domain.name,
                "region": domain.region,
                "cluster": domain.cluster,
                "rack": f"r{i // 4:02d}",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": instance,
                "topology.kubernetes.io/region": domain.region,
            }
            spec: dict[str, Any] = {}
            if name in domain.cordoned:
                spec["unschedulable"] = True
                spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
            if name in failed:
                spec["taints"] = [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                                   "effect": "NoExecute"}]
            resources = {"cpu": "192", "memory": "2063937Mi", "pods": "110", resource: str(GPUS_PER_NODE)}
            yield {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": self._meta(name, None, node_created + 60 * i, labels=labels),
                "spec": spec,
                "status": {"capacity": resources, "allocatable": resources},
            }
        for budget in sorted(self.budgets, key=lambda b: (b.namespace, b.name)):
            spec: dict[str, Any] = {"owner": budget.owner, "envelopes": [_envelope(e) for e in budget.envelopes]}
            if budget.caps:
                spec["aggregateCaps"] = [{"name": name, "envelopes": [e.name for e in members],
                                          "maxConcurrency": cap} for name, members, cap in budget.caps]
            yield {"apiVersion": API_VERSION, "kind": "Budget",
                   "metadata": self._meta(budget.name, budget.namespace, epoch("2025-06-15T10:00:00Z")),
                   "spec": spec}
        for run in sorted(self.runs, key=lambda r: (r.namespace, r.name)):
            more: dict[str, Any] = {"labels": {"jobtree.dev/owner": run.owner.replace(":", ".")}}
            if run.deleted is not None:
                more["deletionTimestamp"] = iso(run.deleted)
                more["finalizers"] = ["jobtree.dev/leases"]
            status: dict[str, Any] = {"observedGeneration": 1, "phase": run.phase}
            if run.failure:
                status["reason"] = run.failure
            if run.pending:
                status["pendingReservation"] = run.pending
            if run.eta is not None:
                status["eta"] = {"estimatedCompletion": iso(run.eta), "source": "workload"}
            if run.preemptions:
                status["preemptions"] = run.preemptions
            yield {"apiVersion": API_VERSION, "kind": "Run",
                   "metadata": self._meta(run.name, run.namespace, run.created, **more),
                   "spec": run.spec, "status": status}
        reservations = [(a.namespace, a.name, a) for a in self.activations]
        reservations += [(p.namespace, p.name, p) for p in self.pending]
        for _namespace, _name, reservation in sorted(reservations, key=lambda r: r[:2]):
            if isinstance(reservation, Activation):
                yield self._activated(reservation)
            else:
                yield self._pending(reservation)
        for lease in sorted(self.leases, key=lambda lease: (lease.namespace, lease.name)):
            yield self._lease(lease)

    def _activated(self, a: Activation) -> dict[str, Any]:
        return {
                "apiVersion": API_VERSION,
                "kind": "Reservation",
                "metadata": self._meta(a.name, a.namespace, a.run.created + MINUTE),
                "spec": {
                    "runRef": {"namespace": a.run.namespace, "name": a.run.name},
                    "scope": {"flavor": a.domain.flavor, "domain": a.domain.name},
                    "payingEnvelope": {"budget": a.payer.budget.name, "envelope": a.payer.name},
                    "earliestStart": iso(a.at),
                },
                "status": {
                    "state": "Activated",
                    "activation": {"at": iso(a.at), "seed": a.seed, "deficitGPUs": a.deficit,
                                   "conflictSet": a.conflict_set, "actions": a.actions, "freedGPUs": a.freed},
                },
            }

    def _pending(self, p: PendingReservation) -> dict[str, Any]:
        scope: dict[str, Any] = {"flavor": p.run.flavor}
        if p.domain is not None:
            scope["domain"] = p.domain.name
        return {
                "apiVersion": API_VERSION,
                "kind": "Reservation",
                "metadata": self._meta(p.name, p.namespace, p.created),
                "spec": {
                    "runRef": {"namespace": p.run.namespace, "name": p.run.name},
                    "scope": scope,
                    "payingEnvelope": {"budget": p.payer.budget.name, "envelope": p.payer.name},
                    "earliestStart": iso(p.earliest),
                },
                "status": {"state": "Pending", "countdownSeconds": p.earliest - SNAPSHOT_AT},
            }

    def _lease(self, lease: Lease) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "owner": lease.owner,
            "runRef": {"namespace": lease.namespace, "name": lease.run_ref},
            "group": lease.group,
            "flavor": lease.run.flavor,
            "slice": {"slots": lease.slots(), "role": lease.role},
        }
        if lease.payer is not None:
            spec["paidBy"] = {"namespace": lease.payer.budget.namespace, "budget": lease.payer.budget.name,
                              "envelope": lease.payer.name}
        spec["start"] = iso(lease.start)
        spec["reason"] = lease.reason
        status: dict[str, Any]
        if lease.end is None:
            status = {"closed": False}
        else:
            status = {"closed": True, "ended": iso(lease.end), "closureReason": lease.closure}
            if lease.preemption is not None:
                status["preemption"] = {"reservation": lease.preemption[0], "seed": lease.preemption[1]}
        labels = {"jobtree.dev/run": lease.run_ref, "jobtree.dev/group": str(lease.group)}
        return {"apiVersion": API_VERSION, "kind": "GPULease",
                "metadata": self._meta(lease.name, lease.namespace, lease.start, labels=labels),
                "spec": spec, "status": status}


def _envelope(e: Envelope) -> dict[str, Any]:
    out: dict[str, Any] = {"name": e.name, "flavor": e.flavor, "selector": e.selector,
                           "concurrency": e.concurrency, "start": iso(e.start), "end": iso(e.end)}
    if e.max_gpu_hours is not None:
        out["maxGPUHours"] = e.max_gpu_hours
    if e.lends:
        out["lending"] = {"allow": True, "to": ["org:ai:*"], "maxConcurrency": e.lending_max}
    return out


def _bucket(at: int) -> int:
    index = (at - BUCKET_FROM) // HOUR
    if index < 0:
        raise ValueError("too many leases for this many nodes: the history would reach back before "
                         f"{iso(BUCKET_FROM)}")
    return index


def _last_bucket(lease: Lease) -> int:
    """The last hour a lease is open in, up to the snapshot time (an open lease counts in the current hour)."""
    end = SNAPSHOT_AT + 1 if lease.end is None else min(lease.end, SNAPSHOT_AT + 1)
    return (end - 1 - BUCKET_FROM) // HOUR


def _peak(events) -> int:
    """Most GPUs held at one instant; an interval is [start, end), so ends sort before starts."""
    level = peak = 0
    for _, delta in sorted(events):
        level += delta
        peak = max(peak, level)
    return peak


def _round8(value: float) -> int:
    return max(8, math.ceil(value / 8.0) * 8)


# --- the reconciler's fleet (issue 12's benchmark, issue 27's 10,000-run preset) -----------------------------------

RECONCILER_NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)  # the instant the reconciler's fleet is built around
RECONCILER_FLAVOR = "H100"
RECONCILER_RUN_GPUS = 20


def reconciler_fleet(runs: int, *, now: datetime = RECONCILER_NOW) -> list[dict[str, Any]]:
    """The reconciler benchmarks' fleet of ``runs`` runs (a multiple of 100) as API objects: 1,000 runs carry
    20,000 leases, 10,000 runs 200,000 (``reconciler_blocks`` says how)."""
    if runs <= 0 or runs % 100:
        raise ValueError(f"runs must be a positive multiple of 100, not {runs}")
    return reconciler_blocks(0, runs // 100, 0, now=now)[0]


def reconciler_blocks(first_block: int, blocks: int, node_offset: int, *,
                      now: datetime = RECONCILER_NOW) -> tuple[list[dict[str, Any]], int]:
    """Blocks of 100 runs with 2,000 leases; returns (objects, nodes used) (bench/bench_reconcile.py builds its
    fleet in two pieces: 100 runs, then the next 900 on the nodes after the first piece's).

    Block ``b`` is namespace ``team<b>`` with one Budget (one H100 envelope of 3,000 GPUs whose window covers
    ``now`` ± 30 days) and 100 runs of 20 GPUs in groups of 1: 65 Running with one open GPULease per group
    (1,300 open leases on 162.5 nodes of 8), 30 Succeeded with their closed history (700 closed leases) and 5
    Pending asking for 16 GPUs (no lease); 8 free nodes follow for the pending runs. Nodes are in fabric
    domains of 64. Up to 10 blocks this is bench_reconcile's fleet object for object (it put block ``b`` in
    namespace ``team<b % 10>``); beyond, one namespace per block keeps every envelope within its concurrency."""
    objects: list[dict[str, Any]] = []
    gpu = node_offset * 8
    window = {"start": _z(now - timedelta(days=30)), "end": _z(now + timedelta(days=30))}
    flavor, width = RECONCILER_FLAVOR, RECONCILER_RUN_GPUS
    for block in range(first_block, first_block + blocks):
        ns = f"team{block}"
        objects.append({"apiVersion": API_VERSION, "kind": "Budget", "metadata": {"name": "main", "namespace": ns},
                        "spec": {"owner": f"org:{ns}", "envelopes": [
                            {"name": "main", "flavor": flavor, "concurrency": 2 * 65 * width + 400, **window}]}})
        for i in range(100):
            name = f"b{block:02d}-r{i:02d}"
            meta = {"name": name, "namespace": ns}
            spec = {"resources": {"gpuType": flavor, "totalGPUs": width}, "locality": {"groupGPUs": 1}}
            if i < 65:
                objects.append({"apiVersion": API_VERSION, "kind": "Run", "metadata": meta, "spec": spec})
                for g in range(width):
                    objects.append(reconciler_lease(f"{name}-g{g:02d}", ns, name, g, [f"n{gpu // 8:05d}#{gpu % 8}"],
                                                     now - timedelta(hours=2 + i % 7)))
                    gpu += 1
            elif i < 95:
                idx = i - 65
                objects.append({"apiVersion": API_VERSION, "kind": "Run", "metadata": meta, "spec": spec,
                                "status": {"phase": "Succeeded"}})
                for g in range(24 if idx >= 20 else 23):  # 20 × 23 + 10 × 24 = 700 closed leases
                    # one node per idx % 8, one day per idx // 8, one hour per g
                    start = now - timedelta(days=25) + timedelta(hours=24 * (idx // 8) + g)
                    item = reconciler_lease(f"{name}-h{g:02d}", ns, name, g % width,
                                             [f"n{node_offset + idx % 8:05d}#{g % 8}"], start)
                    item["status"] = {"closed": True, "ended": _z(start + timedelta(minutes=50)),
                                      "closureReason": "Completed"}
                    objects.append(item)
            else:
                objects.append({"apiVersion": API_VERSION, "kind": "Run", "metadata": meta,
                                "spec": {**spec, "resources": {"gpuType": flavor, "totalGPUs": 16}}})
    nodes = (gpu + 7) // 8 - node_offset + 8  # + 8 free nodes for the pending runs
    for n in range(node_offset, node_offset + nodes):
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": f"n{n:05d}", "labels": {"gpu.flavor": flavor,
                                                                     "fabric.domain": f"d{n // 64}"}},
                        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"},
                                   "capacity": {"nvidia.com/gpu": "8", "cpu": "96"}}})
    return objects, nodes


def reconciler_lease(name: str, ns: str, run: str, group: int, slots: list[str], start: datetime) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GPULease", "metadata": {"name": name, "namespace": ns},
            "spec": {"owner": f"org:{ns}", "runRef": {"namespace": ns, "name": run}, "group": group,
                     "flavor": RECONCILER_FLAVOR, "slice": {"slots": slots, "role": "Active"},
                     "paidBy": {"budget": "main", "envelope": "main"}, "start": _z(start), "reason": "Start"}}


def _z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def generate(path: str, *, nodes: int, envelopes: int, leases: int, seed: int = 1, plants: bool = True,
             activations: int | None = None) -> dict[str, Any]:
    """Generate a fleet and write it to ``path`` (and ``path.meta.json``); returns the meta."""
    fleet = FleetGenerator(nodes=nodes, envelopes=envelopes, leases=leases, seed=seed, plants=plants,
                           activations=activations)
    fleet.generate()
    return fleet.write(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted([*SIZES, *SCALE_SIZES]), default="small",
                        help="preset sizes: small (256 nodes, 10k leases), large (4,096 nodes, 2,000 envelopes, "
                             "200k leases), history (the same with 1M leases); runs1k / runs10k: issue 27's "
                             "reconciler fleet (bench/scale_fleet.py: 1,000 / 10,000 runs, 20,000 / 200,000 leases)")
    parser.add_argument("--nodes", type=int, help="GPU nodes (8 GPUs each; a multiple of 8, at least 64)")
    parser.add_argument("--envelopes", type=int, help="envelopes over every Budget")
    parser.add_argument("--leases", type=int, help="GPULeases, open and closed")
    parser.add_argument("--activations", type=int, help="activated Reservations (default: leases / 10,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-plants", action="store_true", help="plant no findings")
    parser.add_argument("-o", "--output", help="where to write the JSON List")
    parser.add_argument("--history", metavar="DIR",
                        help="history mode: write a multi-year lease archive (DIR/archive) month by month, and the "
                             "present as DIR/fleet.json (bench/history.py); with --leases, --years, --nodes, --seed")
    parser.add_argument("--years", type=int, default=3, help="history mode: years of leases (default 3)")
    args = parser.parse_args(argv)
    if args.history:
        from pathlib import Path

        from bench.history import write_history

        meta = write_history(Path(args.history), leases=args.leases or 10_000_000, years=args.years,
                             nodes=args.nodes or 4096, seed=args.seed)
        print(f"{args.history}: {meta['leases']:,} leases in {meta['months']} months, {meta['bytes'] / 1e6:,.1f} MB "
              f"({meta['bytes'] / max(1, meta['leases']):.1f} bytes a lease), {meta['from']} to {meta['to']} "
              f"[{meta['seconds']} s]", file=sys.stderr)
        return 0
    if not args.output:
        parser.error("-o/--output is required (or --history DIR)")
    if args.size in SCALE_SIZES:
        from bench import scale_fleet

        began = time.perf_counter()
        at = datetime.fromisoformat(SNAPSHOT_TIME.replace("Z", "+00:00"))
        doc = scale_fleet.snapshot_document(SCALE_SIZES[args.size], at)
        data = msgspec.json.encode(doc)
        with open(args.output, "wb") as handle:
            handle.write(data)
        kinds: dict[str, int] = {}
        for item in doc["items"]:
            kinds[item["kind"]] = kinds.get(item["kind"], 0) + 1
        print(f"{args.output}: {len(data) / 1e6:,.1f} MB, " + ", ".join(f"{v:,} {k}s" for k, v in kinds.items())
              + f" at {SNAPSHOT_TIME} [{time.perf_counter() - began:.1f} s]", file=sys.stderr)
        return 0
    preset = SIZES[args.size]
    began = time.perf_counter()
    try:
        meta = generate(args.output, nodes=args.nodes or preset.nodes, envelopes=args.envelopes or preset.envelopes,
                        leases=args.leases or preset.leases, seed=args.seed, plants=not args.no_plants,
                        activations=args.activations)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = meta["counts"]
    print(
        f"{args.output}: {meta['bytes'] / 1e6:,.1f} MB, {counts['nodes']:,} nodes in {counts['domains']} domains, "
        f"{counts['envelopes']:,} envelopes in {counts['budgets']:,} budgets, {counts['runs']:,} runs, "
        f"{counts['leases']:,} leases ({counts['openLeases']:,} open, history from {meta['historyFrom']}), "
        f"{counts['activations']} activations, {len(meta['planted'])} planted findings "
        f"[{time.perf_counter() - began:.1f} s]",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
