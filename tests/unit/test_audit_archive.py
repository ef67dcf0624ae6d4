"""Differential tests of ``leases audit --archive`` (issue 16): on the same leases, the report read from an
archive plus the live (here: snapshot) leases is exactly the report of one snapshot holding every lease —
rows, GPU-hours, leases, peaks, totals and findings, byte for byte in ``-o json`` — for windows inside the
archive, across its edge, outside it, over all of it; for every ``--by``; with ``-n``; when the archived leases
are still live too (counted once); with two archives that overlap. Also on a generated fleet
(bench/generate.py) with one planted finding of each kind, and on random histories (hypothesis)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from archive_fleets import fleet_objects, history, on_edges, with_archived
from builders import T0, run_cli, snapshot, write_fleet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_runs.archive import audit as archived_audit
from kubectl_runs.archive import reader, store
from kubectl_runs.engine.audit import audit
from kubectl_runs.engine.audit_periods import audit_periods
from kubectl_runs.engine.capacity import fleet_gpus
from kubectl_runs.engine.reports import plain

ROOT = Path(__file__).resolve().parents[2]
AT = T0 + timedelta(days=31)
CUT = T0 - timedelta(days=40)
LEASES = history(21, 700, days=150)


def archived(x, cut=CUT) -> bool:
    return x.status.closed and (x.status.ended or x.spec.start) < cut


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    everything = write_fleet(base / "all.yaml", [*fleet_objects(), *LEASES])
    live = write_fleet(base / "live.yaml", [*fleet_objects(), *(x for x in LEASES if not archived(x))])
    # the archive runs record the fleet's GPUs as the snapshot has them: --every's capacity is then the same
    gpus = fleet_gpus(snapshot(*fleet_objects()))
    store.archive(base / "archive", LEASES, archived_at=AT, before=CUT, gpus=gpus)
    # two archives that overlap: everything that ended 70 days before T0, and everything that ended before CUT
    store.archive(base / "older", LEASES, archived_at=AT, before=T0 - timedelta(days=70), gpus=gpus)
    return {"all": everything, "live": live, "archive": str(base / "archive"), "older": str(base / "older")}


def report(capsys, *args: str) -> tuple[int, str, str]:
    code, out, err = run_cli(capsys, "leases", "audit", "--at", AT.isoformat(), "-o", "json", *args)
    return code, out, err


WINDOWS = {
    "inside": ["--since", (T0 - timedelta(days=120)).isoformat(), "--until", (T0 - timedelta(days=60)).isoformat()],
    "across": ["--since", (T0 - timedelta(days=60)).isoformat(), "--until", (T0 - timedelta(days=20)).isoformat()],
    "after": ["--since", (T0 - timedelta(days=10)).isoformat(), "--until", (T0 + timedelta(days=20)).isoformat()],
    "before": ["--since", (T0 - timedelta(days=400)).isoformat(), "--until", (T0 - timedelta(days=300)).isoformat()],
    "whole": ["--since", (T0 - timedelta(days=200)).isoformat()],
    "default": [],
}
BYS = [["owner"], ["envelope"], ["flavor"], ["run"], ["node"], ["owner", "flavor"], ["node", "envelope"],
       ["owner", "node", "run"]]


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("by", BYS, ids=["-".join(b) for b in BYS])
def test_archive_and_live_is_the_snapshot_of_everything(capsys, fleet, window, by):
    args = [*WINDOWS[window], *(x for b in by for x in ("--by", b))]
    want = report(capsys, "--snapshot", fleet["all"], *args)
    got = report(capsys, "--snapshot", fleet["live"], "--archive", fleet["archive"], *args)
    assert got == want
    if window in ("inside", "across", "whole"):
        data = json.loads(want[1])
        assert data["totals"]["leases"] > 50
        kinds = {f["kind"] for f in data["findings"]}
        assert {"DoubleBooked", "UnknownEnvelope", "UnknownRun"} <= kinds, kinds
    if window == "inside":  # nothing of it is live any more: the archive alone gives it
        live_only = report(capsys, "--snapshot", fleet["live"], *args)
        assert json.loads(live_only[1])["totals"]["leases"] < json.loads(want[1])["totals"]["leases"]


@pytest.mark.parametrize("window", ["across", "whole"])
def test_counted_once(capsys, fleet, window):
    """The archived leases still live (archived, not pruned), and two overlapping archives: each lease once."""
    want = report(capsys, "--snapshot", fleet["all"], *WINDOWS[window])
    assert report(capsys, "--snapshot", fleet["all"], "--archive", fleet["archive"], *WINDOWS[window]) == want
    assert report(capsys, "--snapshot", fleet["live"], "--archive", fleet["older"], "--archive", fleet["archive"],
                  *WINDOWS[window]) == want
    assert report(capsys, "--snapshot", fleet["live"], "--archive", fleet["archive"], "--archive", fleet["archive"],
                  *WINDOWS[window]) == want


@pytest.mark.parametrize("namespace", ["team", "ext"])
def test_a_namespace(capsys, fleet, namespace):
    args = ["-n", namespace, *WINDOWS["whole"], "--by", "run"]
    want = report(capsys, "--snapshot", fleet["all"], *args)
    assert report(capsys, "--snapshot", fleet["live"], "--archive", fleet["archive"], *args) == want
    assert json.loads(want[1])["rows"]


def test_strict_exit_code_and_table(capsys, fleet):
    args = [*WINDOWS["across"], "--strict"]
    code, out, err = run_cli(capsys, "leases", "audit", "--at", AT.isoformat(), "--snapshot", fleet["all"], *args)
    assert code == 3
    assert run_cli(capsys, "leases", "audit", "--at", AT.isoformat(), "--snapshot", fleet["live"],
                   "--archive", fleet["archive"], *args) == (code, out, err)


def test_a_damaged_archive_counts_nothing(capsys, fleet, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(fleet["archive"], copy)
    manifest = json.loads((copy / "_manifest.json").read_text())
    last = copy / manifest["partitions"][-1]["file"]
    last.write_bytes(last.read_bytes()[:100])
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", fleet["live"], "--archive", str(copy))
    assert (code, out) == (1, "")
    assert err == f"error: {last}: 100 bytes; the manifest says {manifest['partitions'][-1]['bytes']} (truncated or rewritten)\n"
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", fleet["live"], "--archive", str(tmp_path / "no"))
    assert (code, out, err) == (1, "", f"error: {tmp_path / 'no'}: no such directory (not a lease archive)\n")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A bench/generate.py fleet (2,000 leases over months, one planted finding of each kind), archived up to
    20 days before its snapshot time, and the snapshot of what is left live."""
    base = tmp_path_factory.mktemp("generated")
    path = base / "fleet.json"
    done = subprocess.run([sys.executable, "-m", "bench.generate", "--nodes", "64", "--envelopes", "64",
                           "--leases", "2000", "--seed", "5", "-o", str(path)], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(path.read_text())
    at = data["metadata"]["annotations"]["jobtree.dev/snapshot-time"]
    code = subprocess.run([sys.executable, "-m", "kubectl_runs", "leases", "archive", "--to", str(base / "archive"),
                           "--snapshot", str(path), "--before", "20d"], capture_output=True, text=True, check=False)
    assert code.returncode == 0, code.stderr
    from kubectl_runs.sources.files import load_snapshot

    cut = load_snapshot([str(path)]).taken_at - timedelta(days=20)
    keep = []
    for item in data["items"]:
        if item["kind"] == "GPULease" and item.get("status", {}).get("closed"):
            ended = item["status"].get("ended") or item["spec"]["start"]
            from datetime import datetime

            if datetime.fromisoformat(ended.replace("Z", "+00:00")) < cut:
                continue
        keep.append(item)
    assert len(keep) < len(data["items"])
    live = base / "live.json"
    live.write_text(json.dumps({**data, "items": keep}))
    return {"all": str(path), "live": str(live), "archive": str(base / "archive"), "at": at}


@pytest.mark.parametrize("since", ["20d", "30d", "90d", "2000d"])
@pytest.mark.parametrize("by", [["owner"], ["envelope", "run"], ["node"]], ids=["owner", "envelope-run", "node"])
def test_a_generated_fleet(capsys, generated, since, by):
    args = ["--since", since, *(x for b in by for x in ("--by", b))]
    want = run_cli(capsys, "leases", "audit", "--snapshot", generated["all"], "-o", "json", *args)
    got = run_cli(capsys, "leases", "audit", "--snapshot", generated["live"], "--archive", generated["archive"],
                  "-o", "json", *args)
    assert got == want
    if since == "2000d":
        kinds = {f["kind"] for f in json.loads(want[1])["findings"]}
        assert kinds == {"DoubleBooked", "UnknownNode", "UnknownRun", "UnknownEnvelope", "ACLViolation", "Overdraft",
                         "UnboundNamespace"}


def _random_case(tmp_path_factory, seed: int, count: int, cut_days: int, lo_days: int, span_days: int):
    """A random history archived up to a cut: (a snapshot of every lease, a snapshot of the leases not archived,
    the archive's directory, since, until)."""
    leases = history(seed, count, days=120)
    cut = T0 + timedelta(days=cut_days)
    directory = tmp_path_factory.mktemp("h")
    store.archive(directory, leases, archived_at=AT, before=cut)
    everything = snapshot(*fleet_objects(), *sorted(leases, key=lambda x: (x.metadata.namespace, x.metadata.name)))
    live = snapshot(*fleet_objects(), *sorted((x for x in leases if not archived(x, cut)),
                                              key=lambda x: (x.metadata.namespace, x.metadata.name)))
    since = T0 + timedelta(days=lo_days)
    return everything, live, directory, since, since + timedelta(days=span_days)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), count=st.integers(0, 80), cut_days=st.integers(-130, 40),
       lo_days=st.integers(-160, 40), span_days=st.integers(1, 200),
       by=st.sampled_from([("owner",), ("node",), ("run", "flavor"), ("envelope",)]))
