"""Times as users type them (``--at``, ``--since``) and as the API writes them (RFC 3339, seconds, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kubectl_runs.timeutil import hours, parse_time, rfc3339

NOW = datetime(2025, 11, 20, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-11-01T00:15:00Z", datetime(2025, 11, 1, 0, 15, tzinfo=UTC)),
        ("2025-11-01T00:15:00z", datetime(2025, 11, 1, 0, 15, tzinfo=UTC)),
        ("2025-11-01T02:15:00+02:00", datetime(2025, 11, 1, 0, 15, tzinfo=UTC)),
        ("2025-11-01T00:15:00.750Z", datetime(2025, 11, 1, 0, 15, 0, 750000, tzinfo=UTC)),
        ("2025-11-01", datetime(2025, 11, 1, tzinfo=UTC)),
        ("2025-11-01T00:15:00", datetime(2025, 11, 1, 0, 15, tzinfo=UTC)),  # no zone = UTC
        ("  2025-11-01T00:15:00Z \n", datetime(2025, 11, 1, 0, 15, tzinfo=UTC)),
    ],
    ids=["utc-Z", "utc-lower-z", "offset", "fraction", "date-only", "naive-is-utc", "whitespace"],
)
def test_parse_absolute_times(text, expected):
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed.tzinfo == UTC


@pytest.mark.parametrize(
    ("text", "back"),
    [("7d", timedelta(days=7)), ("24h", timedelta(hours=24)), ("90m", timedelta(minutes=90)),
     ("30s", timedelta(seconds=30)), ("1.5h", timedelta(minutes=90)), ("2w", timedelta(weeks=2))],
    ids=["days", "hours", "minutes", "seconds", "fraction", "weeks"],
)
def test_relative_durations_count_back_from_now(text, back):
    assert parse_time(text, now=NOW) == NOW - back


def test_now_needs_a_clock():
    assert parse_time("now", now=NOW) == NOW
    with pytest.raises(ValueError, match="--at: 'now' is not a time"):
        parse_time("now")


@pytest.mark.parametrize(
    "text",
    ["yesterday", "2025-13-01T00:00:00Z", "7d", "", "2025-11-01T25:00:00Z"],
    ids=["word", "month-13", "relative-without-clock", "empty", "hour-25"],
)
def test_bad_times_name_the_flag_and_the_form(text):
    with pytest.raises(ValueError) as caught:
        parse_time(text, flag="--at")
    message = str(caught.value)
    assert message == f"--at: {text!r} is not a time: use RFC 3339 (2025-11-01T00:15:00Z)"
    assert "\n" not in message


def test_bad_relative_time_mentions_durations_when_they_are_allowed():
    with pytest.raises(ValueError, match=r"--since: 'soon' is not a time: .*a duration back from --at \(7d, 24h\)"):
        parse_time("soon", now=NOW, flag="--since")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (datetime(2025, 11, 1, 0, 15, 0, 999999, tzinfo=UTC), "2025-11-01T00:15:00Z"),  # seconds precision
        (datetime(2025, 11, 1, 2, 15, tzinfo=timezone(timedelta(hours=2))), "2025-11-01T00:15:00Z"),
        (None, None),
    ],
    ids=["truncates-fraction", "converts-to-utc", "none"],
)
def test_rfc3339(value, expected):
    assert rfc3339(value) == expected


def test_hours():
    assert hours(timedelta(minutes=90)) == 1.5


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1969-12-31T00:00:00Z"])
def test_times_out_of_range_are_refused(text):
    with pytest.raises(ValueError, match=r"is out of range: use a time between 1970 and 9000$"):
        parse_time(text)


def test_relative_time_before_1970_is_refused():
    with pytest.raises(ValueError, match=r"reaches back before 1970$"):
        parse_time("99999999d", now=datetime(2025, 11, 20, tzinfo=UTC), flag="--since")
