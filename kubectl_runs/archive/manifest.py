"""The archive's table of contents, ``manifest.json`` (docs/archive.md): which file holds which month, how many
leases, their time range, sizes and checksums, and one entry per archive run. The manifest is the commit point
of an archive run: a file counts only when the manifest lists it, and the manifest is replaced atomically
(a temporary file, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import msgspec

from ..errors import UserError
from .schema import FORMAT, SCHEMA_VERSION

MANIFEST = "manifest.json"


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


def read_manifest(directory: Path) -> Manifest:
    """The manifest of an existing archive, checked: its format, its schema version, its partitions' names."""
    path = directory / MANIFEST
    if not directory.exists():
        raise ArchiveError(f"{directory}: no such directory (not a lease archive)")
    if not directory.is_dir():
        raise ArchiveError(f"{directory}: not a directory (not a lease archive)")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArchiveError(f"{path}: not found: {directory} is not a lease archive") from None
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        head = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ArchiveError(f"{path}: not a lease archive manifest: {exc}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ArchiveError(f"{path}: not a lease archive manifest (format is not {FORMAT!r})")
    version = head.get("schemaVersion")
    if version != SCHEMA_VERSION:
        raise ArchiveError(f"{path}: schema version {version!r}; this kubectl-runs reads version {SCHEMA_VERSION}")
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