def test_random_histories(tmp_path_factory, seed, count, cut_days, lo_days, span_days, by):
    everything, live, directory, since, until = _random_case(tmp_path_factory, seed, count, cut_days, lo_days,
                                                             span_days)
    want = audit(everything, AT, since=since, until=until, by=by)
    merged = with_archived(live, [reader.open_archive(directory)], since, min(until, AT))
    got = audit(merged, AT, since=since, until=until, by=by)
    assert plain(got.report) == plain(want.report)


@pytest.mark.parametrize("window", ["inside", "across", "after", "whole"])
@pytest.mark.parametrize("every", ["day", "week", "month"])
@pytest.mark.parametrize("by", [["owner"], ["node"], ["envelope", "flavor"], ["run", "node"]],
                         ids=["owner", "node", "envelope-flavor", "run-node"])
def test_every_period(capsys, fleet, window, every, by):
    """--every: the period rows (GPU-hours, leases, peaks, shares, utilization) and the periods' totals."""
    args = [*WINDOWS[window], "--every", every, *(x for b in by for x in ("--by", b))]
    want = report(capsys, "--snapshot", fleet["all"], *args)
    got = report(capsys, "--snapshot", fleet["live"], "--archive", fleet["archive"], *args)
    assert got == want
    data = json.loads(want[1])
    assert data["rows"] and len(data["periods"]) > 1
    assert any(p["utilization"] for p in data["periods"])
    table = run_cli(capsys, "leases", "audit", "--at", AT.isoformat(), "--snapshot", fleet["all"], *args)
    assert run_cli(capsys, "leases", "audit", "--at", AT.isoformat(), "--snapshot", fleet["live"],
                   "--archive", fleet["archive"], *args) == table


