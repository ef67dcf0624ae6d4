"""Issue 27: what the reconciler keeps from batch to batch equals what a full rebuild computes.

After random upserts and deletes of every kind (Nodes, Budgets, Runs, Reservations, GPULeases, objects the model
refuses), with the clock moving across an envelope's end: the cache's incrementally built view (only the kinds
that changed, the snapshot's indexes carried over) equals a fresh cache's of the same objects; the ledger of
reconciler/books.py (funding again only the envelopes whose inputs changed) equals ``accounting.ledger``; and the
status writes of every object from an Evaluation with those books (which takes the previous batch's values
computed from the nodes and open leases when those did not change) equal those from a fresh Evaluation."""

from __future__ import annotations

import copy
import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from bench import scale_fleet
from kubectl_runs.engine.accounting import ledger
from kubectl_runs.reconciler.books import Books
from kubectl_runs.reconciler.cache import Cache, decode_entry
from kubectl_runs.reconciler.status import Evaluation, status_writes

NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
KINDS = ("Node", "Budget", "Run", "Reservation", "GPULease")
INDEXES = ("nodes_by_name", "runs_by_key", "reservations_by_key", "leases_by_key", "leases_by_run",
           "envelopes_by_key")


def small_fleet() -> list[dict]:
    """Two blocks of bench/scale_fleet.py, thinned (every 5th run with its leases, 40 nodes a block), a capped
    Budget, an envelope whose window ends a minute after NOW, and Reservations."""
    out = []
    for block in range(2):
        objects = scale_fleet.block_objects(block, NOW)
        keep = {scale_fleet.run_name(block, i) for i in range(0, 100, 5)}
        nodes = {scale_fleet.node_name(block, n) for n in range(40)}
        for o in objects:
            kind = o["kind"]
            if ((kind == "Run" and o["metadata"]["name"] not in keep)
                    or (kind == "GPULease" and o["spec"]["runRef"]["name"] not in keep)
                    or (kind == "Node" and o["metadata"]["name"] not in nodes)):
                continue
            if kind == "GPULease" and o["spec"]["slice"]["slots"][0].split("#")[0] not in nodes:
                o["spec"]["slice"]["slots"] = [f"{scale_fleet.node_name(block, 0)}#{len(out) % 8}"]
            out.append(o)
    out.append({"apiVersion": scale_fleet.API_VERSION, "kind": "Budget",
                "metadata": {"name": "capped", "namespace": "team1"},
                "spec": {"owner": "team1", "envelopes": [
                    {"name": "a", "flavor": "H100", "concurrency": 30, "start": scale_fleet.iso(NOW - timedelta(days=1)),
                     "end": scale_fleet.iso(NOW + timedelta(seconds=60))},
                    {"name": "b", "flavor": "H100", "concurrency": 30, "start": scale_fleet.iso(NOW - timedelta(days=1)),
                     "end": scale_fleet.iso(NOW + timedelta(days=1))}],
                    "aggregateCaps": [{"name": "both", "envelopes": ["a", "b"], "maxConcurrency": 40}]}})
    for i, name in enumerate(("b00-r95", "b01-r95")):
        ns = f"team{i}"
        out.append({"apiVersion": scale_fleet.API_VERSION, "kind": "Reservation",
                    "metadata": {"name": f"res-{name}", "namespace": ns},
                    "spec": {"runRef": {"namespace": ns, "name": name}, "scope": {"flavor": "H100"},
                             "earliestStart": scale_fleet.iso(NOW + timedelta(minutes=5))},
                    "status": {"state": "Pending"}})
    return out


def key(o: dict) -> tuple[str, str]:
    return o["kind"], f'{o["metadata"].get("namespace", "")}/{o["metadata"]["name"]}'


