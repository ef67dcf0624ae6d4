"""`snapshot save -f PATH` writes the file whole or not at all (cli/snapshot.py ``write_whole``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kubectl_runs.cli.main import main
from kubectl_runs.cli.snapshot import write_whole
from kubectl_runs.errors import UserError

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "kueue-fleet.yaml")


class Boom(Exception):
    pass


def _half_then_fail(out):
    out.write('{"apiVersion": "v1", "kind": "List", "items": [')
    out.flush()
    raise Boom


@pytest.mark.parametrize("failure", [Boom, KeyboardInterrupt, OSError])
def test_a_failed_write_leaves_no_file(tmp_path, failure):
    path = tmp_path / "s.json"

    def fail(out):
        out.write("half")
        raise failure(28, "No space left on device") if failure is OSError else failure()

    with pytest.raises(UserError if failure is OSError else failure):
        write_whole(str(path), fail)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_earlier_file_as_it_was(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("earlier\n")
    os.chmod(path, 0o640)
    with pytest.raises(Boom):
        write_whole(str(path), _half_then_fail)
    assert path.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]
    write_whole(str(path), lambda out: out.write("new\n"))
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the earlier file's mode is kept


def test_a_new_file_gets_the_umask_mode_and_a_link_is_followed(tmp_path):
    old = os.umask(0o027)
    try:
        write_whole(str(tmp_path / "new.json"), lambda out: out.write("x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
    (tmp_path / "link.json").symlink_to("new.json")
    write_whole(str(tmp_path / "link.json"), lambda out: out.write("through the link"))
    assert (tmp_path / "link.json").is_symlink()
    assert (tmp_path / "new.json").read_text() == "through the link"


def test_not_a_regular_file_is_written_directly():
    write_whole(os.devnull, lambda out: out.write("gone"))
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("where, says", [
    ("missing-dir/s.json", "No such file or directory"),
    ("", "Is a directory"),
])
def test_unwritable_paths_are_one_line(tmp_path, capsys, where, says):
    target = str(tmp_path / where) if where else str(tmp_path)
    code = main(["snapshot", "save", "--snapshot", EXAMPLE, "-f", target])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {target}: cannot write: ") and says in err and err.count("\n") == 1, err


def test_save_to_a_file_equals_save_to_stdout(tmp_path, capsys):
    assert main(["snapshot", "save", "--snapshot", EXAMPLE]) == 0
    printed, _ = capsys.readouterr()
    path = tmp_path / "s.json"
    assert main(["snapshot", "save", "--snapshot", EXAMPLE, "-f", str(path)]) == 0
    _, err = capsys.readouterr()
    assert path.read_text() == printed
    assert err.startswith("saved ") and [p.name for p in tmp_path.iterdir()] == ["s.json"]