@pytest.mark.parametrize("every", [None, "week"])
@pytest.mark.parametrize("namespace", ["team", "sub", "nowhere"])
def test_a_namespace_by_node(capsys, fleet, namespace, every):
    args = ["-n", namespace, *WINDOWS["whole"], "--by", "node", "--by", "owner",
            *(["--every", every] if every else [])]
    want = report(capsys, "--snapshot", fleet["all"], *args)
    assert report(capsys, "--snapshot", fleet["live"], "--archive", fleet["archive"], *args) == want


BY_SQL = [("owner",), ("node",), ("run", "flavor"), ("envelope",), ("flavor", "node"), ("node", "owner", "envelope")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), count=st.integers(0, 90), cut_days=st.integers(-130, 40),
       lo_days=st.integers(-160, 40), span_days=st.integers(1, 160), by=st.sampled_from(BY_SQL),
       namespace=st.sampled_from([None, "team", "ext"]), every=st.sampled_from([None, "day", "week", "month"]),
       still_live=st.booleans(), at_days=st.integers(-20, 40))
def test_sql_path_is_the_engine(tmp_path_factory, seed, count, cut_days, lo_days, span_days, by, namespace, every,
                                still_live, at_days):
    """The archive's DuckDB path against the engine on one snapshot of every lease: random histories with instants
    on period edges and with microseconds, windows inside, across and outside the archive and past the
    evaluation time, leases both live and archived, every dimension, -n, --every."""
    leases = on_edges(history(seed, count, days=120), seed)
    at = T0 + timedelta(days=at_days)
    cut = min(T0 + timedelta(days=cut_days), at)
    directory = tmp_path_factory.mktemp("h")
    store.archive(directory, leases, archived_at=at, before=cut)
    by_name = lambda x: (x.metadata.namespace, x.metadata.name)  # noqa: E731
    everything = snapshot(*fleet_objects(), *sorted(leases, key=by_name))
    live = snapshot(*fleet_objects(), *sorted(leases if still_live else (x for x in leases if not archived(x, cut)),
                                              key=by_name))
    opened = [reader.open_archive(directory)]
    since = T0 + timedelta(days=lo_days)
    until = since + timedelta(days=span_days)
    if every is None:
        want = audit(everything, at, since=since, until=until, by=by, namespace=namespace)
        got = archived_audit.audit(live, opened, at, since=since, until=until, by=by, namespace=namespace)
    else:
        capacity = [(run.archived_at, run.gpus) for run in opened[0].manifest.runs]
        present = {"H100": 48}
        want = audit_periods(everything, at, since=since, until=until, every=every, by=by, namespace=namespace,
                             capacity=capacity, present=present)
        got = archived_audit.audit_periods(live, opened, at, since=since, until=until, every=every, by=by,
                                           namespace=namespace, capacity=capacity, present=present)
        assert [(p.label, p.start, p.end) for p in got.periods] == [(p.label, p.start, p.end) for p in want.periods]
        want, got = want, got
    assert plain(got.report) == plain(want.report)
    whole_got, whole_want = (got, want) if every is None else (got.audit, want.audit)
    assert whole_got.rows == whole_want.rows
    assert whole_got.notes == whole_want.notes


