"""``leases audit --every day|week|month`` (engine/audit_periods.py, views/periods.py): calendar periods clipped
to the window, each period's rows exactly the audit of that period, shares and utilization, the capacity step
function, the sparkline; the CLI's table, flat CSV and JSON (valid against its schema); and with --archive the
same periods as a snapshot holding every lease."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from archive_fleets import fleet_objects, history
from builders import T0, run_cli, snapshot, write_fleet
from jsonschema import Draft202012Validator

from kubectl_runs.archive import store
from kubectl_runs.engine.audit import audit
from kubectl_runs.engine.audit_periods import audit_periods, boundaries, offered
from kubectl_runs.views.periods import sparkline

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = T0 + timedelta(days=31)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_boundaries():
    assert boundaries(utc(2025, 12, 30, 6), utc(2026, 1, 2), "day") == [
        ("2025-12-30", utc(2025, 12, 30, 6), utc(2025, 12, 31)),
        ("2025-12-31", utc(2025, 12, 31), utc(2026, 1, 1)),
        ("2026-01-01", utc(2026, 1, 1), utc(2026, 1, 2)),
    ]
    # ISO weeks from Monday; 2025-12-29 is the Monday of 2026-W01
    assert [p[0] for p in boundaries(utc(2025, 12, 20), utc(2026, 1, 10), "week")] == \
        ["2025-W51", "2025-W52", "2026-W01", "2026-W02"]
    weeks = boundaries(utc(2025, 12, 20), utc(2026, 1, 10), "week")
    assert weeks[0][1:] == (utc(2025, 12, 20), utc(2025, 12, 22)) and weeks[-1][1:] == (utc(2026, 1, 5), utc(2026, 1, 10))
    assert boundaries(utc(2025, 11, 15), utc(2026, 2, 1), "month") == [
        ("2025-11", utc(2025, 11, 15), utc(2025, 12, 1)),
        ("2025-12", utc(2025, 12, 1), utc(2026, 1, 1)),
        ("2026-01", utc(2026, 1, 1), utc(2026, 2, 1)),
    ]
    with pytest.raises(ValueError, match="every"):
        boundaries(utc(2025, 1, 1), utc(2025, 2, 1), "year")


def test_offered_is_a_step_function():
    records = [(utc(2025, 11, 2), {"H100": 8}), (utc(2025, 11, 4), {"H100": 16, "A100": 8})]
    present = {"H100": 32}
    day = 86400.0
    # before the first record: the first record's GPUs; between: the next record's; after the last: present
    assert offered(records, present, utc(2025, 11, 1), utc(2025, 11, 2)) == {"H100": 8 * day}
    assert offered(records, present, utc(2025, 11, 1), utc(2025, 11, 6)) == {
        "H100": (8 + 16 * 2 + 32 * 2) * day, "A100": 8 * 2 * day}
    assert offered([], present, utc(2025, 11, 1), utc(2025, 11, 2)) == {"H100": 32 * day}


def test_sparkline():
    assert sparkline([0, 1, 2, 4, 8]) == "·▁▂▄█"
    assert sparkline([0.0, 0.0]) == "··"
    assert sparkline([5.0]) == "█"
    assert sparkline([]) == ""


@pytest.mark.parametrize("every", ["day", "week", "month"])
@pytest.mark.parametrize("by", [("owner",), ("flavor",), ("node",), ("run", "owner")], ids="-".join)
def test_each_period_is_the_audit_of_that_period(every, by):
    leases = history(31, 300, days=90)
    snap = snapshot(*fleet_objects(), *sorted(leases, key=lambda x: (x.metadata.namespace, x.metadata.name)))
    since, until = T0 - timedelta(days=45, hours=5), T0 + timedelta(days=10)
    if every == "day":
        since = until - timedelta(days=9, hours=3)
    result = audit_periods(snap, AT, since=since, until=until, every=every, by=by, present={"H100": 48})
    whole = audit(snap, AT, since=since, until=until, by=by)
    assert result.audit == whole
    assert result.periods[0].start == since and result.periods[-1].end == until
    for period in result.periods:
        alone = audit(snap, AT, since=period.start, until=period.end, by=by)
        assert period.rows == alone.rows
        assert (period.gpu_seconds, period.leases) == (alone.total_gpu_seconds, alone.total_leases)
    assert sum(p.gpu_seconds for p in result.periods) == pytest.approx(whole.total_gpu_seconds, rel=1e-12)
    report = result.report
    by_period: dict[str, float] = {}
    for row in report.rows:
        by_period[row.period] = by_period.get(row.period, 0.0) + row.share
    assert all(v == pytest.approx(1.0, abs=1e-5) for v in by_period.values())
    for totals in report.periods:
        assert totals.capacity_gpu_hours == pytest.approx(
            48 * (datetime.fromisoformat(totals.end) - datetime.fromisoformat(totals.start)).total_seconds() / 3600)
        if totals.gpu_hours:
            assert totals.utilization == pytest.approx(totals.gpu_hours / totals.capacity_gpu_hours, abs=1e-6)
    if by == ("flavor",):  # utilization of a flavor row: of that flavor's capacity (H100 here)
        assert all(r.utilization == pytest.approx(r.gpu_hours / next(
            p.capacity_gpu_hours for p in report.periods if p.period == r.period), abs=1e-5) for r in report.rows)


def test_the_table_csv_and_json(capsys):
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", EXAMPLE, "--every", "week",
                             "--since", "2025-10-25")
    assert (code, err) == (0, "")
    assert out.startswith("""\
