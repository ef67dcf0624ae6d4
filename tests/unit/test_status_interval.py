"""Status that changes when facts change (#27): a Run that runs and needs nothing is not rewritten when another
Run's lease moves; a pending Run's figures that follow the fleet wait for ``--status-interval``, while a change of
phase, reason, width or a condition's status is written at once."""

from __future__ import annotations

from builders import at, budget, lease, node, run, snapshot
from test_reconciler_status import stored_after

from kubectl_runs.reconciler.actions import PatchStatus
from kubectl_runs.reconciler.status import status_writes
from kubectl_runs.reconciler.throttle import StatusThrottle, prompt


def _fleet(extra_leases=()):
    nodes = [node(f"n{i}", gpus=8) for i in range(4)]
    b = budget()  # one envelope "west" funding the namespace "team"
    running = [run(f"busy-{i}", gpus=8) for i in range(3)]
    held = [lease(f"busy-{i}-g0", gpus=8, node_name=f"n{i}", run_name=f"busy-{i}") for i in range(3)]
    waiting = [run("wants-16", gpus=16, phase="Pending"), run("wants-8", gpus=8, phase="Pending")]
    return snapshot(*nodes, b, *running, *held, *waiting, *extra_leases)


def test_another_runs_lease_rewrites_no_running_run():
    before = _fleet()
    stored = stored_after(status_writes(before, at(hours=1), {}))
    started = lease("wants-8-g0", gpus=8, node_name="n3", run_name="wants-8", start=at(hours=2))
    writes = [w for w in status_writes(_fleet([started]), at(hours=2), stored) if w.kind == "Run"]
    written = {w.name for w in writes}
    assert "wants-8" in written  # it started: phase Pending -> Running
    assert not written & {"busy-0", "busy-1", "busy-2"}, [w.cause for w in writes]
    for w in writes:
        for condition in w.status.get("conditions") or []:
            assert "can be placed; it needs" not in condition["message"]


def test_true_conditions_quote_only_the_runs_own_need():
    stored = stored_after(status_writes(_fleet(), at(hours=1), {}))
    busy = stored[("Run", "team", "busy-0")].status
    messages = {c["type"]: c["message"] for c in busy["conditions"]}
    assert messages["Funded"] == messages["Placeable"] == "it needs no more GPUs"


def _patch(status: dict, kind: str = "Run") -> PatchStatus:
    return PatchStatus(kind=kind, namespace="team", name="wants-16", cause="test", status=status)


def test_what_is_prompt_and_what_can_wait():
    stored = {"observedGeneration": 1, "phase": "Pending", "reason": "InsufficientCapacity",
              "conditions": [{"type": "Placeable", "status": "False", "reason": "InsufficientCapacity",
                              "message": "only 8 of 16 fit"}],
              "plan": {"deficitGPUs": 8}}
    moved = {"observedGeneration": 1, "plan": {"deficitGPUs": 4},
             "conditions": [{"type": "Placeable", "status": "False", "reason": "InsufficientCapacity",
                             "message": "only 12 of 16 fit"}]}
    assert not prompt(_patch(moved), stored)  # only figures and a message moved
    assert prompt(_patch({**moved, "observedGeneration": 2}), stored)  # the spec changed
    assert prompt(_patch({**moved, "phase": "Running"}), stored)
    assert prompt(_patch({**moved, "conditions": [{"type": "Placeable", "status": "True", "reason": "Placeable",
                                                  "message": "x"}]}), stored)
    assert prompt(_patch(moved), {})  # never written: at once
    assert prompt(_patch(moved, kind="Budget"), stored)  # a Budget's usage is its own fact


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_throttle_defers_figures_by_an_interval_and_coalesces_them():
    from kubectl_runs.reconciler.status import Stored

    clock, queued = _Clock(), []
    throttle = StatusThrottle(30.0, lambda key, delay: queued.append((key, delay)), clock=clock)
    key = ("Run", "team", "wants-16")
    stored = {key: Stored(status={"observedGeneration": 1, "phase": "Pending", "plan": {"deficitGPUs": 8}})}
    figures = _patch({"observedGeneration": 1, "plan": {"deficitGPUs": 4}})
    assert throttle.filter([figures], stored) == [figures]  # never written by this process: at once
    throttle.wrote(key)
    clock.now += 500  # long quiet: figures still wait (a lease change costs only its facts' writes at once)
    assert throttle.filter([figures], stored, [key]) == []
    assert queued == [(key, 30.0)]
    clock.now += 5
    assert throttle.filter([figures], stored, [key]) == []  # coalesced: joins the queued one
    assert len(queued) == 1 and throttle.deferred == 2
    phase = _patch({"observedGeneration": 1, "phase": "Running"})
    assert throttle.filter([phase], stored, [key]) == [phase]  # a fact: at once, whatever the interval
    clock.now += 25
    assert throttle.filter([figures], stored, [key]) == [figures]  # due: written with the values of now
    throttle.wrote(key)
    clock.now += 1
    assert throttle.filter([figures], stored, [key]) == [] and queued[-1] == (key, 30.0)


def test_a_deferral_whose_figures_went_back_is_settled():
    from kubectl_runs.reconciler.status import Stored

    clock, queued = _Clock(), []
    throttle = StatusThrottle(30.0, lambda key, delay: queued.append((key, delay)), clock=clock)
    key = ("Run", "team", "wants-16")
    stored = {key: Stored(status={"observedGeneration": 1, "phase": "Pending", "plan": {"deficitGPUs": 8}})}
    figures = _patch({"observedGeneration": 1, "plan": {"deficitGPUs": 4}})
    throttle.wrote(key)
    assert throttle.filter([figures], stored, [key]) == []
    clock.now += 30
    assert throttle.filter([], stored, [key]) == []  # due, nothing to write any more: settled
    clock.now += 1
    assert throttle.filter([figures], stored, [key]) == []  # a new change waits a whole interval again
    assert queued == [(key, 30.0), (key, 30.0)]


def test_interval_zero_writes_everything():
    throttle = StatusThrottle(0, lambda key, delay: None)
    figures = _patch({"observedGeneration": 1, "plan": {"deficitGPUs": 4}})
    assert throttle.filter([figures], {}) == [figures]
