"""Crash tests of ``leases archive`` (kubectl_runs/archive/store.py): the process is killed with SIGKILL right
after each step of a run (``KUBECTL_RUNS_ARCHIVE_CRASH``); the archive it leaves reads as the archive before
the run or the archive after it — never a mix, never a lease twice — and running again converges to exactly
the archive an uninterrupted run writes, with nothing left over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from archive_fleets import fleet_objects, history
from builders import T0, to_manifest, write_fleet

from kubectl_runs.archive import reader
from kubectl_runs.archive.store import CRASH_ENV
from kubectl_runs.model import snapshot_document
from kubectl_runs.timeutil import EARLIEST, LATEST

# the second run adds leases to months the first one wrote and to new ones: two or more partitions rewritten
FIRST = history(11, 150, prefix="a", days=60)
SECOND = FIRST[:60] + history(12, 150, prefix="b", days=120)


def archive(directory, snapshot, crash: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run([sys.executable, "-m", "kubectl_runs", "leases", "archive", "--to", str(directory),
                           "--snapshot", snapshot, "--at", (T0 + timedelta(days=40)).isoformat()],
                          capture_output=True, text=True, env=env, timeout=120)


def keys(directory) -> list[tuple[str, str, str]]:
    leases = reader.leases_between([reader.open_archive(directory)], EARLIEST, LATEST)
    return sorted((x.metadata.namespace, x.metadata.name, x.metadata.uid) for x in leases)


def held(leases) -> list[tuple[str, str, str]]:
    return sorted((x.metadata.namespace, x.metadata.name, x.metadata.uid) for x in leases
                  if x.status.closed and x.status.ended is not None and x.status.ended > x.spec.start)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """YAML (the leases loaded, then staged as JSON lines) and JSON (DuckDB reads the leases from the file,
    archive/snapshot_rows.py)."""
    base = tmp_path_factory.mktemp("crash")
    out = {"yaml": (write_fleet(base / "first.yaml", [*fleet_objects(), *FIRST]),
                    write_fleet(base / "second.yaml", [*fleet_objects(), *SECOND]))}
    out["json"] = tuple(_as_json(base / f"{name}.json", objects) for name, objects in (("first", FIRST),
                                                                                         ("second", SECOND)))
    return out


def _as_json(path, leases) -> str:
    document = snapshot_document([to_manifest(o) for o in [*fleet_objects(), *leases]],
                                 (T0 + timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    path.write_text(json.dumps(document))
    return str(path)


STEPS = ["cleaned", "staged", "partition:1", "partition:2", "manifest", "done"]


@pytest.mark.parametrize(("form", "crash"), [*(("yaml", step) for step in STEPS),
                                             *(("json", step) for step in ("staged", "partition:2", "manifest"))])
def test_a_run_killed_after_each_step_converges(tmp_path, snapshots, form, crash):
    first, second = snapshots[form]
    directory = tmp_path / "archive"
    assert archive(directory, first).returncode == 0
    before = keys(directory)
    assert before == held(FIRST)

    killed = archive(directory, second, crash)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after_crash = keys(directory)  # opens and reads cleanly: the old archive or the new one
    want = sorted(set(held(FIRST)) | set(held(SECOND)))
    assert after_crash == (want if crash in ("manifest", "done") else before)
    assert len(set(after_crash)) == len(after_crash)
    verified = reader.verify(directory)
    assert not verified.problems
    if crash in ("cleaned",):
        assert not verified.stray

    again = archive(directory, second)
    assert again.returncode == 0, again.stderr
    assert keys(directory) == want
    verified = reader.verify(directory)
    assert not verified.problems and not verified.stray
    files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    assert files == sorted(["_manifest.json", *(p.file for p in verified.archive.manifest.partitions)])

    # and the same bytes as an archive that was never interrupted (same generation numbers, same content)
    clean = tmp_path / "clean"
    assert archive(clean, first).returncode == 0 and archive(clean, second).returncode == 0
    assert keys(clean) == want
    assert [(p.month, p.leases, p.sha256) for p in reader.open_archive(clean).manifest.partitions] == \
        [(p.month, p.leases, p.sha256) for p in verified.archive.manifest.partitions]
