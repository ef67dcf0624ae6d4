"""Every output format, in one place (DESIGN.md: one renderer; the formats themselves are registered in
formats.py, and ``WRITERS`` at the end of this module gives each its writer).

A command hands ``render`` a ``Document``: the exact data for ``-o json|yaml``, and for people a table
described by ``Column``s (plus summary lines before it and further sections after it). Tables use tabulate
; JSON and YAML are exact; CSV writes the wide columns with raw values.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from . import json_text
from .errors import UsageError
from .formats import CSV, FORMATS, JSON, OBJECT_FORMATS, REPORT_FORMATS, TABLE, WIDE, YAML

__all__ = ["CSV", "FORMATS", "JSON", "OBJECT_FORMATS", "REPORT_FORMATS", "TABLE", "WIDE", "YAML"]

TABLE_WIDTH = 100  # default-mode tables fit this many columns (DESIGN.md)
COLUMN_GAP = 2  # tabulate's "plain" format puts two spaces between columns
MIN_PROSE_WIDTH = 30

# C0 and C1 controls (newlines, ESC, CSI) and the bidirectional overrides that can make a cell read backwards
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]+")
# Invisible format characters (zero-width space/joiners, marks, word joiner, BOM, soft hyphen, tags): shown as
# backslash-u escapes of four hex digits (\u200b), so that "team\u200b" cannot pass for "team" in a table or a spreadsheet.
_INVISIBLE = re.compile(r"[\u00ad\u061c\u180e\u200b-\u200f\u2060-\u2064\ufeff\U000e0000-\U000e007f]")
# OWASP's CSV injection rule: a cell a spreadsheet would read as a formula starts with one of these.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def check_format(fmt: str, allowed: Sequence[str]) -> str:
    """kubectl's wording for an output format a command cannot print."""
    if fmt not in allowed:
        raise UsageError(
            f'unable to match a printer suitable for the output format "{fmt}", '
            f"allowed formats are: {','.join(sorted(allowed))}"
        )
    return fmt


@dataclass(frozen=True)
class Column:
    """A table column: ``value`` gives the exact value (CSV), ``show`` how people see it (tables)."""

    header: str
    value: Callable[[Any], Any]
    show: Callable[[Any], Any] | None = None
    wide: bool = False  # only with -o wide (and in CSV)
    align: str | None = None
    prose: bool = False  # sentences: wrapped onto continuation rows so default tables fit TABLE_WIDTH


@dataclass
class Section:
    title: str
    rows: Sequence[Any]
    columns: Sequence[Column]


@dataclass
class Document:
    data: Any
    rows: Sequence[Any] = ()
    columns: Sequence[Column] = ()
    summary: Sequence[str] = ()
    sections: Sequence[Section] = ()
    empty: str | None = None  # said on stderr when there are no rows (kubectl's "No resources found")
    notes: list[str] = field(default_factory=list)  # warnings for stderr
    flat: Section | None = None  # what CSV writes instead of the table's rows, when the table is not flat


def render(doc: Document, fmt: str, out: IO[str], err: IO[str], *, no_headers: bool = False) -> None:
    for note in doc.notes:
        err.write(f"warning: {note}\n")
    WRITERS[fmt](doc, out, err, no_headers)


def _write_json(doc: Document, out: IO[str], _err: IO[str], _no_headers: bool) -> None:
    out.write(json_text.dumps(doc.data, _json_default) + "\n")  # json.dumps(indent=2, ensure_ascii=False)


def _write_yaml(doc: Document, out: IO[str], _err: IO[str], _no_headers: bool) -> None:
    import yaml

    out.write(yaml.safe_dump(_plain(doc.data), sort_keys=False, allow_unicode=True, default_flow_style=False))


def _write_table(doc: Document, out: IO[str], err: IO[str], no_headers: bool) -> None:
    _write_tables(doc, False, out, err, no_headers)


def _write_wide(doc: Document, out: IO[str], err: IO[str], no_headers: bool) -> None:
    _write_tables(doc, True, out, err, no_headers)


def _write_tables(doc: Document, wide: bool, out: IO[str], err: IO[str], no_headers: bool) -> None:
    if no_headers and doc.columns:
        # For pipes (kubectl's --no-headers): the rows of the table only — no summary, no titled sections whose
        # rows have other columns.
        if doc.rows:
            out.write(table(doc.rows, doc.columns, wide=wide, no_headers=True) + "\n")
        elif doc.empty:
            err.write(doc.empty + "\n")
        return
    for line in doc.summary:
        out.write(clean(line) + "\n")
    if doc.columns:
        if doc.rows:
            if doc.summary:
                out.write("\n")
            out.write(table(doc.rows, doc.columns, wide=wide, no_headers=no_headers) + "\n")
        elif doc.empty:
            err.write(doc.empty + "\n")
    for section in doc.sections:
        if not section.rows:
            continue
        out.write(f"\n{section.title}:\n")
        out.write(table(section.rows, section.columns, wide=wide, no_headers=no_headers) + "\n")


