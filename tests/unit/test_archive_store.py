"""``leases archive`` underneath (kubectl_runs/archive/store.py, reader.py): closed leases only, each once
whatever is re-archived, months merged across runs, --before, and every listed lease read back exactly;
``verify`` and ``open_archive`` name a damaged file."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from archive_fleets import history, with_uid
from builders import T0, lease

from kubectl_runs.archive import reader, store
from kubectl_runs.archive.manifest import ArchiveError
from kubectl_runs.timeutil import EARLIEST, LATEST

AT = T0 + timedelta(days=31)


def everything(directory: Path) -> list:
    return reader.leases_between([reader.open_archive(directory)], EARLIEST, LATEST)


def held(leases) -> dict:
    """Closed leases that held GPUs, by key: what an archive read over all time returns."""
    return {(x.metadata.namespace, x.metadata.name, x.metadata.uid): x for x in leases
            if x.status.closed and x.status.ended is not None and x.status.ended > x.spec.start}


def test_closed_leases_in_months_each_once(tmp_path):
    leases = history(1, 300)
    result = store.archive(tmp_path / "a", leases, archived_at=AT, gpus={"H100": 48})
    closed = [x for x in leases if x.status.closed]
    assert result.added == len(closed) and result.open == len(leases) - len(closed) and result.already == 0
    manifest = result.manifest
    assert manifest.leases == len(closed)
    assert [p.month for p in manifest.partitions] == sorted({x.spec.start.strftime("%Y-%m") for x in closed})
    for part in manifest.partitions:
        assert (tmp_path / "a" / part.file).exists()
    back = everything(tmp_path / "a")
    assert {(x.metadata.namespace, x.metadata.name, x.metadata.uid): x for x in back} == held(leases)
    assert manifest.runs[-1].gpus == {"H100": 48} and manifest.runs[-1].added == len(closed)

    again = store.archive(tmp_path / "a", leases, archived_at=AT, gpus={"H100": 48})
    assert (again.added, again.already, again.months) == (0, len(closed), ())
    assert again.manifest == manifest  # nothing rewritten, not even the manifest


def test_later_runs_merge_into_the_months(tmp_path):
    first, second = history(2, 200, prefix="a"), history(3, 200, prefix="b")
    store.archive(tmp_path / "a", first, archived_at=AT)
    result = store.archive(tmp_path / "a", first[:50] + second, archived_at=AT)
    closed_second = [x for x in second if x.status.closed]
    assert result.added == len(closed_second)
    assert result.already == len([x for x in first[:50] if x.status.closed])
    assert result.manifest.generation == 2
    back = everything(tmp_path / "a")
    assert len(back) == len(held(first + second))
    assert {(x.metadata.namespace, x.metadata.name, x.metadata.uid): x for x in back} == held(first + second)
    # one file per month, the replaced ones deleted
    files = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*.parquet"))
    assert files == sorted(p.file for p in result.manifest.partitions)
    assert not reader.verify(tmp_path / "a").problems


def test_a_new_uid_is_a_new_lease(tmp_path):
    a = lease("x", ended=T0 + timedelta(hours=1))
    store.archive(tmp_path / "a", [with_uid(a, "u1")], archived_at=AT)
    result = store.archive(tmp_path / "a", [with_uid(a, "u1"), with_uid(a, "u2")], archived_at=AT)
    assert (result.added, result.already, result.manifest.leases) == (1, 1, 2)


def test_before_keeps_leases_that_ended_later(tmp_path):
    leases = history(4, 200)
    cut = T0 - timedelta(days=30)
    result = store.archive(tmp_path / "a", leases, archived_at=AT, before=cut)
    ended_before = [x for x in leases if x.status.closed and (x.status.ended or x.spec.start) < cut]
    assert result.added == len(ended_before)
    assert result.later == len([x for x in leases if x.status.closed]) - len(ended_before)
    assert result.manifest.runs[-1].before == cut
    assert all(x.status.ended < cut for x in everything(tmp_path / "a"))


def test_leases_between_prunes_to_the_window(tmp_path):
    leases = history(5, 400)
    store.archive(tmp_path / "a", leases, archived_at=AT)
    arch = reader.open_archive(tmp_path / "a")
    lo, hi = T0 - timedelta(days=20), T0 - timedelta(days=10)
    got = reader.leases_between([arch], lo, hi)
    want = [x for x in held(leases).values() if x.spec.start < hi and x.status.ended > lo]
    assert sorted(x.key for x in got) == sorted(x.key for x in want)
    assert len(arch.files(lo, hi)) < len(arch.manifest.partitions)
    # a key read live is not read again; two archives holding a lease give it once
    store.archive(tmp_path / "b", leases[:100], archived_at=AT)
    both = reader.leases_between([arch, reader.open_archive(tmp_path / "b")], lo, hi,
                                 skip={(want[0].metadata.namespace, want[0].metadata.name, want[0].metadata.uid)})
    assert sorted(x.key for x in both) == sorted(x.key for x in want[1:])


def test_a_directory_that_is_not_ours_is_refused(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ArchiveError, match=r"other: not a lease archive \(no _manifest.json\) and not empty: holds notes.txt"):
        store.archive(tmp_path / "other", history(1, 5), archived_at=AT)
    with pytest.raises(ArchiveError, match="no such directory"):
        reader.open_archive(tmp_path / "missing")
    with pytest.raises(ArchiveError, match=r"_manifest.json: not found"):
        reader.open_archive(tmp_path / "other")


def damaged(tmp_path, change) -> Path:
    directory = tmp_path / "a"
    store.archive(directory, history(6, 120), archived_at=AT)
    manifest = json.loads((directory / "_manifest.json").read_text())
    change(directory, manifest)
    return directory


def test_a_truncated_file_is_named(tmp_path):
    def cut(directory, manifest):
        file = directory / manifest["partitions"][1]["file"]
        file.write_bytes(file.read_bytes()[:-40])

    directory = damaged(tmp_path, cut)
    with pytest.raises(ArchiveError, match=r"leases-000001.parquet: \d+ bytes; the manifest says \d+ \(truncated"):
        reader.open_archive(directory)
    assert "truncated" in reader.verify(directory).problems[0]


def test_a_missing_file_is_a_half_written_partition(tmp_path):
    def drop(directory, manifest):
        (directory / manifest["partitions"][0]["file"]).unlink()

    directory = damaged(tmp_path, drop)
    with pytest.raises(ArchiveError, match=r"missing: the manifest lists it \(partition \d{4}-\d{2} is incomplete\)"):
        reader.open_archive(directory)


def test_a_file_of_another_schema_version_is_named(tmp_path):
    import duckdb

    def other_version(directory, manifest):
        part = manifest["partitions"][0]
        file = directory / part["file"]
        con = duckdb.connect()
        con.execute(f"COPY (SELECT * FROM read_parquet('{file}')) TO '{file}.x' (FORMAT parquet, "
                    "KV_METADATA {'kubectl-runs.lease-archive.schema-version': '3'})")
        Path(f"{file}.x").replace(file)
        part["bytes"] = file.stat().st_size
        part["sha256"] = store.sha256(file)
        (directory / "_manifest.json").write_text(json.dumps(manifest))

    directory = damaged(tmp_path, other_version)
    with pytest.raises(ArchiveError, match=r"leases-000001.parquet: schema version 3; this kubectl-runs reads versions 1 and 2"):
        reader.open_archive(directory)


def test_a_manifest_of_another_version_or_garbage_is_named(tmp_path):
    def newer(directory, manifest):
        manifest["schemaVersion"] = 3
        (directory / "_manifest.json").write_text(json.dumps(manifest))

    directory = damaged(tmp_path, newer)
    with pytest.raises(ArchiveError, match=r"_manifest.json: schema version 3; this kubectl-runs reads versions 1 and 2"):
        reader.open_archive(directory)
    (directory / "_manifest.json").write_text("{not json")
    with pytest.raises(ArchiveError, match=r"_manifest.json: not a lease archive manifest"):
        store.archive(directory, [], archived_at=AT)


def test_verify_checks_checksums_and_names_strays(tmp_path):
    def flip(directory, manifest):
        file = directory / manifest["partitions"][0]["file"]
        data = bytearray(file.read_bytes())
        data[10] ^= 0xFF
        file.write_bytes(bytes(data))
        (directory / "month=2025-11" / ".leases-000009.parquet.tmp").write_bytes(b"half")

    directory = damaged(tmp_path, flip)
    verified = reader.verify(directory)
    assert len(verified.problems) == 1 and "SHA-256 differs" in verified.problems[0]
    assert verified.stray == ["month=2025-11/.leases-000009.parquet.tmp"]


def test_rows_are_sorted_by_start_in_each_file(tmp_path):
    import duckdb

    result = store.archive(tmp_path / "a", history(7, 300), archived_at=AT)
    con = duckdb.connect()
    for part in result.manifest.partitions:
        keys = con.execute(f"SELECT epoch_us(start), namespace, name, uid "
                           f"FROM read_parquet('{tmp_path / 'a' / part.file}')").fetchall()
        assert keys == sorted(keys)
    kv = con.execute(f"SELECT value FROM parquet_kv_metadata('{tmp_path / 'a' / part.file}')").fetchall()
    assert (b"2",) in kv
    assert msgspec.json.decode((tmp_path / "a" / "_manifest.json").read_bytes())["format"] == "kubectl-runs/lease-archive"


def test_the_files_do_not_depend_on_the_order_leases_come_in(tmp_path):
    """Months are written several at a time from one sorted table: the same leases in any order (and starts
    that tie) give the same bytes, month by month."""
    import random

    leases = history(8, 400)
    tied = [msgspec.structs.replace(x, spec=msgspec.structs.replace(x.spec, start=leases[0].spec.start))
            for x in leases[:40]]
    ordered = store.archive(tmp_path / "a", tied + leases[40:], archived_at=AT).manifest
    shuffled = tied + leases[40:]
    random.Random(3).shuffle(shuffled)
    again = store.archive(tmp_path / "b", shuffled, archived_at=AT).manifest
    assert len(ordered.partitions) > 2
    assert [(p.file, p.sha256, p.leases) for p in ordered.partitions] == \
        [(p.file, p.sha256, p.leases) for p in again.partitions]


def test_an_archive_that_received_nothing_is_an_empty_archive(tmp_path):
    result = store.archive(tmp_path / "a", [lease("open-one")], archived_at=AT)
    assert (result.added, result.open, result.manifest.generation) == (0, 1, 0)
    assert reader.open_archive(tmp_path / "a").manifest.leases == 0
    assert everything(tmp_path / "a") == []
    assert not reader.verify(tmp_path / "a").problems


def test_prunable_is_only_what_the_archive_holds_unchanged(tmp_path):
    from kubectl_runs.archive.prune import prunable

    closed = [with_uid(lease(f"c{i}", ended=T0 + timedelta(hours=i + 1)), f"u{i}") for i in range(4)]
    store.archive(tmp_path / "a", closed[:3], archived_at=AT)
    arch = reader.open_archive(tmp_path / "a")
    changed = msgspec.structs.replace(closed[2], status=msgspec.structs.replace(closed[2].status,
                                                                                closure_reason="NodeFailure"))
    reborn = with_uid(closed[1], "another-uid")
    still_open = with_uid(lease("c0"), "u0")  # the key of an archived lease, but open: never pruned
    got = prunable(arch, [closed[0], reborn, changed, closed[3], still_open])
    assert [x.key for x in got] == ["team/c0"] and got[0] is closed[0]
    assert [x.key for x in prunable(arch, closed)] == ["team/c0", "team/c1", "team/c2"]


def test_a_connection_prints_nothing_of_its_own():
    """DuckDB draws a progress bar for a long query where it thinks someone watches (seen on stderr with stdout
    redirected in-process): the plugin's stderr is for its errors, so every connection has it off, cursors too."""
    from kubectl_runs.archive import db

    con = db.connect()
    try:
        for cursor in (con, con.cursor()):
            assert cursor.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)
    finally:
        con.close()


