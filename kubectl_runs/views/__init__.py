"""Views: the human text of each report, in one place per report — table columns, headlines, humanized times
and plurals. A view takes the engine's result and returns a ``render.Document``: its ``data`` is the report
value's plain encoding (engine/reports.py), its tables and lines are for people. Nothing below (engine/) says
anything in words a table shows; the words the engine writes into reasons and remedies are part of the JSON.

Times: ``text.when`` is the exact instant with how far it is (``2025-12-01 00:00 UTC (in 10 days)``), the one
form headlines, reasons and remedies use; ``relative`` and ``age`` are the short kubectl-style cells of tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..render import TABLE_WIDTH, Column, Section


def relative(then: datetime | None, at: datetime) -> str:
    """A time relative to the evaluation clock in a table cell ("in 2 hours", "3 days ago")."""
    if then is None:
        return "-"
    import humanize

    if then >= at:
        return "in " + humanize.naturaldelta(then - at)
    return humanize.naturaldelta(at - then) + " ago"


def age(then: datetime | None, at: datetime) -> str:
    """kubectl-style age: how long before ``at``."""
    if then is None:
        return "<unknown>"
    import humanize

    return humanize.naturaldelta(at - then) if then <= at else "in " + humanize.naturaldelta(then - at)


def gpus(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def gpu_hours(value: float | None) -> str:
    if value is None:
        return "-"
    import humanize

    tenths = round(value, 1)
    if abs(tenths) >= 100:  # decide on the rounded value: 99.96 is "100", not "100.0"
        return humanize.intcomma(round(value))
    return humanize.intcomma(tenths)


FINDING_COLUMNS = (
    Column("KIND", lambda f: f.kind),
    Column("LEASE", lambda f: f.lease),
    Column("DETAIL", lambda f: f.detail, prose=True),
)


def findings_section(findings: Sequence[Any]) -> Section:
    """The findings of any report (engine/findings.Finding), one table shape everywhere."""
    return Section("Findings", findings, FINDING_COLUMNS)


def labelled_lines(lines: Sequence[tuple[str, str]], *, wrap: bool) -> list[str]:
    """``Name:  text`` header lines, the texts aligned after the longest name (an empty name leaves its label
    blank); with ``wrap`` each text wraps at spaces to TABLE_WIDTH under its own start (explain, explain workload)."""
    import textwrap

    label = max(len(name) for name, _ in lines) + 2
    out: list[str] = []
    for name, text in lines:
        head = f"{name + ':' if name else '':<{label}}"
        if wrap:
            out.extend(textwrap.wrap(text, TABLE_WIDTH, initial_indent=head, subsequent_indent=" " * label,
                                     break_on_hyphens=False))
        else:
            out.append(head + text)
    return out
