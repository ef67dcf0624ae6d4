"""The one renderer: tables for people (clean cells, -o wide, --no-headers), exact JSON/YAML, CSV with a header,
and kubectl's output hygiene (empty lists said on stderr while -o json still prints a document)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from kubectl_runs.errors import ExitCode, UsageError
from kubectl_runs.render import (
    CSV,
    JSON,
    REPORT_FORMATS,
    TABLE,
    WIDE,
    YAML,
    Column,
    Document,
    Section,
    check_format,
    clean,
    render,
)
from kubectl_runs.views import age as ago
from kubectl_runs.views import gpu_hours, gpus
from kubectl_runs.views import relative as when

AT = datetime(2025, 11, 20, 12, 0, tzinfo=UTC)


@dataclass
class Row:
    name: str
    gpus: int
    hours: float | None
    started: datetime


ROWS = [Row("alpha", 8, 12.5, AT - timedelta(hours=3)), Row("beta", 16, None, AT - timedelta(days=2))]
COLUMNS = (
    Column("NAME", lambda r: r.name),
    Column("GPUS", lambda r: r.gpus),
    Column("HOURS", lambda r: r.hours, show=lambda r: gpu_hours(r.hours)),
    Column("STARTED", lambda r: r.started, show=lambda r: ago(r.started, AT), wide=True),
)


def _render(doc: Document, fmt: str, **kw) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    render(doc, fmt, out, err, **kw)
    return out.getvalue(), err.getvalue()


def _doc(rows=ROWS, **kw) -> Document:
    data = {"at": AT, "rows": [{"name": r.name, "gpus": r.gpus} for r in rows]}
    return Document(data=data, rows=rows, columns=COLUMNS, empty="No rows found.", **kw)


def test_table_aligns_numbers_right_and_hides_wide_columns():
    out, err = _render(_doc(), TABLE)
    assert out == (
        "NAME   GPUS  HOURS\n"
        "alpha     8   12.5\n"
        "beta     16      -\n"
    )
    assert err == ""


def test_wide_shows_the_wide_columns_humanized():
    out, _ = _render(_doc(), WIDE)
    assert out == (
        "NAME   GPUS  HOURS  STARTED\n"
        "alpha     8   12.5  3 hours\n"
        "beta     16      -  2 days\n"
    )


def test_no_headers():
    out, _ = _render(_doc(), TABLE, no_headers=True)
    assert out == "alpha   8  12.5\nbeta   16     -\n"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("two\nlines", "two lines"),
        ("tab\there", "tab here"),
        ("\x1b[31mred\x1b[0m", " [31mred [0m"),
        ("csi\x9b2J", "csi 2J"),
        ("cr\r\nlf", "cr lf"),
        ("plain-name", "plain-name"),
        ("ünïcödé", "ünïcödé"),
    ],
    ids=["newline", "tab", "ansi-escape", "c1-csi", "crlf", "plain", "unicode"],
)
def test_cells_are_cleaned_of_newlines_and_escapes(raw, shown):
    """Names come from other people's objects: a cell can never break a line or drive the terminal."""
    assert clean(raw) == shown
    out, _ = _render(_doc([Row(raw, 1, 1.0, AT)]), TABLE, no_headers=True)
    assert "\x1b" not in out and "\x9b" not in out
    assert out.count("\n") == 1
    assert out.startswith(shown.strip())


def test_an_empty_table_says_so_on_stderr_and_prints_nothing():
    out, err = _render(_doc([]), TABLE)
    assert (out, err) == ("", "No rows found.\n")


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        (JSON, '{\n  "at": "2025-11-20T12:00:00Z",\n  "rows": []\n}\n'),
        (YAML, "at: '2025-11-20T12:00:00Z'\nrows: []\n"),
        (CSV, "NAME,GPUS,HOURS,STARTED\n"),
    ],
    ids=["json", "yaml", "csv"],
)
def test_an_empty_list_still_prints_an_empty_document_for_machines(fmt, expected):
    out, err = _render(_doc([]), fmt)
    assert (out, err) == (expected, "")


def test_json_is_exact_with_rfc3339_times():
    doc = Document(data={"at": AT, "n": 1.5, "none": None, "pair": ("a", "b"), "name": "ü"})
    out, _ = _render(doc, JSON)
    assert json.loads(out) == {"at": "2025-11-20T12:00:00Z", "n": 1.5, "none": None, "pair": ["a", "b"], "name": "ü"}
    assert '"ü"' in out  # not escaped


def test_yaml_is_the_same_data_in_the_same_key_order():
    data = {"z": 1, "at": AT, "items": [{"b": 2, "a": (1, 2)}]}
    out, _ = _render(Document(data=data), YAML)
    assert out == "z: 1\nat: '2025-11-20T12:00:00Z'\nitems:\n- b: 2\n  a:\n  - 1\n  - 2\n"
    assert yaml.safe_load(out) == {"z": 1, "at": "2025-11-20T12:00:00Z", "items": [{"b": 2, "a": [1, 2]}]}


