"""``leases archive --prune``: which live leases may be deleted from the cluster — only closed leases that the
archive holds, re-read from its files after the run committed and found equal, field for field, to the lease
read from the cluster. An open lease is never one of them (the archive holds closed leases only, and the live
copy must be closed too)."""

from __future__ import annotations

from collections.abc import Sequence

from ..model import GPULease
from . import db
from .manifest import ArchiveError
from .reader import Archive
from .schema import LEASE_SELECT, lease_of, row_of


def prunable(archive: Archive, leases: Sequence[GPULease]) -> list[GPULease]:
    """The closed ``leases`` whose archived copy (same namespace, name and uid) is the same lease."""
    closed = {x.archive_key: x for x in leases if x.status.closed}
    if not closed or not archive.manifest.partitions:
        return []
    files = "[" + ", ".join(db.quote(archive.directory / p.file) for p in archive.manifest.partitions) + "]"
    keys = ["\x1f".join(key) for key in closed]
    con = db.connect()
    try:
        rows = con.execute(
            f"SELECT {LEASE_SELECT} FROM read_parquet({files}) "
            "WHERE concat_ws(chr(31), namespace, name, uid) IN (SELECT unnest($keys))",
            {"keys": keys},
        ).fetchall()
    except db.Error as exc:
        raise ArchiveError(f"{archive.directory}: cannot read: {db.first_line(exc)}") from None
    finally:
        con.close()
    out = []
    for values in rows:
        live = closed.get((values[0], values[1], values[2]))
        if live is not None and row_of(lease_of(values)) == row_of(live):
            out.append(live)
    out.sort(key=lambda x: (x.metadata.namespace, x.metadata.name))
    return out
