"""DuckDB inside the single-file executable, unpacked only when the archive needs it.

A one-file PyInstaller executable copies every native library it holds into a temporary directory on *every*
start. DuckDB's is 68 MB: carried like that it would make the executable 110 MB and slow down every command,
``--help`` included. So the build (kubectl-runs.spec) leaves it out of the native parts and stores it instead,
xz-compressed, as a Python module inside the executable's module archive (``kubectl_runs_duckdb_blob``, read
only when imported), with its name, size and SHA-256 in ``kubectl_runs_duckdb_meta``. The first archive command
writes it once into a cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``, else the temporary directory; a
temporary file, then a rename), checked against its SHA-256, and every archive command imports it from there.
Outside such a build (pip, the tests) this does nothing: DuckDB is imported as installed.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path


def ensure_duckdb() -> None:
    if not getattr(sys, "frozen", False):
        return
    try:
        import kubectl_runs_duckdb_meta as meta  # type: ignore[import-not-found]  # written by the build
    except ImportError:
        return
    for base in _cache_bases():
        folder = base / f"duckdb-{meta.SHA256[:16]}"
        target = folder / meta.NAME
        try:
            if not (target.is_file() and target.stat().st_size == meta.SIZE):
                _unpack(folder, target, meta)
        except OSError:
            continue
        sys.path.insert(0, str(folder))
        return


def _cache_bases() -> list[Path]:
    out = []
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        out.append(Path(xdg) / "kubectl-runs")
    home = os.path.expanduser("~")
    if home and home != "~":
        out.append(Path(home) / ".cache" / "kubectl-runs")
    out.append(Path(tempfile.gettempdir()) / f"kubectl-runs-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    return out


def _unpack(folder: Path, target: Path, meta) -> None:
    import lzma

    import kubectl_runs_duckdb_blob as blob  # type: ignore[import-not-found]

    data = lzma.decompress(blob.DATA)
    if hashlib.sha256(data).hexdigest() != meta.SHA256:
        raise OSError("the bundled DuckDB library does not match its checksum")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if folder.stat().st_uid != os.getuid():
        raise OSError(f"{folder} belongs to another user")
    tmp = folder / f".{meta.NAME}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o700)
    os.replace(tmp, target)
