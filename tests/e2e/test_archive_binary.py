"""The lease archive in the single-file executable: it stays ≤ 70 MB although it carries DuckDB (68 MB of native
code, stored xz-compressed in the module archive and unpacked on first use, kubectl_runs/archive/frozen.py);
``leases archive``, ``--verify`` and ``leases audit --archive`` answer exactly as the Python package does; and
``--help`` and the other commands never unpack it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
AT = "2025-11-20T12:00:00Z"

LIMIT = 70 * 1024 * 1024


def package(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubectl_runs", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def test_the_executable_stays_under_70_mb(built_binary):
    assert built_binary.stat().st_size <= LIMIT, f"{built_binary.stat().st_size / 2**20:.1f} MiB"


def test_archive_commands_in_the_executable(plugin, tmp_path):
    cache = plugin.env["HOME"] + "/.cache/kubectl-runs"
    done = plugin.kubectl_runs("--help")
    assert done.returncode == 0
    done = plugin.kubectl_runs("budgets", "usage", "--snapshot", EXAMPLE, "--at", AT)
    assert done.returncode == 0
    assert not list(Path(plugin.env["HOME"]).rglob("_duckdb*")), "unpacked without need"

    target = tmp_path / "frozen"
    done = plugin.kubectl_runs("leases", "archive", "--to", str(target), "--snapshot", EXAMPLE, "-o", "json")
    assert done.returncode == 0, done.stderr
    frozen = json.loads(done.stdout)
    assert (frozen["added"], frozen["leases"]) == (10, 10)
    assert list(Path(cache).glob("duckdb-*/_duckdb*"))  # unpacked once, into the cache
    want = json.loads(package("leases", "archive", "--to", str(tmp_path / "package"), "--snapshot", EXAMPLE,
                              "-o", "json").stdout)
    assert [(p["month"], p["leases"]) for p in frozen["partitions"]] == [(p["month"], p["leases"]) for p in
                                                                         want["partitions"]]
    done = plugin.kubectl_runs("leases", "archive", "--verify", str(target))
    assert done.returncode == 0 and done.stdout.splitlines()[0].endswith(": verified")
    args = ("leases", "audit", "--snapshot", EXAMPLE, "--at", AT, "--since", "60d", "--every", "week", "-o", "json")
    done = plugin.kubectl_runs(*args, "--archive", str(target))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(package(*args, "--archive", str(tmp_path / "package")).stdout)
    done = plugin.kubectl_runs("leases", "audit", "--snapshot", EXAMPLE, "--archive", str(tmp_path / "missing"))
    assert (done.returncode, done.stderr) == (1, f"error: {tmp_path / 'missing'}: no such directory (not a lease "
                                                 "archive)\n")