Leases 2025-10-25 00:00Z to 2025-11-20 12:00Z by week (5 periods): 20 leases, 9,999 GPU-hours, 3 findings

OWNER             GPU-HOURS  SHARE  BY-WEEK  PEAK-GPUS
org:ai:rai:sys        4,287  42.9%  ···██           48
org:ai:mm:vision      3,264  32.6%  ··▅█▄           16
org:ai:rai:eval       1,824  18.2%  ·█·▃▇            8
org:ext:partner         432   4.3%  ···▃█            4
org:ai:lab:a            192   1.9%  ···█·            8

Periods:
PERIOD    GPU-HOURS  LEASES  CAPACITY-GPU-HOURS  UTILIZATION
2025-W43        0.0       0               3,456         0.0%
2025-W44        864       1              12,096         7.1%
2025-W45        960       1              12,096         7.9%
2025-W46      4,224      12              12,096        34.9%
2025-W47      3,951      10               6,048        65.3%
""")
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", EXAMPLE, "--every", "day", "--since",
                             "2025-11-10", "--by", "owner", "--by", "flavor", "-o", "csv")
    lines = out.splitlines()
    assert lines[0] == "PERIOD,OWNER,FLAVOR,GPU-HOURS,LEASES,PEAK-GPUS,SHARE,UTILIZATION"
    # 192 GPU-hours of the 56 H100-80GB GPUs x 24 h that the nodes not out of service offer
    assert lines[1] == "2025-11-10,org:ai:mm:vision,H100-80GB,192.0,1,8,0.5,0.142857"
    assert all(len(line.split(",")) == 8 for line in lines)
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", EXAMPLE, "--every", "month", "--since",
                             "2025-10-01", "-o", "json")
    data = json.loads(out)
    schema = json.loads((ROOT / "docs" / "schemas" / "leases-audit-every.schema.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(data))
    assert [p["period"] for p in data["periods"]] == ["2025-10", "2025-11"]
    plain = json.loads(run_cli(capsys, "leases", "audit", "--snapshot", EXAMPLE, "--since", "2025-10-01",
                               "-o", "json")[1])
    assert (data["totals"], data["findings"]) == (plain["totals"], plain["findings"])


def test_with_an_archive_the_same_periods(capsys, tmp_path):
    leases = history(41, 500, days=120)
    cut = T0 - timedelta(days=30)
    everything = write_fleet(tmp_path / "all.yaml", [*fleet_objects(), *leases])
    live = write_fleet(tmp_path / "live.yaml", [*fleet_objects(), *(
        x for x in leases if not (x.status.closed and (x.status.ended or x.spec.start) < cut))])
    store.archive(tmp_path / "archive", leases, archived_at=cut, before=cut, gpus={"H100": 24})
    args = ["leases", "audit", "--at", AT.isoformat(), "--since", (T0 - timedelta(days=100)).isoformat(),
            "--every", "month", "--by", "owner", "-o", "json"]
    want = json.loads(run_cli(capsys, *args, "--snapshot", everything)[1])
    got = json.loads(run_cli(capsys, *args, "--snapshot", live, "--archive", str(tmp_path / "archive"))[1])

    def without_capacity(data):
        return {**data, "periods": [{k: v for k, v in p.items() if k not in ("capacityGPUHours", "utilization")}
                                    for p in data["periods"]],
                "rows": [{k: v for k, v in r.items() if k != "utilization"} for r in data["rows"]]}

    assert without_capacity(got) == without_capacity(want)
    assert len(got["periods"]) == 6 and got["totals"]["leases"] > 100
    # capacity: the archive run's 24 GPUs up to its instant (cut), the snapshot's 6 nodes x 8 = 48 after it
    hours = {p["period"]: p for p in got["periods"]}
    first = hours[got["periods"][0]["period"]]
    span = (datetime.fromisoformat(first["end"]) - datetime.fromisoformat(first["start"])).total_seconds() / 3600
    assert first["capacityGPUHours"] == pytest.approx(24 * span, abs=1e-3)
    last = got["periods"][-1]
    span = (datetime.fromisoformat(last["end"]) - datetime.fromisoformat(last["start"])).total_seconds() / 3600
    assert last["capacityGPUHours"] == pytest.approx(48 * span, abs=1e-3)
    assert all(p["capacityGPUHours"] == pytest.approx(48 * (datetime.fromisoformat(p["end"]) - datetime.fromisoformat(
        p["start"])).total_seconds() / 3600, abs=1e-3) for p in want["periods"])
