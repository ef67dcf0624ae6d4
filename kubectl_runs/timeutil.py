"""Instants and durations as users type them and as the API writes them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)  # times users give; room left on both sides for arithmetic
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(\s*)([a-z]*)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
BACK_UNITS = ("s", "m", "h", "d", "w")  # a duration back from --at: 7d, 24h, 90m (a space may come first)
TIMEOUT_UNITS = ("ms", "s", "m", "h")  # a request timeout as kubectl reads it: 0, 30, 30s, 2m
# The longest duration a flag takes (--request-timeout, reconcile's --resync-period, --min-run-time, …): a year.
# Past it a deadline or a timer overflows the platform's time_t or a thread's wait (OverflowError).
MAX_DURATION_SECONDS = 365 * 86400
MAX_DURATION_TEXT = "8760h (a year)"


def duration_seconds(text: str, units: tuple[str, ...], *, bare: bool = False, spaced: bool = False) -> float | None:
    """The one duration parser: ``NUMBER UNIT`` in seconds, for a unit of ``units``; a bare number (seconds) only
    when ``bare``, a space before the unit only when ``spaced``; None when ``text`` is not such a duration."""
    match = _DURATION.match(text)
    if not match:
        return None
    number, space, unit = match.groups()
    if space and not spaced:
        return None
    if not unit:
        return float(number) if bare and not space else None
    if unit not in units:
        return None
    return float(number) * _UNIT_SECONDS[unit]


def parse_time(text: str, *, now: datetime | None = None, flag: str = "--at") -> datetime:
    """RFC 3339 (``2025-11-01T00:15:00Z``), a date (``2025-11-01``, midnight UTC), ``now``, or — when
    ``now`` is given — a relative duration back from it (``7d``, ``24h``, ``90m``)."""
    value = text.strip()
    if value == "now" and now is not None:
        return now
    seconds = duration_seconds(value, BACK_UNITS, spaced=True)
    if seconds is not None and now is not None:
        try:
            back = now - timedelta(seconds=seconds)
        except OverflowError:
            back = EARLIEST - timedelta(days=1)
        if back < EARLIEST:
            raise ValueError(f"{flag}: {text!r} reaches back before 1970")
        return back
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise ValueError(
            f"{flag}: {text!r} is not a time: use RFC 3339 (2025-11-01T00:15:00Z)"
            + (", a date, or a duration back from --at (7d, 24h)" if now is not None else "")
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError:
        parsed = None
    if parsed is None or not EARLIEST <= parsed <= LATEST:
        raise ValueError(f"{flag}: {text!r} is out of range: use a time between 1970 and 9000")
    return parsed


def rfc3339(at: datetime | None) -> str | None:
    """Seconds precision, UTC, ``Z`` suffix: the form API.md uses everywhere (seeds included)."""
    if at is None:
        return None
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


def now_utc() -> datetime:
    """The wall clock; read once, at the CLI root (DESIGN.md: nothing below calls now())."""
    return datetime.now(UTC).replace(microsecond=0)