def test_csv_has_a_header_and_every_column_with_raw_values():
    """CSV is for machines: all columns (wide ones too), exact values (not humanized), times RFC 3339, None
    empty."""
    out, _ = _render(_doc(), CSV)
    assert out == (
        "NAME,GPUS,HOURS,STARTED\n"
        "alpha,8,12.5,2025-11-20T09:00:00Z\n"
        "beta,16,,2025-11-18T12:00:00Z\n"
    )
    out, _ = _render(_doc(), CSV, no_headers=True)
    assert out.splitlines()[0] == "alpha,8,12.5,2025-11-20T09:00:00Z"


def test_csv_quotes_what_needs_quoting():
    out, _ = _render(_doc([Row('a,"b"', 1, 0.0, AT)]), CSV, no_headers=True)
    assert out == '"a,""b""",1,0.0,2025-11-20T12:00:00Z\n'


@pytest.mark.parametrize(
    "raw",
    ["evil\x1b]0;pwned\x07name", "bell\x07", "c1\x9b31m", "org:\u202etxt.exe", "a\u2066b\u2069c", "two\nlines\r",
     "nul\x00byte", "tab\there"],
    ids=["osc-title", "bel", "c1-csi", "rlo", "isolates", "newline-cr", "nul", "tab"],
)
def test_csv_cells_are_cleaned_like_table_cells(raw):
    """-o csv writes exact values, but never a control character (ESC, BEL, C0, C1, bidi overrides): a CSV
    file is read in terminals and by parsers that other people's object names must not drive. One row, one
    line."""
    out, _ = _render(_doc([Row(raw, 1, 0.0, AT)]), CSV, no_headers=True)
    assert out.count("\n") == 1
    assert not any(ch in out[:-1] for ch in "\x00\x07\x1b\x9b\r\n\t\u202e\u2066\u2069")
    assert out == f"{clean(raw)},1,0.0,2025-11-20T12:00:00Z\n"


def test_no_headers_prints_only_the_rows():
    """--no-headers is for pipes: no summary, no header, no sections."""
    section = Section("Extra", [ROWS[0]], (Column("NAME", lambda r: r.name),))
    out, err = _render(_doc(summary=["Two rows"], sections=(section,)), TABLE, no_headers=True)
    assert (out, err) == ("alpha   8  12.5\nbeta   16     -\n", "")
    out, err = _render(_doc([], summary=["None"]), TABLE, no_headers=True)
    assert (out, err) == ("", "No rows found.\n")


def test_summary_sections_and_notes():
    """Summary lines come before the table (a blank line between); sections after, each titled, empty ones
    skipped; notes are warnings on stderr in every format."""
    section = Section("Extra", [ROWS[0]], (Column("NAME", lambda r: r.name),))
    empty = Section("Nothing", [], (Column("NAME", lambda r: r.name),))
    doc = _doc(summary=["Two rows"], sections=(section, empty), notes=["careful"])
    out, err = _render(doc, TABLE)
    assert out == (
        "Two rows\n"
        "\n"
        "NAME   GPUS  HOURS\n"
        "alpha     8   12.5\n"
        "beta     16      -\n"
        "\n"
        "Extra:\n"
        "NAME\n"
        "alpha\n"
    )
    assert err == "warning: careful\n"
    _, err = _render(doc, JSON)
    assert err == "warning: careful\n"


def test_unknown_output_formats_are_refused_with_kubectls_words():
    with pytest.raises(UsageError) as caught:
        check_format("xml", REPORT_FORMATS)
    assert caught.value.code == ExitCode.USAGE
    assert caught.value.message == (
        'unable to match a printer suitable for the output format "xml", allowed formats are: '
        "csv,json,table,wide,yaml"
    )
    assert check_format("wide", REPORT_FORMATS) == "wide"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "-"), (0.0, "0.0"), (12.345, "12.3"), (99.96, "100"), (1234.4, "1,234"), (-49.0, "-49.0")],
    ids=["none", "zero", "fraction", "rounds-up", "thousands", "negative"],
)
def test_gpu_hours_cells(value, shown):
    assert gpu_hours(value) == shown


def test_gpu_counts_and_relative_times():
    assert (gpus(None), gpus(1234)) == ("-", "1,234")
    assert when(AT + timedelta(days=10), AT) == "in 10 days"
    assert when(AT - timedelta(hours=2), AT) == "2 hours ago"
    assert when(None, AT) == "-"
    assert ago(None, AT) == "<unknown>"
    assert ago(AT + timedelta(minutes=5), AT) == "in 5 minutes"


def test_csv_writes_booleans_as_json_does():
    doc = Document(data={}, rows=[True, False], columns=(Column("ACTIVE", lambda r: r),))
    out, _ = _render(doc, CSV)
    assert out == "ACTIVE\ntrue\nfalse\n"