def test_sums_are_exact_in_any_order():
    """GPU-time is summed in whole microseconds: the report of the same leases in another order is the same, to
    the last bit, with instants that are not whole seconds (float sums would differ in the last place)."""
    import random

    leases = on_edges(history(3, 400, days=60), 3)
    since, until = T0 - timedelta(days=60), T0 + timedelta(days=30)
    reports = []
    for order in range(4):
        shuffled = list(leases)
        random.Random(order).shuffle(shuffled)
        got = audit(snapshot(*fleet_objects(), *shuffled), AT, since=since, until=until, by=("owner",))
        reports.append(([(r.key, r.gpu_seconds) for r in got.rows], got.total_gpu_seconds))
    assert all(r == reports[0] for r in reports)
    total_us = sum(
        len(x.spec.slice.slots) * ((min(x.status.ended, until) if x.status.closed else min(until, AT))
                                   - max(x.spec.start, since)) // timedelta(microseconds=1)
        for x in leases
        if x.spec.start < min(until, AT) and (not x.status.closed or (x.status.ended is not None
                                                                      and since < x.status.ended > x.spec.start)))
    assert reports[0][1] == total_us / 1_000_000


@pytest.fixture(scope="module")
def edgy(tmp_path_factory):
    """The fleet's leases with instants on period edges and with microseconds (on_edges), as YAML files."""
    base = tmp_path_factory.mktemp("edgy")
    leases = on_edges(history(8, 600, days=150, prefix="e"), 8)
    cut = T0 - timedelta(days=40)
    everything = write_fleet(base / "all.yaml", [*fleet_objects(), *leases])
    live = write_fleet(base / "live.yaml", [*fleet_objects(), *(x for x in leases if not archived(x, cut))])
    store.archive(base / "archive", leases, archived_at=AT, before=cut, gpus=fleet_gpus(snapshot(*fleet_objects())))
    return {"all": everything, "live": live, "archive": str(base / "archive"), "leases": leases}


@pytest.mark.parametrize("every", [None, "day", "week", "month"])
@pytest.mark.parametrize("by", [["owner"], ["node", "run"], ["envelope"]], ids=["owner", "node-run", "envelope"])
def test_sub_second_instants_and_edges_in_json(capsys, edgy, by, every):
    """-o json of the archive path is the JSON path's byte for byte when leases start and end on period edges
    and at instants that are not whole seconds (GPU-hours from exact microsecond sums on both paths)."""
    from kubectl_runs.sources.files import load_snapshot

    assert any(x.spec.start.microsecond for x in load_snapshot([edgy["all"]]).leases)
    assert any(x.status.ended is not None and x.status.ended.hour == 0 and x.status.ended.minute == 0
               for x in edgy["leases"])
    args = [*WINDOWS["whole"], *(x for b in by for x in ("--by", b)), *(["--every", every] if every else [])]
    want = report(capsys, "--snapshot", edgy["all"], *args)
    assert report(capsys, "--snapshot", edgy["live"], "--archive", edgy["archive"], *args) == want
    assert json.loads(want[1])["totals"]["leases"] > 300


