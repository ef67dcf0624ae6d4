"""The views of ``leases archive``: what a run added and the archive after it; what ``--verify`` found."""

from __future__ import annotations

from ..engine.reports import ArchivePartition, ArchiveReport, ArchiveVerifyReport, plain
from ..render import Column, Document
from ..text import counted


def _size(value: int) -> str:
    import humanize

    return humanize.naturalsize(value, binary=True)


def _span(first: str | None, last: str | None) -> str:
    if first is None:
        return ""
    return f", leases from {first[:16].replace('T', ' ')}Z" + (f" to {last[:16].replace('T', ' ')}Z" if last else "")


PARTITION_COLUMNS = (
    Column("MONTH", lambda p: p.month),
    Column("LEASES", lambda p: p.leases, show=lambda p: f"{p.leases:,}"),
    Column("SIZE", lambda p: p.bytes, show=lambda p: _size(p.bytes)),
    Column("BYTES/LEASE", lambda p: round(p.bytes / p.leases, 1) if p.leases else 0.0,
           show=lambda p: f"{p.bytes / p.leases:,.1f}" if p.leases else "-", wide=True),
    Column("FIRST-START", lambda p: p.first_start, wide=True),
    Column("LAST-ENDED", lambda p: p.last_ended or "", wide=True),
    Column("FILE", lambda p: p.file, wide=True),
)


def _archive_line(archive: str, leases: int, parts: list[ArchivePartition], first: str | None, last: str | None,
                  generation: int) -> str:
    size = sum(p.bytes for p in parts)
    return (f"Archive {archive}: {counted(leases, 'lease')} in {counted(len(parts), 'month')}, {_size(size)}"
            f"{_span(first, last)} (generation {generation})")


def archive_document(report: ArchiveReport, *, renamed_manifest: bool = False) -> Document:
    left = []
    if report.already_archived:
        left.append(f"{counted(report.already_archived, 'lease')} already archived")
    if report.open:
        left.append(f"{counted(report.open, 'open lease')} left")
    if report.ended_after_before:
        left.append(f"{counted(report.ended_after_before, 'lease')} ended after --before left")
    added = f"Added {counted(report.added, 'closed lease')}"
    if report.months:
        added += f" ({counted(len(report.months), 'month')} rewritten: {', '.join(report.months)})"
    summary = [added + (f"; {', '.join(left)}" if left else "") + "."]
    if report.pruned or report.prune_left:
        summary.append(f"Pruned {counted(report.pruned, 'lease')} from the cluster (each re-read from the archive)"
                       + (f"; left {counted(len(report.prune_left), 'lease')} gone or changed since read: "
                          + ", ".join(report.prune_left[:3]) + (" …" if len(report.prune_left) > 3 else "")
                          if report.prune_left else "") + ".")
    summary += [
        _archive_line(report.archive, report.leases, report.partitions, report.first_start,
                      report.last_ended, report.generation)]
    doc = Document(data=plain(report), rows=report.partitions, columns=PARTITION_COLUMNS, summary=summary)
    if report.removed:
        doc.notes.append(f"removed {counted(len(report.removed), 'file')} of replaced or interrupted runs: "
                         + ", ".join(report.removed[:3]) + (" …" if len(report.removed) > 3 else ""))
    if renamed_manifest:
        doc.notes.append("renamed the archive's manifest.json _manifest.json, the name Spark, Hive and Trino skip "
                         "when they read the archive's files (docs/archive.md)")
    return doc


def verify_document(report: ArchiveVerifyReport) -> Document:
    verdict = "verified" if report.verified else f"NOT verified: {counted(len(report.problems), 'problem')}"
    summary = [_archive_line(report.archive, report.leases, report.partitions, report.first_start,
                             report.last_ended, report.generation) + f": {verdict}"]
    doc = Document(data=plain(report), rows=report.partitions, columns=PARTITION_COLUMNS, summary=summary)
    if report.stray:
        doc.notes.append(f"{counted(len(report.stray), 'file')} not in the manifest (left by an interrupted archive "
                         f"run; the next run deletes them): {', '.join(report.stray[:3])}"
                         + (" …" if len(report.stray) > 3 else ""))
    return doc