def test_prose_column_wraps_to_fit_100_columns_and_stays_whole_when_wide():
    """A 150-character sentence after a 10-wide column: default tables wrap it onto continuation rows
    (every line ≤ 100 columns, the other cells blank), -o wide keeps it on one line."""
    from kubectl_runs.render import Column, table

    sentence = " ".join(["word"] * 30)  # 149 characters
    columns = (Column("KIND", lambda r: r[0]), Column("DETAIL", lambda r: r[1], prose=True))
    narrow = table([("Overdraft", sentence)], columns, wide=False).splitlines()
    assert max(len(line) for line in narrow) <= 100
    assert len(narrow) == 3  # header, first line, one continuation
    assert narrow[2].startswith(" " * len("Overdraft  ")) and narrow[2].strip().startswith("word")
    assert " ".join(line[len("Overdraft  "):].strip() for line in narrow[1:]) == sentence
    wide = table([("Overdraft", sentence)], columns, wide=True).splitlines()
    assert wide[1] == f"Overdraft  {sentence}"


def test_bidirectional_overrides_are_cleaned_from_cells():
    """U+202E would make the rest of a cell read right-to-left in a terminal: owner names come from other
    people's objects."""
    from kubectl_runs.render import clean

    assert clean("org:\u202etxt.exe") == "org: txt.exe"
    assert clean("a\u2066b\u2069c") == "a b c"


def test_prose_wraps_between_words_never_inside_an_object_name():
    """A wrapped finding keeps each name whole (``gpu-node-aaaa-bbbb-cccc`` copied from a table must still be the
    node's name), so prose wraps at spaces only. tabulate's ``maxcolwidths`` breaks at hyphens (its text
    wrapper's default), which is why render.py wraps prose itself."""
    from kubectl_runs.render import Column, table

    names = ["team-a/pretrain-32", "gpu-node-aaaa-bbbb-cccc", "org:ai:rai-sys", "h100-west-envelope-2025-11"] * 6
    sentence = " then ".join(names)
    columns = (Column("KIND", lambda r: r[0]), Column("DETAIL", lambda r: r[1], prose=True))
    lines = table([("Overdraft", sentence)], columns, wide=False).splitlines()
    assert len(lines) > 3 and max(len(line) for line in lines) <= 100
    words = [w for line in lines[1:] for w in line[len("Overdraft  "):].split()]
    assert words == sentence.split()  # every line break fell between two words


def test_the_format_registry_drives_the_help_the_completion_and_the_dispatch():
    """One table of formats (formats.REGISTRY): every format has a writer, the -o help names each one, and
    completion offers them."""
    from click.testing import CliRunner

    from kubectl_runs.cli.main import cli
    from kubectl_runs.cli.options import _complete_formats
    from kubectl_runs.formats import REGISTRY, option_help
    from kubectl_runs.render import WRITERS

    names = [f.name for f in REGISTRY]
    assert list(WRITERS) == names
    assert option_help() == "Output format: table, wide, json, yaml, or csv (tabular reports)."
    assert _complete_formats(None, None, "") == names and _complete_formats(None, None, "y") == ["yaml"]
    help_text = " ".join(CliRunner().invoke(cli, ["budgets", "usage", "--help"]).output.split())
    assert "Output format: table, wide, json, yaml, or csv (tabular reports)." in help_text


def test_csv_cells_a_spreadsheet_would_run_are_neutralized(tmp_path, capsys):
    """OWASP's CSV injection rule, through the CLI: an owner string from someone's Budget that starts with = + - @
    is written with a leading apostrophe; numbers stay numbers."""
    import csv
    import io

    from builders import budget, run_cli, write_fleet

    hostile = ["=HYPERLINK(\"http://x\",\"click\")", "+1+1", "-2+3", "@SUM(A1)"]
    fleet = write_fleet(tmp_path / "f.yaml", [budget(f"b{i}", owner=owner) for i, owner in enumerate(hostile)])
    code, out, _err = run_cli(capsys, "budgets", "usage", "--snapshot", fleet, "--at", "2025-11-20T12:00:00Z",
                              "-o", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    owners = sorted(row["OWNER"] for row in rows)
    assert owners == sorted("'" + owner for owner in hostile)
    assert all(not row["CONCURRENCY"].startswith("'") for row in rows)


def test_invisible_characters_are_shown_escaped_in_tables_and_csv(tmp_path, capsys):
    from builders import budget, run_cli, write_fleet

    fleet = write_fleet(tmp_path / "f.yaml", [budget("b", owner="org:team\u200b\ufeff")])
    for fmt in ("wide", "csv"):
        code, out, _err = run_cli(capsys, "budgets", "usage", "--snapshot", fleet, "--at", "2025-11-20T12:00:00Z",
                                  "-o", fmt)
        assert code == 0
        assert "org:team\\u200b\\ufeff" in out and "\u200b" not in out and "\ufeff" not in out