class Fleet:
    """The objects as the API server would hold them, each change given a new resourceVersion."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.version = 0
        self.objects: dict[tuple[str, str], dict] = {}
        self.made = 0

    def entry(self, o: dict):
        return decode_entry(o["kind"], json.dumps(o).encode())

    def put(self, o: dict) -> None:
        self.version += 1
        o = copy.deepcopy(o)
        o["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key(o)] = o
        return o

    def pick(self, kind: str) -> dict | None:
        found = sorted(k for k in self.objects if k[0] == kind)
        return copy.deepcopy(self.objects[self.rng.choice(found)]) if found else None

    def mutate(self, at: datetime) -> tuple[str, dict, bool]:
        """One random change: (kind, object, deleted)."""
        rng = self.rng
        kind = rng.choice(KINDS)
        o = self.pick(kind)
        if o is not None and rng.random() < 0.15:  # delete one
            del self.objects[key(o)]
            return kind, o, True
        if o is None:  # none of that kind left: another change
            return self.mutate(at)
        self.made += 1
        ns = rng.choice(["team0", "team1"])
        if kind == "GPULease":
            if rng.random() < 0.4:
                o["status"] = {"closed": True, "ended": scale_fleet.iso(at - timedelta(seconds=rng.randint(0, 5))),
                               "closureReason": "Completed"}
            elif rng.random() < 0.5:
                o = scale_fleet.lease(f"new{self.made}", ns, rng.choice(["b00-r00", "b01-r05", "b00-r95"]), 0,
                                      [f"n{ns[-1]:0>3}-{rng.randint(0, 39):03d}#{rng.randint(0, 7)}"],
                                      at + timedelta(seconds=rng.choice([-100, 0, 3])))
                if rng.random() < 0.3:
                    o["spec"]["paidBy"] = {"budget": "capped", "envelope": rng.choice(["a", "b", "nope"])}
            else:
                o["spec"]["slice"]["role"] = "Spare"
        elif kind == "Run":
            if rng.random() < 0.3:
                o["spec"]["resources"]["totalGPUs"] = rng.choice(["x", 4])  # "x": refused by the model
            elif rng.random() < 0.5:
                o["status"] = {"phase": rng.choice(["Succeeded", "Running", "Pending"])}
            else:
                o["metadata"]["name"] = f"new{self.made}"
                o["spec"]["resources"]["totalGPUs"] = 4
        elif kind == "Budget":
            envelope = o["spec"]["envelopes"][0]
            choice = rng.random()
            if choice < 0.5:
                envelope["concurrency"] = max(0, envelope["concurrency"] + rng.randint(-20, 20))
            elif choice < 0.7:
                o["spec"]["owner"] = "someone-else"  # two owners in a namespace: unbound
            else:
                o["metadata"]["name"] = f"extra{self.made}"
        elif kind == "Reservation":
            o["metadata"]["name"] = f"res{self.made}" if rng.random() < 0.5 else o["metadata"]["name"]
            o["status"] = {"state": rng.choice(["Pending", "Failed"])}
        else:
            if rng.random() < 0.5:
                o["spec"] = {"unschedulable": True}
            else:
                o["metadata"]["name"] = f"n{ns[-1]:0>3}-{100 + self.made:03d}"
        return kind, self.put(o), False


def fresh_view(fleet: Fleet):
    cache = Cache()
    for kind in KINDS:
        cache.replace(kind, [fleet.entry(o) for k, o in fleet.objects.items() if k[0] == kind])
    return cache.view()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_incremental_view_ledger_and_status_equal_a_full_rebuild(seed):
    rng = random.Random(seed)
    fleet = Fleet(rng)
    for o in small_fleet():
        fleet.put(o)
    cache = Cache()
    for kind in KINDS:
        cache.replace(kind, [fleet.entry(o) for k, o in fleet.objects.items() if k[0] == kind])
    books = Books()
    at = NOW
    refunded = []
    moved = 0
    for step in range(40):
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            kind, o, deleted = fleet.mutate(at)
            entry = fleet.entry(o)
            if deleted:
                cache.delete(kind, entry.key)
            else:
                cache.upsert(entry)
        at += timedelta(seconds=rng.choice([0, 1, 7]))
        snapshot, stored, bad = cache.view()
        for name in INDEXES:  # some of the snapshot's indexes read before the next change, some not
            if rng.random() < 0.5:
                getattr(snapshot, name)
        want_snapshot, want_stored, want_bad = fresh_view(fleet)
        assert snapshot == want_snapshot, f"step {step}"
        for name in INDEXES:
            assert getattr(snapshot, name) == getattr(want_snapshot, name), (step, name)
        assert (stored, bad) == (want_stored, want_bad), f"step {step}"
        before = books.moved
        kept = books.ledger(snapshot, at)
        refunded.append(books.refunded)
        moved += books.moved - before
        assert kept == ledger(snapshot, at), f"step {step}"
        assert status_writes(snapshot, at, stored, None, bad, Evaluation(snapshot, at, books)) == \
            status_writes(snapshot, at, stored, None, bad), f"step {step}"
    envelopes = len(snapshot.envelopes_by_key)
    assert min(refunded) < envelopes  # the books did keep envelopes: the comparison above meant something
    assert books.carried > 0  # and Evaluations did take the previous one's values
    assert moved > 0  # and ledgers were the previous one moved to a later instant (compared with ledger())


def test_a_lease_changed_in_place_is_funded_again():
    """A Books that kept an envelope whose open lease changed (not just which leases are open) is caught."""
    objects = small_fleet()
    cache = Cache()
    fleet = Fleet(random.Random(0))
    for o in objects:
        fleet.put(o)
    for kind in KINDS:
        cache.replace(kind, [fleet.entry(o) for k, o in fleet.objects.items() if k[0] == kind])
    books = Books()
    snapshot = cache.view()[0]
    books.ledger(snapshot, NOW)
    lease = next(o for k, o in fleet.objects.items() if k[0] == "GPULease" and "status" not in o)
    changed = copy.deepcopy(lease)
    changed["spec"]["slice"]["slots"] = [*changed["spec"]["slice"]["slots"], "n000-039#7"]
    cache.upsert(fleet.entry(fleet.put(changed)))
    snapshot = cache.view()[0]
    assert books.ledger(snapshot, NOW) == ledger(snapshot, NOW)
    assert 0 < books.refunded < len(snapshot.envelopes_by_key)


def test_the_clock_alone_moves_the_ledger_to_the_second():
    """Nothing changed but the clock: the ledger is the previous one moved (an envelope whose window holds the
    instant consumes its open slots, one whose window ended does not), equal to ``accounting.ledger``; an
    instant at which a lease opens is not crossed."""
    fleet = Fleet(random.Random(0))
    for o in small_fleet():
        fleet.put(o)
    fleet.put(scale_fleet.lease("late", "team1", "b01-r00", 0, ["n001-039#7"], NOW + timedelta(seconds=100)))
    for envelope in ("a", "b"):
        item = scale_fleet.lease(f"on-{envelope}", "team1", "b01-r00", 1, ["n001-038#7"], NOW - timedelta(hours=1))
        item["spec"]["paidBy"] = {"budget": "capped", "envelope": envelope}
        fleet.put(item)
    snapshot = fresh_view(fleet)[0]
    books = Books()
    for seconds in (61, 62, 70, 99, 100, 101):  # "a" ended at +60; "late" opens at +100
        at = NOW + timedelta(seconds=seconds)
        before = books.moved
        assert books.ledger(snapshot, at) == ledger(snapshot, at), seconds
        assert books.moved - before == (seconds not in (61, 100)), seconds
    assert books.ledger(snapshot, at + timedelta(microseconds=5)) == ledger(snapshot, at + timedelta(microseconds=5))


def test_a_scopes_lottery_candidates_and_releases_are_kept_while_what_they_read_is():
    """A batch after which only Runs that hold nothing changed, or only the status the reconciler writes, keeps
    the previous Evaluation's lottery candidates and releases (``Books.scoped``); a lease-holding Run's reported
    completion changing, or the clock reaching the instant that completion comes within the grace, computes them
    again. Every step's status writes equal those of a fresh Evaluation."""
    fleet = Fleet(random.Random(0))
    for o in scale_fleet.fleet(range(2), NOW):
        fleet.put(o)
    cache = Cache()
    for kind in KINDS:
        cache.replace(kind, [fleet.entry(o) for k, o in fleet.objects.items() if k[0] == kind])
    books = Books()
    eta = NOW + timedelta(minutes=30)  # within the 15-minute grace from NOW + 15 min on

    def change(name: str, edit) -> None:
        o = copy.deepcopy(fleet.objects[("Run", f"team0/{name}")])
        edit(o)
        cache.upsert(fleet.entry(fleet.put(o)))

    def step(at: datetime) -> int:
        snapshot, stored, bad = cache.view()
        before = books.scoped
        evaluation = Evaluation(snapshot, at, books)
        assert status_writes(snapshot, at, stored, None, bad, evaluation) == status_writes(snapshot, at, stored, None,
                                                                                           bad)
        assert evaluation._lottery, "the Pending runs' plans read a scope's lottery candidates"
        return books.scoped - before

    assert step(NOW) == 0  # the first: nothing to keep
    change("b00-r70", lambda o: o.setdefault("status", {}).update(phase="Succeeded"))  # holds nothing
    assert step(NOW + timedelta(seconds=1)) == 1
    change("b00-r00", lambda o: o.setdefault("status", {}).update(phase="Running", message="ours"))  # our echo
    change("b00-r97", lambda o: o["spec"]["resources"].update(totalGPUs=17))  # Pending: holds nothing
    assert step(NOW + timedelta(seconds=2)) == 1
    change("b00-r01", lambda o: o.setdefault("status", {}).update(
        eta={"estimatedCompletion": scale_fleet.iso(eta), "source": "trainer"}))  # holds leases: a release now
    assert step(NOW + timedelta(seconds=3)) == 0
    assert step(NOW + timedelta(minutes=14)) == 1  # nothing changed, no instant crossed
    assert step(NOW + timedelta(minutes=15)) == 0  # its completion is within the grace: protected from now on
    assert step(NOW + timedelta(minutes=16)) == 1