# --- archives written before issue 28, whose manifest is manifest.json ------------------------------------------


def old_layout(directory: Path) -> Path:
    """An archive as kubectl-runs wrote it before issue 28: the same files, the manifest named manifest.json."""
    (directory / "_manifest.json").rename(directory / "manifest.json")
    return directory


def test_an_archive_with_the_old_manifest_name_reads_and_verifies(tmp_path):
    leases = history(8, 200)
    store.archive(tmp_path / "new", leases, archived_at=AT)
    store.archive(tmp_path / "old", leases, archived_at=AT)
    old = old_layout(tmp_path / "old")
    assert held(everything(old)) == held(everything(tmp_path / "new")) == held(leases)
    assert reader.open_archive(old).manifest.partitions == reader.open_archive(tmp_path / "new").manifest.partitions
    verified = reader.verify(old)
    assert not verified.problems and not verified.stray
    assert (old / "manifest.json").exists() and not (old / "_manifest.json").exists()  # reading renames nothing


def test_writing_to_an_old_archive_renames_its_manifest(tmp_path):
    leases = history(9, 300)
    first, second = leases[:150], leases[150:]
    old = tmp_path / "old"
    store.archive(old, first, archived_at=AT)
    old_layout(old)
    before = (old / "manifest.json").read_bytes()
    # a run that adds nothing renames it too (its bytes unchanged): the archive is then readable by Spark
    result = store.archive(old, first, archived_at=AT)
    assert result.migrated and result.added == 0
    assert not (old / "manifest.json").exists() and (old / "_manifest.json").read_bytes() == before
    assert not store.archive(old, first, archived_at=AT).migrated
    # and one that adds leases, from an old archive again: the same archive as one never written the old way
    old_layout(old)
    result = store.archive(old, second, archived_at=AT)
    assert result.migrated and result.added
    store.archive(tmp_path / "new", first, archived_at=AT)
    store.archive(tmp_path / "new", second, archived_at=AT)
    assert held(everything(old)) == held(everything(tmp_path / "new")) == held(leases)
    assert sorted(p.name for p in old.iterdir() if p.is_file()) == ["_manifest.json"]
    assert not reader.verify(old).problems and not reader.verify(old).stray


