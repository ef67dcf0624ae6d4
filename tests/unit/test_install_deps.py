"""`pip install .` (the README's line) gives every command what it needs: DuckDB is an ordinary dependency, and a
Python without it gets one line naming the package from the archive commands, not an internal error."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_duckdb_is_installed_by_pip_install_dot():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    requires = [line.split(">")[0].split("<")[0].strip() for line in config["options"]["install_requires"].split("\n")]
    assert "duckdb" in requires


def test_without_duckdb_the_archive_commands_say_so_in_one_line(tmp_path):
    code = ("import sys; sys.modules['duckdb'] = None\n"
            "from kubectl_runs.cli.main import main\n"
            f"sys.exit(main(['leases', 'archive', '--snapshot', {str(ROOT / 'examples' / 'fleet.yaml')!r}, "
            f"'--to', {str(tmp_path / 'archive')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("error: the lease archive needs the duckdb package") and "pip install" in line
    assert "internal error" not in line
