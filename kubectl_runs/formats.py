"""The output formats (``-o``), registered once: their names, what each is for, and which commands may print
them. The ``-o`` help, its shell completion, the check that refuses a format a command cannot print and the
renderer's dispatch (render.py ``WRITERS``) all read this table. Imports nothing heavy: ``--help`` reads it."""

from __future__ import annotations

from dataclasses import dataclass

TABLE, WIDE, JSON, YAML, CSV = "table", "wide", "json", "yaml", "csv"


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    tabular_only: bool = False  # only reports whose rows are one table (CSV): not explain, not version


REGISTRY: tuple[Format, ...] = (
    Format(TABLE, "a table for people (default)"),
    Format(WIDE, "a table with more columns"),
    Format(JSON, "exact JSON, for machines"),
    Format(YAML, "exact YAML"),
    Format(CSV, "comma-separated values, one row per line (tabular reports)", tabular_only=True),
)
FORMATS = {f.name: f.description for f in REGISTRY}
OBJECT_FORMATS = tuple(f.name for f in REGISTRY if not f.tabular_only)
REPORT_FORMATS = tuple(f.name for f in REGISTRY)


def option_help() -> str:
    """The ``-o`` help line: every format, the tabular-only ones said so."""
    names = [f.name + (" (tabular reports)" if f.tabular_only else "") for f in REGISTRY]
    return f"Output format: {', '.join(names[:-1])}, or {names[-1]}."
