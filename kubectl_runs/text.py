"""Small words for people, in one place: counts with the right plural, and how far one instant is from another.

Pure Python (no humanize): the engine words its reasons and remedies with these (the messages are part of the
JSON reports), and the views use the same functions for their headlines, so a time reads alike everywhere.
``span`` says exactly what ``humanize.precisedelta(delta, minimum_unit="minutes", format="%0.0f")`` says
(tests/unit/test_text.py holds the two side by side).
"""

from __future__ import annotations

from datetime import datetime, timedelta


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "GPU")`` -> ``1 GPU``; ``counted(1200, "lease")`` -> ``1,200 leases``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def span(delta: timedelta) -> str:
    """A duration to the minute: ``1 day and 12 hours``, ``1 month, 9 days and 12 hours``, ``0 minutes``.
    Years of 365 days, months of 30.5 days (the half day dropped; a 31st day makes a month), as humanize counts."""
    delta = abs(delta)
    years, days = divmod(delta.days, 365)
    months, days = divmod(days, 30.5)
    days, seconds = divmod(int(days) * 86400 + delta.seconds, 86400)  # each remainder a whole number
    hours, seconds = divmod(seconds, 3600)
    minutes = int("%0.0f" % (seconds / 60))  # printf rounding (half to even), as humanize does
    if minutes >= 60:
        minutes -= 60
        hours += 1
    if hours >= 24:
        hours -= 24
        days += 1
    if days >= 31:
        days -= 31
        months += 1
    if months >= 12:
        months -= 12
        years += 1
    parts = [
        counted(int(value), unit) if unit != "year" else f"{int(value):,} {'year' if value == 1 else 'years'}"
        for unit, value in (("year", years), ("month", months), ("day", days), ("hour", hours), ("minute", minutes))
        if value > 0
    ]
    if not parts:
        return "0 minutes"
    if len(parts) == 1:
        return parts[0]
    return f"{', '.join(parts[:-1])} and {parts[-1]}"


def when(then: datetime, at: datetime) -> str:
    """``2025-12-01 00:00 UTC (in 10 days)`` or ``… (3 hours ago)``: the instant, and how far it is from ``at``."""
    rel = f"in {span(then - at)}" if then >= at else f"{span(at - then)} ago"
    return f"{then:%Y-%m-%d %H:%M} UTC ({rel})"
