"""The view of ``seeds verify``: one row per activated Reservation, and each difference found."""

from __future__ import annotations

from ..engine.reports import plain
from ..engine.verify import Verification, verify_report
from ..render import Column, Document, Section
from ..text import counted
from . import relative


def verify_document(checks: list[Verification], at, namespace: str | None) -> Document:
    columns = (
        Column("RESERVATION", lambda c: c.reservation),
        Column("RUN", lambda c: c.run, wide=True),
        Column("ACTIVATED", lambda c: c.at, show=lambda c: relative(c.at, at)),
        Column("SEED", lambda c: c.seed or "-"),
        Column("DEFICIT", lambda c: c.deficit_gpus, wide=True),
        Column("FREED", lambda c: c.freed_gpus, wide=True),
        Column("VICTIMS", lambda c: len(c.victims), wide=True),
        Column("RESULT", lambda c: c.verified, show=_result),
    )
    sections = tuple(
        Section(f"Differences in {c.reservation}", c.differences, (Column("DIFFERENCE", lambda d: d),))
        for c in checks
        if c.differences
    )
    where = f" in {namespace} namespace" if namespace else ""
    return Document(
        data=plain(verify_report(checks)),
        rows=checks,
        columns=columns,
        sections=sections,
        empty=f"No activated reservations found{where}.",
    )


def _result(check: Verification) -> str:
    if check.verified:
        return "verified"
    return counted(len(check.differences), "difference")
