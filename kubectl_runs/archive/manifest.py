"""The archive's table of contents, ``_manifest.json`` (docs/archive.md): which file holds which month, how many
leases, their time range, sizes and checksums, and one entry per archive run. The manifest is the commit point
of an archive run: a file counts only when the manifest lists it, and the manifest is replaced atomically
(a temporary file, fsync, rename, fsync of the directory).

Its name begins with ``_`` so that Spark, Hive and Trino, which skip files whose names begin with ``_`` or
``.`` (as Hadoop's ``_SUCCESS``), do not read it as a Parquet file of the table. Archives written before were
given ``manifest.json`` (``LEGACY_MANIFEST``): they are read as they are, and the next ``leases archive --to``
renames it (``migrate``).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import msgspec

from ..errors import UserError
from .schema import FORMAT, READABLE_VERSIONS, SCHEMA_VERSION

MANIFEST = "_manifest.json"
LEGACY_MANIFEST = "manifest.json"  # the name before issue 28: Spark read it as a Parquet file and failed


class Partition(msgspec.Struct, rename="camel", frozen=True):
    month: str  # YYYY-MM
    file: str  # relative to the archive directory: month=YYYY-MM/leases-NNNNNN.parquet
    leases: int
    bytes: int
    sha256: str
    first_start: datetime
    last_start: datetime
    last_ended: datetime | None = None  # None: every lease of the file closed without an end


class ArchiveRun(msgspec.Struct, rename="camel", frozen=True):
    archived_at: datetime
    before: datetime | None
    added: int
    gpus: dict[str, int] = {}  # GPUs per flavor of the fleet's nodes when the run read them


class Manifest(msgspec.Struct, rename="camel", frozen=True):
    format: str = FORMAT
    schema_version: int = SCHEMA_VERSION
    generation: int = 0
    leases: int = 0
    first_start: datetime | None = None
    last_ended: datetime | None = None
    partitions: tuple[Partition, ...] = ()
    runs: tuple[ArchiveRun, ...] = ()

    def partition(self, month: str) -> Partition | None:
        for part in self.partitions:
            if part.month == month:
                return part
        return None


class ArchiveError(UserError):
    """Bad input in an archive: a missing or foreign directory, a damaged manifest or file (exit code 1)."""


def _read(directory: Path) -> tuple[Path, bytes]:
    """The manifest's path and bytes: ``_manifest.json``, else the ``manifest.json`` of an archive written before
    it was renamed. Read in that order and then ``_manifest.json`` again, so that a reader racing a migration
    (a rename from the old name to the new) finds it under one name or the other."""
    for name in (MANIFEST, LEGACY_MANIFEST, MANIFEST):
        path = directory / name
        try:
            return path, path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ArchiveError(f"{path}: cannot read: {exc.strerror or exc}") from None
    raise ArchiveError(f"{directory / MANIFEST}: not found: {directory} is not a lease archive")


def has_manifest(directory: Path) -> bool:
    return (directory / MANIFEST).exists() or (directory / LEGACY_MANIFEST).exists()


def read_manifest(directory: Path) -> Manifest:
    """The manifest of an existing archive, checked: its format, its schema version, its partitions' names."""
    if not directory.exists():
        raise ArchiveError(f"{directory}: no such directory (not a lease archive)")
    if not directory.is_dir():
        raise ArchiveError(f"{directory}: not a directory (not a lease archive)")
    path, data = _read(directory)
    try:
        head = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ArchiveError(f"{path}: not a lease archive manifest: {exc}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ArchiveError(f"{path}: not a lease archive manifest (format is not {FORMAT!r})")
    version = head.get("schemaVersion")
    if version not in READABLE_VERSIONS:
        raise ArchiveError(f"{path}: schema version {version!r}; this kubectl-runs reads versions "
                           f"{' and '.join(map(str, READABLE_VERSIONS))}")
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as exc:
        raise ArchiveError(f"{path}: invalid manifest: {exc}") from None
    for part in manifest.partitions:
        expected = f"month={part.month}/"
        if not part.file.startswith(expected) or "/" in part.file[len(expected):] or ".." in part.file:
            raise ArchiveError(f"{path}: partition {part.month}: file {part.file!r} is not under {expected}")
    if sum(p.leases for p in manifest.partitions) != manifest.leases:
        raise ArchiveError(f"{path}: counts {manifest.leases} leases but its partitions hold "
                           f"{sum(p.leases for p in manifest.partitions)}")
    return manifest


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically: a reader (or a crash) sees the old one or the new one, never a mix."""
    write_atomically(directory / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")


def migrate(directory: Path) -> bool:
    """Rename an archive's ``manifest.json`` (written before issue 28) to ``_manifest.json``: one rename, so a
    reader or a crash sees the archive under one name or the other, never both or neither. True when it did.
    Where both names are (one copied back, say), ``_manifest.json`` is the manifest and ``manifest.json`` is
    left for ``store.strays`` to name (``--verify``) and the next run to delete."""
    legacy = directory / LEGACY_MANIFEST
    if not legacy.exists() or (directory / MANIFEST).exists():
        return False
    os.replace(legacy, directory / MANIFEST)
    sync_directory(directory)
    return True


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
