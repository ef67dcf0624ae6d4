"""text.py: the words the engine and the views share."""

from __future__ import annotations

import random
from datetime import timedelta

import humanize
from builders import at

from kubectl_runs.text import counted, span, when


def test_span_says_what_humanize_precisedelta_says_to_the_minute():
    rng = random.Random(14)
    deltas = [timedelta(seconds=rng.randrange(0, top), microseconds=rng.randrange(0, 10**6))
              for top in (4_000, 200_000, 40_000_000, 400_000_000) for _ in range(2_500)]
    deltas += [timedelta(days=d, seconds=s) for d in range(0, 800, 3) for s in (0, 29, 30, 31, 89, 90, 3599, 43200, 86370)]
    for delta in deltas:
        assert span(delta) == humanize.precisedelta(delta, minimum_unit="minutes", format="%0.0f"), delta


def test_when_is_the_instant_and_how_far():
    assert when(at(days=10), at()) == f"{at(days=10):%Y-%m-%d %H:%M} UTC (in 10 days)"
    assert when(at(), at(hours=36)) == f"{at():%Y-%m-%d %H:%M} UTC (1 day and 12 hours ago)"
    assert when(at(), at()) == f"{at():%Y-%m-%d %H:%M} UTC (in 0 minutes)"


def test_counted():
    assert (counted(1, "GPU"), counted(1200, "lease"), counted(2, "reply", "replies")) == ("1 GPU", "1,200 leases",
                                                                                         "2 replies")
