"""``python -m bench.run --write bench/RESULTS.md`` rewrites the generated part of the report and keeps every
section written by hand below its marker, byte for byte, however many times it runs; a report without the marker
is not overwritten. And the repository's own bench/RESULTS.md has the marker once, above its hand-written
sections (DoubleBooked, queues, reconciler), so that a run of the suite keeps them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
sys.path.insert(0, str(REPO))  # bench/ is the repository's, not an installed package
_run = importlib.import_module("bench.run")
KEEP_MARK, write_report = _run.KEEP_MARK, _run.write_report

HAND = (f"{KEEP_MARK}\n\n## `kubectl runs queues usage` (issue 13)\n\nA table | written by hand.\n\n"
        "## Issue 11: DoubleBooked\n\n    ratio (audit ÷ decode): 2.00\n")


def test_hand_written_sections_survive_every_write(tmp_path):
    report = tmp_path / "RESULTS.md"
    report.write_text("Measured before.\n\n| old | table |\n\n" + HAND)
    write_report(report, "Measured now.\n\n| new | table |\n")
    assert report.read_text() == "Measured now.\n\n| new | table |\n\n" + HAND
    write_report(report, "Measured again.\n")
    write_report(report, "Measured once more.\n")
    assert report.read_text() == "Measured once more.\n\n" + HAND


def test_a_new_report_is_just_the_generated_part(tmp_path):
    report = tmp_path / "new.md"
    write_report(report, "Measured.\n")
    assert report.read_text() == "Measured.\n"


def test_a_report_without_the_marker_is_not_overwritten(tmp_path):
    report = tmp_path / "RESULTS.md"
    report.write_text("## Written by hand, no marker\n")
    with pytest.raises(ValueError, match="has no line"):
        write_report(report, "Measured.\n")
    assert report.read_text() == "## Written by hand, no marker\n"


def test_the_repositorys_report_keeps_its_hand_written_sections():
    text = (REPO / "bench" / "RESULTS.md").read_text()
    assert text.count(KEEP_MARK) == 1
    below = text[text.index(KEEP_MARK):]
    for heading in ("## `kubectl runs queues usage` (issue 13)", "## Issue 11: DoubleBooked",
                    "## The reconciler against a real API server (issue 12)"):
        assert heading in below, heading
