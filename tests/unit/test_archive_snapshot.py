"""``leases archive --snapshot FILE.json`` with DuckDB reading the leases from the file itself
(kubectl_runs/archive/snapshot_rows.py, snapshot_sql.py) while the loader checks them: the rows are exactly
``schema.row_of``'s, the archive is the one the loaded leases give, a bad lease is refused in the loader's own
words with nothing written, and whatever the rows cannot stand for exactly (copies of a lease, a nested List,
an instant spelled unusually, a cut of the text in the wrong place) is archived from the loader's leases."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from archive_fleets import fleet_objects, history
from builders import T0, lease, run_cli, to_manifest, write_fleet
from test_archive_staging import _SELECT, CASES

from kubectl_runs.archive import reader, schema, snapshot_rows
from kubectl_runs.model import snapshot_document
from kubectl_runs.sources.files import SnapshotError, load_snapshot
from kubectl_runs.timeutil import EARLIEST, LATEST

AT = (T0 + timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path: Path, objects: list, *, items: list[dict] | None = None, indent: int | None = None) -> str:
    """The objects as one JSON List, stamped AT (as `snapshot save` or `kubectl get -o json` write it)."""
    document = snapshot_document([to_manifest(o) for o in objects] + (items or []), AT)
    path.write_text(json.dumps(document, indent=indent))
    return str(path)


def rows_of(path: str) -> list[tuple]:
    read = snapshot_rows.read(path)
    assert read is not None and read.con is not None, "DuckDB did not read the leases"
    try:
        return read.con.execute(f"SELECT {_SELECT}, month FROM lease_view ORDER BY name").fetchall()
    finally:
        read.close()


def archived(directory: Path) -> dict:
    leases = reader.leases_between([reader.open_archive(directory)], EARLIEST, LATEST)
    return {(x.metadata.namespace, x.metadata.name, x.metadata.uid): schema.row_of(x) for x in leases}


def by_loader(target: Path, *paths: str, args: tuple[str, ...] = ()) -> Path:
    """The archive of the loaded leases (the path every other input takes: here the same objects as YAML),
    written by the same command, one run per snapshot."""
    for i, path in enumerate(paths):
        code = run_main(["leases", "archive", "--to", str(target), "--snapshot", _as_yaml(target.parent, path, i),
                         "--at", AT, *args])
        assert code == 0
    return target


def run_main(argv: list[str]) -> int:
    from kubectl_runs.cli.main import main

    return main(argv)


@pytest.mark.parametrize("indent", [None, 2])
def test_every_column_is_what_row_of_makes(tmp_path, indent):
    path = write_json(tmp_path / "s.json", CASES, indent=indent)
    rows = rows_of(path)
    expected = sorted((schema.row_of(x) for x in CASES), key=lambda r: r.name)
    assert len(rows) == len(expected)
    for got, want in zip(rows, expected, strict=True):
        assert (*got[:8], tuple(got[8]), *got[9:-1]) == tuple(msgspec.structs.astuple(want))[:-1], want.name
        assert got[-1] == schema.month_of(want.start)


def test_defaults_written_out_read_as_left_out(tmp_path):
    """A hand-written lease that spells out what msgspec leaves out (and null where the model takes it)."""
    item = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease",
            "metadata": {"name": "spelled", "namespace": "default", "uid": "", "generation": 3,
                         "resourceVersion": "12", "creationTimestamp": "2025-10-01T00:00:00Z",
                         "labels": {"a": "b"}, "annotations": {}, "managedFields": [{"x": 1}]},
            "spec": {"owner": "org:team", "runRef": {"namespace": "team", "name": "r0"}, "group": 0,
                     "flavor": "H100", "slice": {"slots": ["n0#0"], "role": "Active"},
                     "start": "2025-10-01T00:00:00.5+02:00", "reason": "Start", "paidBy": None},
            "status": {"closed": True, "ended": "2025-10-02T00:00:00Z", "closureReason": None, "preemption": None}}
    path = write_json(tmp_path / "s.json", [], items=[item])
    [got] = rows_of(path)
    [want] = load_snapshot([path]).leases
    assert (*got[:8], tuple(got[8]), *got[9:-1]) == tuple(msgspec.structs.astuple(schema.row_of(want)))[:-1]


@pytest.fixture(params=["fork", "thread"] if snapshot_rows.FORK else ["thread"])
def loader(request, monkeypatch):
    """The loader in a child process (where the system forks) and in a thread: the same rows, errors, archive."""
    monkeypatch.setattr(snapshot_rows, "FORK", request.param == "fork")
    return request.param


def test_the_archive_is_the_loaded_leases_archive(tmp_path, loader):
    leases = history(21, 600, days=90)
    path = write_json(tmp_path / "s.json", [*fleet_objects(), *leases])
    target = tmp_path / "fast"
    assert run_main(["leases", "archive", "--to", str(target), "--snapshot", path, "--at", AT]) == 0
    assert snapshot_rows.read(path).con is not None
    slow = by_loader(tmp_path / "slow", path)
    assert archived(target) == archived(slow)
    assert reader.open_archive(target).manifest.runs[-1].gpus == reader.open_archive(slow).manifest.runs[-1].gpus

    # again: nothing added; a later snapshot merges into the months, as the loaded leases do
    assert run_main(["leases", "archive", "--to", str(target), "--snapshot", path, "--at", AT]) == 0
    assert reader.open_archive(target).manifest.generation == 1
    more = write_json(tmp_path / "more.json", [*fleet_objects(), *leases[:100], *history(22, 300, prefix="m")])
    assert run_main(["leases", "archive", "--to", str(target), "--snapshot", more, "--at", AT]) == 0
    both = by_loader(tmp_path / "both", path, more)
    assert archived(target) == archived(both)
    assert [(p.month, p.leases) for p in reader.open_archive(target).manifest.partitions] == \
        [(p.month, p.leases) for p in reader.open_archive(both).manifest.partitions]


@pytest.mark.parametrize("args", [["--before", "20d"], ["-n", "team"], ["-n", "sub", "--before", "35d"]])
def test_namespace_and_before_as_the_loaded_leases(tmp_path, capsys, args):
    path = write_json(tmp_path / "s.json", [*fleet_objects(), *history(23, 400, days=60)])
    code, out, err = run_cli(capsys, "leases", "archive", "--to", str(tmp_path / "fast"), "--snapshot", path,
                             "--at", AT, "-o", "json", *args)
    assert (code, err) == (0, "")
    fast = json.loads(out)
    code, out, _ = run_cli(capsys, "leases", "archive", "--to", str(tmp_path / "slow"), "--snapshot",
                           _as_yaml(tmp_path, path, 0), "--at", AT, "-o", "json", *args)
    slow = json.loads(out)
    for key in ("added", "open", "endedAfterBefore", "months", "leases"):
        assert fast[key] == slow[key], key
    assert archived(tmp_path / "fast") == archived(tmp_path / "slow")


def _as_yaml(directory: Path, path: str, i: int) -> str:
    snapshot = load_snapshot([path])
    directory.mkdir(parents=True, exist_ok=True)
    return write_fleet(directory / f"as-{i}.yaml", [*snapshot.nodes, *snapshot.budgets, *snapshot.runs,
                                                     *snapshot.leases])


BAD = [
    ('"group": 0', '"group": "0"'),
    ('"group": 0', '"group": 1.5'),
    ('"owner": "org:team"', '"owner": 7'),
    ('"owner": "org:team"', '"owner": ""'),
    ('"role": "Active"', '"role": "Idle"'),
    ('"closed": true', '"closed": "true"'),
    ('"ended": "2025-09-02T00:00:00Z"', '"ended": "2025-09-01T24:00:00Z"'),
    ('"ended": "2025-09-02T00:00:00Z"', '"ended": "2025-09-02 00:00:00"'),
    ('"slots": ["n0#0"]', '"slots": []'),
    ('"slots": ["n0#0"]', '"slots": ["n0#0", 1]'),
    ('"namespace": "team", "uid"', '"namespace": null, "uid"'),
    ('"status": {', '"status": null, "x": {'),
    ('"runRef": {"namespace": "team", "name": "r0"}, ', ''),
]


@pytest.mark.parametrize(("old", "new"), BAD)
def test_a_bad_lease_is_the_loaders_error_and_nothing_is_written(tmp_path, capsys, loader, old, new):
    good = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "GPULease",
            "metadata": {"name": "bad", "namespace": "team", "uid": "u-1"},
            "spec": {"owner": "org:team", "runRef": {"namespace": "team", "name": "r0"}, "group": 0,
                     "flavor": "H100", "slice": {"slots": ["n0#0"], "role": "Active"},
                     "start": "2025-09-01T00:00:00Z", "reason": "Start"},
            "status": {"closed": True, "ended": "2025-09-02T00:00:00Z"}}
    text = json.dumps(good)
    assert old in text
    path = tmp_path / "s.json"
    document = snapshot_document([to_manifest(x) for x in history(24, 50)] + [good], AT)
    path.write_text(json.dumps(document).replace(text, text.replace(old, new)))
    with pytest.raises(SnapshotError) as refused:
        load_snapshot([str(path)])
    target = tmp_path / "archive"
    code, out, err = run_cli(capsys, "leases", "archive", "--to", str(target), "--snapshot", str(path))
    assert (code, out, err) == (1, "", f"error: {refused.value}\n")
    assert not target.exists()


def test_what_the_rows_cannot_stand_for_is_archived_from_the_loaded_leases(tmp_path, capsys, loader):
    leases = history(25, 200)
    copy = to_manifest(leases[3])
    odd = to_manifest(leases[5])
    odd["spec"]["start"] = odd["spec"]["start"].replace("Z", ".1234567Z")  # 7 digits: msgspec rounds, DuckDB cuts
    nested = {"apiVersion": "v1", "kind": "List", "items": [to_manifest(lease("nested", ended=T0))]}
    for name, extra in (("copy", [copy]), ("odd", [odd]), ("nested", [nested])):
        path = write_json(tmp_path / f"{name}.json", [*fleet_objects(), *leases[:5], *leases[6:]], items=extra)
        read = snapshot_rows.read(path)
        assert read is not None and read.con is None, name  # the loader's leases, not DuckDB's rows
        read.close()
        target = tmp_path / name
        code, _out, err = run_cli(capsys, "leases", "archive", "--to", str(target), "--snapshot", path, "--at", AT)
        assert code == 0, err
        want = {(x.metadata.namespace, x.metadata.name, x.metadata.uid): schema.row_of(x)
                for x in load_snapshot([path]).leases if x.status.closed}
        assert archived(target) == {k: v for k, v in want.items() if v.ended is not None and v.ended > v.start}


def test_a_cut_inside_a_string_still_reads_right(tmp_path, monkeypatch):
    """The text is cut where "}, {" stands; inside a string that cut cannot parse, and the items are read whole."""
    leases = [lease(f"l{i}", owner='org:"}, {" team', ended=T0 + timedelta(hours=1)) for i in range(40)]
    path = write_json(tmp_path / "s.json", leases)
    monkeypatch.setattr(snapshot_rows, "PIECE_BYTES", 200)
    read = snapshot_rows.read(path)
    assert read is not None
    try:
        got = {} if read.con is None else dict(read.con.execute("SELECT name, owner FROM lease_rows").fetchall())
    finally:
        read.close()
    assert got in ({}, {f"l{i}": 'org:"}, {" team' for i in range(40)})
    monkeypatch.setattr(snapshot_rows, "PIECE_BYTES", 64)
    target = tmp_path / "a"
    assert run_main(["leases", "archive", "--to", str(target), "--snapshot", path, "--at", AT]) == 0
    assert {k[1]: v.owner for k, v in archived(target).items()} == {f"l{i}": 'org:"}, {" team' for i in range(40)}


def test_pieces_cut_at_item_boundaries(tmp_path, monkeypatch):
    leases = history(26, 300)
    path = write_json(tmp_path / "s.json", leases, indent=1)
    monkeypatch.setattr(snapshot_rows, "PIECE_BYTES", 4096)
    text = json.loads(Path(path).read_text())
    raw = msgspec.Raw(json.dumps(text["items"], indent=1).encode())
    with snapshot_rows._pieces(raw) as files:
        assert len(files) == snapshot_rows.MAX_PIECES
        parsed = [item for f in files for item in json.loads(Path(f).read_text())]
    assert parsed == text["items"]
    assert len(rows_of(path)) == len(leases)


def test_not_json_at_all_is_the_loaders_error(tmp_path, capsys, loader):
    path = tmp_path / "s.json"
    path.write_text('{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", ')
    with pytest.raises(SnapshotError) as refused:
        load_snapshot([str(path)])
    code, out, err = run_cli(capsys, "leases", "archive", "--to", str(tmp_path / "a"), "--snapshot", str(path))
    assert (code, out, err) == (1, "", f"error: {refused.value}\n")
    assert not (tmp_path / "a").exists()


def test_the_snapshot_is_the_loaders_with_or_without_its_leases(tmp_path, loader):
    """Forked, the child sends back the snapshot without its leases (the rows stand for them); in a thread it
    is the loader's whole snapshot. Nodes, notes and the stamp are the loader's either way."""
    path = write_json(tmp_path / "s.json", [*fleet_objects(), *history(27, 100)],
                      items=[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}])
    loaded = load_snapshot([path])
    read = snapshot_rows.read(path)
    try:
        assert read is not None and read.con is not None
        want = dataclasses.replace(loaded, leases=()) if loader == "fork" else loaded
        assert read.snapshot == want
        assert read.snapshot.notes and read.snapshot.taken_at is not None
    finally:
        read.close()


@pytest.mark.skipif(not snapshot_rows.FORK, reason="the loader runs in a child process only where the system forks")
def test_a_child_that_fails_otherwise_leaves_the_file_to_the_loader_here(tmp_path, monkeypatch):
    """The child runs out of memory (say) rather than refusing the file: the file is loaded in the command's
    process, and archived as ever."""
    parent = os.getpid()
    real = snapshot_rows.load_file_apart

    def load_file_apart(name, data, kind):
        if os.getpid() != parent:
            raise MemoryError
        return real(name, data, kind)

    monkeypatch.setattr(snapshot_rows, "load_file_apart", load_file_apart)
    leases = history(28, 200, days=60)
    path = write_json(tmp_path / "s.json", [*fleet_objects(), *leases])
    read = snapshot_rows.read(path)
    try:
        assert read is not None and read.con is not None
        assert read.snapshot == load_snapshot([path])  # loaded here: the whole snapshot
    finally:
        read.close()
    target = tmp_path / "a"
    assert run_main(["leases", "archive", "--to", str(target), "--snapshot", path, "--at", AT]) == 0
    assert archived(target) == archived(by_loader(tmp_path / "slow", path))


@pytest.mark.skipif(not snapshot_rows.FORK, reason="the loader runs in a child process only where the system forks")
def test_the_child_dies_with_the_command(tmp_path):
    """The command's process killed (SIGKILL) while the child loads: the child is killed too, not left loading."""
    path = write_json(tmp_path / "s.json", history(29, 20))
    script = (
        "import os, sys, time\n"
        "from kubectl_runs.archive import snapshot_rows\n"
        "snapshot_rows.load_file_apart = lambda name, data, kind: time.sleep(60)\n"
        f"loader = snapshot_rows._Loader('s.json', open({path!r}, 'rb').read()).__enter__()\n"
        "print(loader.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _running(child)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (one that has ended but that no one has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_copies_that_differ_are_the_loaders_error_and_nothing_is_written(tmp_path, capsys, loader):
    """The child leaves the leases apart (no search for copies): two different copies of one lease still never
    reach the archive; the loader, in this process, refuses the file in its own words."""
    leases = history(30, 120)
    other = to_manifest(leases[7])
    other["spec"]["owner"] = "org:someone-else"
    path = write_json(tmp_path / "s.json", [*fleet_objects(), *leases], items=[other])
    with pytest.raises(SnapshotError, match="with different content") as refused:
        load_snapshot([path])
    target = tmp_path / "archive"
    code, out, err = run_cli(capsys, "leases", "archive", "--to", str(target), "--snapshot", path)
    assert (code, out, err) == (1, "", f"error: {refused.value}\n")
    assert not target.exists()


ITEMS = [{"kind": "Node", "metadata": {"name": "n0"}}, {"kind": "GPULease", "metadata": {"name": "l0"}}]


@pytest.mark.parametrize("text", [
    # kubectl's order (keys sorted), and `snapshot save`'s
    '{"apiVersion": "v1", "items": ITEMS, "kind": "List", "metadata": {"resourceVersion": ""}}',
    '{"apiVersion":"v1","kind":"List","metadata":{"annotations":{"t":"2025-11-01T00:00:00Z"}},"items":ITEMS}',
    '{ "items" :\n ITEMS }',
    # a "]" in a string after the items, and more than a few: passed over, or left to the decode
    '{"items": ITEMS, "metadata": {"annotations": {"a": "x]", "b": "]]"}}}',
    '{"items": ITEMS, "metadata": {"annotations": {"a": "' + "]" * 20 + '"}}}',
    # an "items" key before the top level's (a nested List's, or in a string): left to the decode
    '{"metadata": {"annotations": {"a": "\\"items\\": [1]"}}, "items": ITEMS}',
    '{"other": {"items": [1, 2]}, "items": ITEMS}',
    '{"other": {"items": []}, "items": ITEMS}',
    '{"x": ITEMS, "items": []}',
])
def test_the_items_text_is_the_top_level_items(text):
    """``_items`` finds the items' text from the keys around it: the text a decode of the top level (which
    skips the items) gives."""
    data = text.replace("ITEMS", json.dumps(ITEMS)).encode()
    assert bytes(snapshot_rows._items(data)) == bytes(snapshot_rows._ITEMS.decode(data).items)


@pytest.mark.parametrize("text", [
    '{"kind": "GPULease", "x": {"items": ITEMS}}',
    '{"kind": "GPULease", "metadata": {"name": "a"}, "x": {"items": ITEMS}, "y": "]"}',
])
def test_no_top_level_items_no_text_for_duckdb(text):
    """One object, not a List, with an ``items`` key inside: no text is found (the file is the loader's alone,
    ``read`` sends it there)."""
    data = text.replace("ITEMS", json.dumps(ITEMS)).encode()
    with pytest.raises(msgspec.ValidationError):
        snapshot_rows._items(data)


@pytest.mark.parametrize("text", ['{"items": [], "x": ITEMS}', '{"items": ITEMS, "x": ITEMS}',
                                  '{"items": ITEMS, "items": []}'])
def test_items_text_running_into_a_later_key_is_not_one_array(text):
    """A ``]`` in a later key's value (or a second ``items``, which the loader refuses) can close what
    ``_items`` finds: the text is then not one JSON array, which DuckDB refuses (the test below: the archive is
    then the loader's)."""
    data = text.replace("ITEMS", json.dumps(ITEMS)).encode()
    found = bytes(snapshot_rows._items(data))
    assert found != bytes(snapshot_rows._ITEMS.decode(data).items)
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(found)


def test_a_key_after_the_items_with_leases_in_it_is_archived_from_the_loaded_leases(tmp_path, capsys):
    """``{"items": [...], "extra": [leases]}``: what DuckDB is given runs into ``extra``, it refuses the text, and
    the archive is the loaded leases' (the loader reads the top level's items only)."""
    leases = history(31, 150)
    path = Path(write_json(tmp_path / "s.json", [*fleet_objects(), *leases]))
    document = json.loads(path.read_text())
    document["extra"] = [to_manifest(lease("elsewhere", ended=T0))]
    path.write_text(json.dumps(document))
    assert bytes(snapshot_rows._items(path.read_bytes())) != bytes(snapshot_rows._ITEMS.decode(path.read_bytes()).items)
    read = snapshot_rows.read(str(path))
    assert read is not None and read.con is None  # the loader's leases, not DuckDB's rows
    read.close()
    target = tmp_path / "a"
    code, _out, err = run_cli(capsys, "leases", "archive", "--to", str(target), "--snapshot", str(path), "--at", AT)
    assert code == 0, err
    assert archived(target) == archived(by_loader(tmp_path / "slow", str(path)))


def test_the_items_of_a_file_that_is_not_json_are_the_decoders_error():
    with pytest.raises(msgspec.DecodeError):
        snapshot_rows._items(b'{"items": [1, 2], "kind": ')


def test_a_single_lease_file_with_an_items_key_inside_is_the_loaders(tmp_path, capsys, loader):
    """One GPULease object (not a List) with an unknown key holding ``{"items": [another lease]}``: the loader
    reads the one lease; so does the archive (no top-level items: DuckDB is given nothing)."""
    [one, other] = history(32, 2)
    document = {**to_manifest(one), "x": {"items": [to_manifest(other)]}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(document))
    assert [x.metadata.name for x in load_snapshot([str(path)]).leases] == [one.metadata.name]
    target = tmp_path / "a"
    code, _out, err = run_cli(capsys, "leases", "archive", "--to", str(target), "--snapshot", str(path), "--at", AT)
    assert code == 0, err
    assert archived(target) == archived(by_loader(tmp_path / "slow", str(path)))
    assert [key[1] for key in archived(target)] == ([one.metadata.name] if one.status.closed else [])


def test_a_lease_not_of_the_plain_form_fails_the_read_even_beside_its_copy(tmp_path, loader):
    """Two copies of a lease the loader reads as one (the same instant, spelled ``…00Z`` and ``…00.0000000Z``):
    the copy not of the plain form fails DuckDB's read, so the loader's leases are archived (it is never just
    left out of the rows, where the other copy would make the count come out right)."""
    leases = history(33, 60)
    copy = to_manifest(leases[4])
    copy["spec"]["start"] = copy["spec"]["start"].replace("Z", ".0000000Z")
    path = write_json(tmp_path / "s.json", [*fleet_objects(), *leases], items=[copy])
    assert len(load_snapshot([path]).leases) == len(leases)  # the loader reads the two copies as one
    read = snapshot_rows.read(path)
    assert read is not None and read.con is None
    read.close()


def test_an_archive_with_the_old_manifest_name_is_renamed_on_this_path_too(tmp_path):
    """DuckDB's path (archive_staged) renames an old archive's manifest.json _manifest.json as the loader's does,
    whether the run adds leases or not."""
    leases = history(24, 300, days=60)
    first = write_json(tmp_path / "first.json", [*fleet_objects(), *leases[:150]])
    every = write_json(tmp_path / "every.json", [*fleet_objects(), *leases])
    target = tmp_path / "a"
    assert run_main(["leases", "archive", "--to", str(target), "--snapshot", first, "--at", AT]) == 0
    for snapshot in (first, every):  # nothing new, then new leases
        (target / "_manifest.json").rename(target / "manifest.json")
        assert snapshot_rows.read(snapshot).con is not None
        assert run_main(["leases", "archive", "--to", str(target), "--snapshot", snapshot, "--at", AT]) == 0
        assert (target / "_manifest.json").exists() and not (target / "manifest.json").exists()
    assert archived(target) == archived(by_loader(tmp_path / "loader", every))
    assert not reader.verify(target).problems and not reader.verify(target).stray