@pytest.mark.parametrize("every", [None, "week"])
def test_streamed_levels_are_the_partitioned_ones(monkeypatch, tmp_path, every):
    """The running levels come from one sort and a streamed sum (breakdown.STREAMED); the partitioned window
    (breakdown.PARTITIONED, the fallback) gives the same report, and so does a streamed sum that went wrong."""
    from kubectl_runs.archive import breakdown

    leases = on_edges(history(5, 900, days=120), 5)
    store.archive(tmp_path, leases, archived_at=AT, before=T0)
    live = snapshot(*fleet_objects(), *(x for x in leases if not archived(x, T0)))
    opened = [reader.open_archive(tmp_path)]
    since = T0 - timedelta(days=100)

    def run_it():
        if every is None:
            return plain(archived_audit.audit(live, opened, AT, since=since, until=AT, by=("owner", "node")).report)
        return plain(archived_audit.audit_periods(live, opened, AT, since=since, until=AT, every=every,
                                                  by=("owner", "node")).report)

    streamed = run_it()
    monkeypatch.setattr(breakdown, "STREAMED", breakdown.PARTITIONED)
    assert run_it() == streamed
    # a stream out of order (here: by instant only, across keys) makes negative levels: the fallback is taken
    wrong = breakdown.PARTITIONED.replace("PARTITION BY id ORDER BY t, d ", "ORDER BY t DESC ")
    monkeypatch.setattr(breakdown, "STREAMED", wrong)
    assert run_it() == streamed


def test_a_file_damaged_after_opening_is_one_error_naming_it(tmp_path):
    """A file that changes between the archive's checks and the counting (a race with an archive run): one error
    naming the file, no report."""
    from kubectl_runs.archive.manifest import ArchiveError

    leases = history(21, 300, days=150)
    store.archive(tmp_path, leases, archived_at=AT, before=T0)
    opened = reader.open_archive(tmp_path)
    damaged = tmp_path / opened.manifest.partitions[-1].file
    damaged.write_bytes(damaged.read_bytes()[:50])
    with pytest.raises(ArchiveError) as caught:
        archived_audit.audit(snapshot(*fleet_objects()), [opened], AT, since=T0 - timedelta(days=200), until=AT,
                             by=("owner",))
    assert str(damaged) in caught.value.message and "\n" not in caught.value.message


