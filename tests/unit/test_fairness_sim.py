"""bench/fairness.py, the fairness simulation of the ledger keeper (issue 25): the driver is deterministic, its
counts agree with the objects it leaves behind, and the targets of issue 25 on a short horizon of the small fleet
(a few seconds). The first two failed on the keeper before round 3 (runs drawn twice within the window; 132
activations that took GPUs and did not start their run) and were strict xfails until it met them."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # bench/ is the repository's, not an installed package

from bench import bench_fairness  # noqa: E402
from bench.fairness import FLEETS, Simulation, fits_fleet, ledger_options, render, simulate, workload  # noqa: E402
from kubectl_runs.reconciler.ledger import LedgerOptions, apply_writes, plan_ledger  # noqa: E402

# The short horizon every test shares: 1.5 days of arrivals on the small fleet (40 schedulable GPUs), 1.5 days
# of drain. Seed 2 finishes every run; today it shows repeated lottery victims and activations that take GPUs
# without starting their run.
CASE = {"days": 1.5, "seed": 2, "fleet": "small", "drain_days": 1.5}
# Utilization of CASE on main at 5f695f7 (the "before" of issue 25): a fix must not cost more than 5 points.
BASELINE_UTILIZATION = 0.6211


@pytest.fixture(scope="module")
def sim() -> Simulation:
    simulation = Simulation(**CASE)
    simulation.result = simulation.run()
    return simulation


def test_the_same_seed_gives_the_same_result(sim):
    again = simulate(**CASE)
    first, second = sim.result.as_dict(), again.as_dict()
    first.pop("wall_seconds")
    second.pop("wall_seconds")
    assert first == second
    other = simulate(**{**CASE, "seed": 3})
    assert other.runs != sim.result.runs


def test_the_workload_is_seeded_and_every_run_fits_the_fleet():
    fleet = FLEETS["small"]
    assert workload(fleet, 2, 5) == workload(fleet, 2, 5)
    assert workload(fleet, 2, 5) != workload(fleet, 2, 6)
    assert all(fits_fleet(fleet, a) for a in workload(fleet, 3, 5))


def test_counts_are_consistent(sim):
    r = sim.result
    snap = sim.snapshot
    assert not r.capped
    assert r.runs_arrived == len(r.runs) == len(snap.runs)
    assert r.runs_finished <= r.runs_started <= r.runs_arrived
    assert 0.0 <= r.useful_utilization <= r.utilization <= 1.0
    waits = [x.wait_hours for x in r.runs if x.wait_hours is not None]
    assert len(waits) == r.runs_started and all(w >= 0 for w in waits)
    assert r.wait_median_hours <= r.wait_p95_hours <= r.wait_max_hours == max(waits)
    assert r.lottery_preemptions == sum(len(x.lottery_preemptions) for x in r.runs)
    assert r.activations_took_not_started <= r.activations_took <= r.activations
    assert r.activations_preempted_not_started <= r.activations_preempting <= r.activations_took
    assert r.activations_took + r.activations_took_nothing == r.activations
    assert r.fitting_never_started == len(r.starved) == sum(1 for x in r.runs if x.fits and x.first_start is None)
    for record in r.runs:
        if record.finished is not None:
            assert record.first_start is not None and record.first_start <= record.finished
            assert record.work_done_hours == pytest.approx(record.work_hours)
        else:
            assert record.work_done_hours < record.work_hours


def test_every_run_that_started_had_leases_and_finished_runs_hold_none_after_the_next_pass():
    # Without pruning, so that every lease stays in the snapshot.
    simulation = Simulation(**{**CASE, "days": 1.0, "drain_days": 0.5}, prune=False)
    result = simulation.run()
    snap = simulation.snapshot
    for record in result.runs:
        if record.first_start is not None:
            assert snap.leases_by_run.get(record.key), record.key
    at = simulation.ended_at
    after = apply_writes(snap, plan_ledger(snap, at, LedgerOptions()))
    finished = {x.key for x in result.runs if x.finished is not None}
    assert finished
    assert not [x.key for x in after.leases if x.run_key in finished and x.open_at(at)]


def test_pruning_the_objects_of_finished_runs_changes_nothing():
    # What finished runs leave behind is read by no later decision: the same figures, run for run. (Pruning a
    # live run's inert Reservations too, the default, renumbers its later Reservations: other seeds.)
    case = {**CASE, "seed": 3, "days": 0.5, "drain_days": 0.5}
    pruned, full = simulate(**case, prune="finished").as_dict(), simulate(**case, prune=False).as_dict()
    for d in (pruned, full):
        d.pop("wall_seconds")
    assert pruned == full


def test_options_pass_through_only_when_given():
    assert ledger_options(None) == LedgerOptions()
    assert ledger_options({}) == LedgerOptions()
    assert ledger_options({"unknown_forecast_delay": timedelta(minutes=30)}).unknown_forecast_delay == timedelta(
        minutes=30)
    with pytest.raises(TypeError):
        ledger_options({"no_such_option": timedelta(hours=1)})


def test_the_command_line_prints_the_table_and_refuses_an_unknown_option(capsys):
    assert bench_fairness.main(["--days", "0.25", "--fleet", "small", "--drain", "6h",
                                "--option", "unknown_forecast_delay=20m"]) == 0
    out = capsys.readouterr().out
    assert "runs arrived / started / finished" in out and "unknown_forecast_delay=0:20:00" in out
    assert bench_fairness.main(["--days", "0.25", "--fleet", "small", "--option", "no_such_option=1h"]) == 2
    assert "no_such_option" in capsys.readouterr().err
    assert bench_fairness.parse_option("x=6h") == ("x", timedelta(hours=6))
    assert bench_fairness.parse_option("x=true") == ("x", True)
    assert bench_fairness.parse_option("x=3") == ("x", 3)


def test_render_names_every_target(sim):
    text = render(sim.result)
    for words in ("twice or more within 6 h", "did not start their run", "never started", "utilization"):
        assert words in text


# --- the targets of issue 25 ---------------------------------------------------------------------------------


def test_target_no_run_is_a_lottery_victim_twice_within_the_protection_window(sim):
    assert sim.result.lottery_twice_within_protection == 0


def test_target_no_activation_takes_gpus_and_then_does_not_start_its_run(sim):
    assert sim.result.activations_took_not_started == 0


def test_target_every_run_that_fits_the_fleet_eventually_starts(sim):
    assert sim.result.fitting_never_started == 0


def test_target_utilization_within_5_points_of_the_baseline(sim):
    # One-sided: a fix may raise utilization; it must not lower it by more than 5 points.
    assert sim.result.utilization >= BASELINE_UTILIZATION - 0.05
