"""The archive commands' results as report values (engine/reports.py: what ``-o json`` prints)."""

from __future__ import annotations

from ..engine import reports
from ..timeutil import rfc3339
from .manifest import Manifest
from .reader import Verified
from .store import ArchiveResult


def partitions(manifest: Manifest) -> list[reports.ArchivePartition]:
    return [
        reports.ArchivePartition(month=p.month, file=p.file, leases=p.leases, bytes=p.bytes,
                                 first_start=rfc3339(p.first_start) or "", last_ended=rfc3339(p.last_ended))
        for p in manifest.partitions
    ]


def archive_report(result: ArchiveResult, pruned: int = 0, prune_left: list[str] | None = None) -> reports.ArchiveReport:
    manifest = result.manifest
    return reports.ArchiveReport(
        archive=str(result.directory),
        added=result.added,
        already_archived=result.already,
        open=result.open,
        ended_after_before=result.later,
        months=list(result.months),
        removed=list(result.removed),
        pruned=pruned,
        prune_left=list(prune_left or []),
        generation=manifest.generation,
        leases=manifest.leases,
        first_start=rfc3339(manifest.first_start),
        last_ended=rfc3339(manifest.last_ended),
        partitions=partitions(manifest),
    )


def verify_report(verified: Verified) -> reports.ArchiveVerifyReport:
    manifest = verified.archive.manifest
    return reports.ArchiveVerifyReport(
        archive=str(verified.archive.directory),
        verified=not verified.problems,
        generation=manifest.generation,
        leases=manifest.leases,
        first_start=rfc3339(manifest.first_start),
        last_ended=rfc3339(manifest.last_ended),
        partitions=partitions(manifest),
        problems=list(verified.problems),
        stray=list(verified.stray),
    )