@pytest.fixture(scope="module")
def generated_history(tmp_path_factory):
    """A bench.generate --history archive (bench/history.py: a year of back-to-back chains on 32 nodes, one planted
    double booking a month, random UUIDs, capacity recorded by each monthly run), its present as fleet.json, and
    the snapshot of every lease (bench.bench_archive.snapshot_of: what a cluster that never archived holds)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # bench/ is the repository's, not installed
    from bench.bench_archive import snapshot_of
    from bench.history import write_history

    base = tmp_path_factory.mktemp("history")
    write_history(base, leases=6000, years=1, nodes=32, seed=3)
    return {"fleet": str(base / "fleet.json"), "archive": str(base / "archive"), "all": snapshot_of(str(base), base)}


@pytest.mark.parametrize("args", [[], ["--since", "400d", "--every", "month"], ["--since", "90d", "--every", "week",
                                                                               "--by", "envelope", "--by", "node"],
                                  ["--since", "45d", "--every", "day", "--by", "run"],
                                  ["--since", "400d", "--by", "flavor", "--by", "owner"]],
                         ids=["default", "month", "week-envelope-node", "day-run", "flavor-owner"])
def test_a_generated_history(capsys, generated_history, args):
    """The archive of bench/history.py plus its present, against one snapshot of every lease: -o json byte for
    byte. Capacity: the archive records the fleet's GPUs each month, which are the snapshot's nodes, so
    utilization agrees too."""
    want = run_cli(capsys, "leases", "audit", "--snapshot", generated_history["all"], "-o", "json", *args)
    got = run_cli(capsys, "leases", "audit", "--snapshot", generated_history["fleet"], "--archive",
                  generated_history["archive"], "-o", "json", *args)
    assert got == want
    data = json.loads(want[1])
    assert data["totals"]["leases"] > 100 and data["rows"]
    if "400d" in args:  # the planted double bookings, one a month
        assert sum(f["kind"] == "DoubleBooked" for f in data["findings"]) >= 10


# --- --hours-only -------------------------------------------------------------------------------------------------


def _without_peaks(full: str) -> dict:
    """A full audit's JSON as --hours-only prints it: its rows and totals, no peaks, no findings."""
    data = json.loads(full)
    return {"since": data["since"], "until": data["until"],
            "rows": [{k: v for k, v in row.items() if k != "peakGPUs"} for row in data["rows"]],
            "totals": data["totals"]}


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("by", BYS, ids=["-".join(b) for b in BYS])
def test_hours_only_is_the_audit_without_peaks_or_findings(capsys, fleet, window, by):
    """--hours-only, archive and live or one snapshot of everything: the full audit's rows and totals, exactly,
    without peaks and findings (one aggregate over the window on the archive path, breakdown.hours)."""
    args = [*WINDOWS[window], *(x for b in by for x in ("--by", b))]
    full = report(capsys, "--snapshot", fleet["all"], *args)
    want = report(capsys, "--snapshot", fleet["all"], "--hours-only", *args)
    got = report(capsys, "--snapshot", fleet["live"], "--archive", fleet["archive"], "--hours-only", *args)
    assert want[0] == got[0] == 0
    assert json.loads(want[1]) == _without_peaks(full[1])
    assert got == want
    if window in ("inside", "across", "whole"):
        assert json.loads(got[1])["totals"]["leases"] > 50


@pytest.mark.parametrize("namespace", ["team", "ext"])
def test_hours_only_counts_each_lease_once_in_a_namespace(capsys, fleet, namespace):
    args = ["-n", namespace, *WINDOWS["whole"], "--by", "node", "--hours-only"]
    want = report(capsys, "--snapshot", fleet["all"], *args)
    assert json.loads(want[1])["rows"]
    assert report(capsys, "--snapshot", fleet["all"], "--archive", fleet["archive"], *args) == want
    assert report(capsys, "--snapshot", fleet["live"], "--archive", fleet["older"], "--archive", fleet["archive"],
                  *args) == want


def test_hours_only_table_and_csv_have_no_peaks(capsys, fleet):
    args = ["leases", "audit", "--at", AT.isoformat(), "--snapshot", fleet["live"], "--archive", fleet["archive"],
            *WINDOWS["whole"], "--hours-only"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and err == ""
    assert "peaks and findings not computed: --hours-only" in out
    assert "PEAK" not in out and "Findings" not in out
    code, out, err = run_cli(capsys, *args, "-o", "csv")
    assert code == 0
    assert out.splitlines()[0] == "OWNER,GPU-HOURS,SHARE,AVG-GPUS,LEASES"


@pytest.mark.parametrize("flag", [["--strict"], ["--every", "week"]])
def test_hours_only_refuses_what_needs_peaks_or_findings(capsys, fleet, flag):
    code, out, err = run_cli(capsys, "leases", "audit", "--snapshot", fleet["all"], "--hours-only", *flag)
    assert code == 2 and out == ""
    assert err.startswith("error: --hours-only") and flag[0] in err.splitlines()[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), count=st.integers(0, 80), cut_days=st.integers(-130, 40),
       lo_days=st.integers(-160, 40), span_days=st.integers(1, 200),
       by=st.sampled_from([("owner",), ("node",), ("run", "flavor"), ("envelope", "node")]))
def test_hours_only_sql_is_the_engine(tmp_path_factory, seed, count, cut_days, lo_days, span_days, by):
    """Random histories: the archive path's --hours-only report is the engine's on every lease."""
    everything, live, directory, since, until = _random_case(tmp_path_factory, seed, count, cut_days, lo_days,
                                                             span_days)
    want = audit(everything, AT, since=since, until=until, by=by, hours_only=True)
    got = archived_audit.audit(live, [reader.open_archive(directory)], AT, since=since, until=until, by=by,
                               hours_only=True)
    assert plain(got.report) == plain(want.report)
    assert [row.peak_gpus for row in got.rows] == [None] * len(got.rows)
