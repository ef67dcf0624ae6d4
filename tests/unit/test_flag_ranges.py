"""Every number, duration and port a flag takes has a range, and a value outside it is a usage error (exit 2)
that names the flag and the range — never an OverflowError, a MemoryError or minutes of work (issue #28):
``--request-timeout``, reconcile's durations, ``--metrics-addr``, ``--kube-api-qps``/``--kube-api-burst``,
``--chunk-size``, and the number of periods ``leases audit --every`` makes."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from builders import run_cli

from kubectl_runs.cli.leases import MAX_PERIODS, period_count
from kubectl_runs.engine.audit_periods import boundaries

FLEET = str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")
KUBECONFIG = ("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
              "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
              "current-context: x\n")
MANY_NINES = "9" * 400


def usage_error(capsys, args: list[str], expected: str) -> None:
    code, out, err = run_cli(capsys, *args)
    lines = err.splitlines()
    assert code == 2, err
    assert lines[0].startswith("error: ") and expected in lines[0], err
    assert len(lines) == 2 and lines[1].startswith("See 'kubectl runs"), err
    assert "internal error" not in err and out == ""


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return str(path)


@pytest.mark.parametrize(("value", "expected"), [
    ("99999999999999999h", "--request-timeout: '99999999999999999h' is out of range: use 0 (no limit) up to 8760h"),
    ("8761h", "--request-timeout: '8761h' is out of range"),
    (MANY_NINES, "--request-timeout: '" + "9" * 39 + "…' is out of range"),
    ("1e400s", None),  # not a duration (exit 1, as documented)
])
@pytest.mark.parametrize("command", [["budgets", "usage"], ["leases", "audit"], ["plan", "r", "-n", "x"]])
def test_request_timeout_past_a_year(capsys, kubeconfig, command, value, expected):
    if expected is None:
        code, _out, err = run_cli(capsys, *command, "--kubeconfig", kubeconfig, "--request-timeout", value)
        assert code == 1 and err.count("\n") == 1 and "is not a duration" in err
        return
    usage_error(capsys, [*command, "--kubeconfig", kubeconfig, "--request-timeout", value], expected)


@pytest.mark.parametrize(("flags", "expected"), [
    (["--metrics-addr", ":99999"], "--metrics-addr: port 99999 of ':99999' is out of range: use 0-65535"),
    (["--metrics-addr", "127.0.0.1:65536"], "port 65536 of '127.0.0.1:65536' is out of range"),
    (["--metrics-addr", "[::1]:" + MANY_NINES], "is out of range: use 0-65535"),
    (["--metrics-addr", ":-1"], "--metrics-addr: ':-1' is not HOST:PORT, :PORT or 0 (off)"),
    (["--metrics-addr", "localhost"], "--metrics-addr: 'localhost' is not HOST:PORT"),
    (["--request-timeout", "99999999999999999h"], "--request-timeout: '99999999999999999h' is out of range"),
    (["--resync-period", "99999999999999999h"], "--resync-period: '99999999999999999h' is out of range: use at "
                                                "most 8760h (a year)"),
    (["--status-interval", MANY_NINES], "--status-interval: '" + "9" * 39 + "…' is out of range"),
    (["--min-run-time", "8761h"], "--min-run-time: '8761h' is out of range"),
    (["--victim-protection", MANY_NINES + "ms"], "--victim-protection:"),
    (["--eta-grace", "1" + "0" * 30 + "s"], "--eta-grace:"),
    (["--kube-api-qps", "1e-300"], "--kube-api-qps: must be 0.001 to 1,000,000"),
    (["--kube-api-qps", "1e400"], "not inf"),
    (["--kube-api-qps", "nan"], "not nan"),
    (["--kube-api-burst", MANY_NINES], "--kube-api-burst: must be 1 to 1,000,000"),
    (["--kube-api-burst", "0"], "--kube-api-burst: must be 1 to 1,000,000 (requests at once), not 0"),
])
def test_reconcile_numbers_out_of_range_are_usage_errors(capsys, kubeconfig, flags, expected):
    usage_error(capsys, ["reconcile", "--once", "--kubeconfig", kubeconfig, *flags], expected)


@pytest.mark.parametrize("value", ["99999999999999999999999", "1000001", "0", "-5"])
def test_chunk_size_has_a_range(capsys, kubeconfig, value):
    usage_error(capsys, ["budgets", "usage", "--kubeconfig", kubeconfig, "--chunk-size", value],
                "is not in the range 1<=x<=1000000")


@pytest.mark.parametrize(("since", "until", "every", "count"), [
    ("2000-01-01", "8999-01-01", "day", "2,556,333"),
    ("1970-01-01", "8999-01-01", "week", "366,757"),
    ("1970-01-01", "8999-01-01", "month", "84,348"),
    ("2000-01-01", "2027-05-20", "day", "10,001"),
])
def test_every_period_count_is_bounded(capsys, since, until, every, count):
    usage_error(capsys, ["leases", "audit", "--snapshot", FLEET, "--since", since, "--until", until, "--every", every],
                f"--every {every}: {since}T00:00:00Z to {until}T00:00:00Z is {count} periods, more than the 10,000 "
                "a report may have")


def test_the_most_periods_are_still_a_report(capsys):
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", FLEET, "--since", "1990-01-01", "--until",
                             "2015-01-01", "--every", "day", "-o", "json")
    assert code == 0, err
    assert len(json.loads(out)["periods"]) == 9_131


def test_period_count_is_what_boundaries_makes():
    rng = random.Random(28)
    start = datetime(2020, 1, 1, tzinfo=UTC)
    for _ in range(2_000):
        since = start + timedelta(seconds=rng.randrange(10**8))
        until = since + timedelta(seconds=rng.choice([1, 3600, 86400, 604800, rng.randrange(1, 10**8)]))
        if rng.random() < 0.3:
            until = max(until.replace(day=1, hour=0, minute=0, second=0), since + timedelta(seconds=1))
        for every in ("day", "week", "month"):
            assert period_count(since, until, every) == len(boundaries(since, until, every)), (since, until, every)
    assert MAX_PERIODS == 10_000
