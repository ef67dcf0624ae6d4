"""The fairness simulation of the ledger keeper (issue 25) from the command line: bench/fairness.py drives the
real ``plan_ledger`` + ``apply_writes`` over simulated days on a generated, oversubscribed fleet and prints what
it measured (preemptions per run, activations that took GPUs and did not start their run, waits, starvation,
utilization) as a Markdown table.

    .venv/bin/python -m bench.bench_fairness                       # 7 days, seed 1, the default fleet
    .venv/bin/python -m bench.bench_fairness --days 2 --fleet small --seed 3
    .venv/bin/python -m bench.bench_fairness --option min_run_time=1h --option victim_protection=6h
    .venv/bin/python -m bench.bench_fairness --json                # the whole result, every run's record too

``--option NAME=VALUE`` (repeatable) goes to ``LedgerOptions(NAME=VALUE)``: a duration (``10s``, ``15m``,
``6h``, ``2d``), else ``true``/``false``, else a number. Without it the keeper runs with ``LedgerOptions()``; a
NAME the checked-out keeper does not know is an error (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.fairness import FLEETS, render, simulate
from kubectl_runs.timeutil import duration_seconds

UNITS = ("s", "m", "h", "d", "w")


def parse_duration(text: str) -> timedelta:
    seconds = duration_seconds(text.strip(), UNITS)
    if seconds is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (10s, 15m, 6h, 2d)")
    return timedelta(seconds=seconds)


def parse_option(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    value = value.strip()
    seconds = duration_seconds(value, UNITS)
    if seconds is not None:
        return name.strip(), timedelta(seconds=seconds)
    if value.lower() in ("true", "false"):
        return name.strip(), value.lower() == "true"
    try:
        return name.strip(), int(value)
    except ValueError:
        pass
    try:
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not a duration, a boolean or a number") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0, help="days of arrivals (default 7)")
    parser.add_argument("--seed", type=int, default=1, help="the workload's seed (default 1)")
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="default", help="the fleet (default: default)")
    parser.add_argument("--arrivals-per-day", type=float, default=None, help="arrival rate (default: the fleet's)")
    parser.add_argument("--drain", type=parse_duration, default=timedelta(days=3),
                        help="at most this much simulated time after the arrivals stop (default 3d)")
    parser.add_argument("--protection", type=parse_duration, default=timedelta(hours=6),
                        help="the window in which a second lottery preemption of a run counts (default 6h, the "
                             "reconciler's default --victim-protection)")
    parser.add_argument("--min-gap", type=parse_duration, default=timedelta(minutes=5),
                        help="at least this long between two passes (default 5m; see bench/fairness.py)")
    parser.add_argument("--max-steps", type=int, default=50_000, help="cap on passes (default 50000)")
    parser.add_argument("--option", type=parse_option, action="append", default=[], metavar="NAME=VALUE",
                        help="a LedgerOptions field (repeatable): NAME=DURATION, or a boolean or a number")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON instead of the table")
    args = parser.parse_args(argv)
    options = dict(args.option)
    began = datetime.now(UTC)
    wall = time.perf_counter()
    try:
        result = simulate(
            days=args.days, seed=args.seed, fleet=args.fleet, arrivals_per_day=args.arrivals_per_day,
            drain_days=args.drain.total_seconds() / 86400, protection=args.protection,
            min_gap=int(args.min_gap.total_seconds()), max_steps=args.max_steps, options=options or None,
        )
    except TypeError as error:  # a LedgerOptions field this checkout does not have
        print(f"error: LedgerOptions({', '.join(options)}): {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # LedgerOptions refused a value
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
        return 0
    print(render(result))
    print(f"\nSimulated {result.ended_hours:.1f} h in {time.perf_counter() - wall:.1f} s "
          f"(started {began:%Y-%m-%d %H:%M} UTC).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