def table(rows: Sequence[Any], columns: Sequence[Column], *, wide: bool, no_headers: bool = False) -> str:
    from tabulate import tabulate

    chosen = [c for c in columns if wide or not c.wide]
    body = [[clean(_shown(c, row)) for c in chosen] for row in rows]
    if not wide:
        body = _wrap_prose(body, chosen, no_headers)
    aligns = [c.align or ("right" if _numeric(body, i) else "left") for i, c in enumerate(chosen)]
    if not no_headers:
        # The header is the first row rather than tabulate's ``headers``, which pads every header by 2 more
        # characters and pushes an ordinary report past 100 columns.
        body.insert(0, [c.header for c in chosen])
    if _plain_fits(body, aligns):
        return _plain_table(body, aligns)
    text = tabulate(body, tablefmt="plain", colalign=aligns, disable_numparse=True)
    return "\n".join(line.rstrip() for line in text.splitlines())


def _plain_fits(body: list[list[str]], aligns: Sequence[str]) -> bool:
    """The common table: ASCII cells (one character, one column) aligned left or right."""
    return bool(body) and all(a in ("left", "right") for a in aligns) and all(
        cell.isascii() for row in body for cell in row) and all(any(c.strip() for c in row) for row in body)


def _plain_table(body: list[list[str]], aligns: Sequence[str]) -> str:
    """What tabulate's "plain" format prints for such a table (cells stripped, padded to the widest, joined by
    two spaces, lines right-stripped), without its per-cell type detection: a 1,500-row report renders in a
    fraction of the time (bench/bench_queues.py). tests/unit/test_render.py checks it against tabulate."""
    rows = [[cell.strip() for cell in row] for row in body]
    widths = [max(len(row[i]) for row in rows) for i in range(len(aligns))]
    right = [align == "right" for align in aligns]
    lines = []
    for row in rows:
        cells = [cell.rjust(width) if r else cell.ljust(width) for cell, width, r in zip(row, widths, right, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _wrap_prose(body: list[list[str]], chosen: Sequence[Column], no_headers: bool) -> list[list[str]]:
    """Wrap the last prose column so the table fits TABLE_WIDTH; other cells of a continuation row stay blank.
    With -o wide (and in CSV/JSON) prose stays on one line. Not tabulate's ``maxcolwidths``: its wrapper breaks
    words at hyphens, which would cut object names (``gpu-node-`` / ``a01``) that people copy from the table."""
    index = next((i for i in range(len(chosen) - 1, -1, -1) if chosen[i].prose), None)
    if index is None:
        return body
    import textwrap

    def width(i: int) -> int:
        return max([0 if no_headers else len(chosen[i].header)] + [len(row[i]) for row in body])

    used = sum(width(i) + COLUMN_GAP for i in range(len(chosen)) if i != index)
    room = max(MIN_PROSE_WIDTH, TABLE_WIDTH - used)
    out: list[list[str]] = []
    for row in body:
        lines = textwrap.wrap(row[index], room, break_on_hyphens=False) or [""]
        out.append([*row[:index], lines[0], *row[index + 1:]])
        out.extend([*([""] * index), line, *([""] * (len(row) - index - 1))] for line in lines[1:])
    return out


def _numeric(body: list[list[str]], index: int) -> bool:
    cells = [row[index] for row in body if row[index] not in ("", "-", "<none>")]
    return bool(cells) and all(_NUMBER.match(cell) for cell in cells)


_NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?%?$")


def _shown(column: Column, row: Any) -> str:
    value = column.show(row) if column.show else column.value(row)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _write_csv(doc: Document, out: IO[str], _err: IO[str], no_headers: bool) -> None:
    writer = csv.writer(out, lineterminator="\n")
    rows, columns = (doc.flat.rows, doc.flat.columns) if doc.flat is not None else (doc.rows, doc.columns)
    if not no_headers:
        writer.writerow([c.header for c in columns])
    for row in rows:
        writer.writerow([_csv_cell(c.value(row)) for c in columns])


def _csv_cell(value: Any) -> Any:
    """A raw value for machines, but no control characters: names come from other people's objects, and an
    ESC, BEL, newline or bidirectional override in a cell would reach whatever terminal or parser reads it."""
    if value is None:
        return ""
    if isinstance(value, bool):  # as JSON writes it, not Python's True/False
        return "true" if value else "false"
    if isinstance(value, datetime):
        return _rfc3339(value)
    if isinstance(value, (list, tuple)):
        return _not_a_formula(clean(";".join(str(v) for v in value)))
    if isinstance(value, str):
        return _not_a_formula(clean(value))
    return value


def _not_a_formula(text: str) -> str:
    """A text cell that a spreadsheet would run as a formula gets a leading apostrophe (OWASP): numbers stay
    numbers (they are not strings here), and no name of a Kubernetes object starts with these characters."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def clean(text: str) -> str:
    """No newlines or terminal escapes inside a cell, and no invisible characters: names come from other
    people's objects."""
    text = _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _UNSAFE.sub(" ", text)


def _rfc3339(at: datetime) -> str:
    from .timeutil import rfc3339

    return rfc3339(at) or ""


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return _rfc3339(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _plain(value: Any) -> Any:
    """JSON-shaped builtins for YAML (times as RFC 3339 strings, tuples as lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return _rfc3339(value)
    return value


# The writer of each registered format (formats.REGISTRY): a format is added there and here, nowhere else.
WRITERS: dict[str, Callable[[Document, IO[str], IO[str], bool], None]] = {
    TABLE: _write_table, WIDE: _write_wide, JSON: _write_json, YAML: _write_yaml, CSV: _write_csv,
}