def test_an_old_archive_of_another_version_is_refused_and_not_renamed(tmp_path):
    store.archive(tmp_path / "a", history(10, 50), archived_at=AT)
    old = old_layout(tmp_path / "a")
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["schemaVersion"] = 3
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArchiveError, match=r"/manifest.json: schema version 3; this kubectl-runs reads versions 1 and 2"):
        store.archive(old, history(10, 60), archived_at=AT)
    assert (old / "manifest.json").exists() and not (old / "_manifest.json").exists()


def test_both_names_the_new_one_is_the_manifest_the_old_one_a_stray(tmp_path):
    leases = history(11, 200)
    store.archive(tmp_path / "a", leases[:100], archived_at=AT)
    directory = tmp_path / "a"
    (directory / "manifest.json").write_bytes((directory / "_manifest.json").read_bytes())  # copied back, say
    store.archive(directory, leases, archived_at=AT)  # _manifest.json is read, then rewritten
    (directory / "manifest.json").write_text("{stale")
    assert reader.open_archive(directory).manifest.generation == 2
    assert reader.verify(directory).stray == ["manifest.json"]
    result = store.archive(directory, leases, archived_at=AT)
    assert result.removed == ("manifest.json",) and not result.migrated
    assert not (directory / "manifest.json").exists()
