"""The nesting pre-scan (sources/nesting.py): exact at the limit, whatever the input looks like, and the cheap bound
never lets a deep document through (the children-process corpus in test_bad_input_corpus.py runs the CLI)."""

from __future__ import annotations

import json

import pytest
import yaml

from kubectl_runs.sources.files import SnapshotError, load_snapshot
from kubectl_runs.sources.nesting import MAX_DEPTH, json_too_deep, yaml_too_deep


def nested_value(depth: int) -> object:
    """``depth`` collections, alternating mappings and sequences."""
    value: object = "leaf"
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize("style", ["block", "flow"])
def test_yaml_at_the_limit_passes_and_one_more_is_refused(style):
    flow = style == "flow"
    # The document itself is a mapping: one level, so the value may hold MAX_DEPTH - 1.
    at_limit = yaml.safe_dump({"v": nested_value(MAX_DEPTH - 1)}, default_flow_style=flow, width=10**9).encode()
    beyond = yaml.safe_dump({"v": nested_value(MAX_DEPTH)}, default_flow_style=flow, width=10**9).encode()
    assert yaml_too_deep(at_limit) is None
    assert yaml_too_deep(beyond) is not None


def test_json_at_the_limit_passes_and_one_more_is_refused():
    assert json_too_deep(json.dumps({"v": nested_value(MAX_DEPTH - 1)}).encode()) is None
    assert json_too_deep(json.dumps({"v": nested_value(MAX_DEPTH)}).encode()) == 1


def test_brackets_in_strings_do_not_count_and_cannot_hide_real_nesting():
    """Closing brackets in strings and comments cannot mask real nesting after them, and brackets in strings
    do not make a shallow file deep."""
    mask_yaml = b"# " + b"]" * 1000 + b"\nlabel: '" + b"}" * 1000 + b"'\nv: " + b"[" * 300 + b"]" * 300 + b"\n"
    assert yaml_too_deep(mask_yaml) == 3
    mask_json = b'{"a": "' + b"]" * 1000 + b'", "v": ' + b"[" * 300 + b"]" * 300 + b"}"
    assert json_too_deep(mask_json) == 1
    shallow_yaml = b"a: '" + b"[" * 1000 + b"'\nb: \"" + b"{" * 1000 + b"\"\n"
    assert yaml_too_deep(shallow_yaml) is None
    shallow_json = json.dumps({"a": "[" * 1000, "b": "\\\"{" * 1000}).encode()
    assert json_too_deep(shallow_json) is None


def test_a_deep_file_is_refused_fast():
    """The exact measure stops at the limit: 100,000 levels are refused without scanning them all (libyaml's
    scanner is quadratic in flow depth: 40 s to read 100,000 levels to the end)."""
    import time

    for data in (b"[" * 100_000 + b"]" * 100_000, b"a: " + b"{b: " * 100_000 + b"}" * 100_000):
        began = time.perf_counter()
        assert yaml_too_deep(data) == 1
        assert time.perf_counter() - began < 1.0


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_a_legitimately_nested_object_still_loads(tmp_path, form):
    """An unknown field nested 100 deep (far beyond any real manifest, well within the limit) is just skipped."""
    doc = {"apiVersion": "jobtree.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r", "namespace": "team"},
           "spec": {"resources": {"gpuType": "H", "totalGPUs": 1}, "extra": nested_value(100)}}
    path = tmp_path / f"r.{form}"
    path.write_text(yaml.safe_dump(doc) if form == "yaml" else json.dumps(doc))
    assert [r.name for r in load_snapshot([str(path)]).runs] == ["r"]


def test_a_nested_list_of_lists_is_refused_in_json(tmp_path):
    """Lists inside Lists (read recursively by the loader) are nesting too."""
    doc: dict = {"kind": "List", "items": []}
    for _ in range(MAX_DEPTH):
        doc = {"kind": "List", "items": [doc]}
    path = tmp_path / "lists.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError, match=r"lists.json: nested more than 256 levels deep at line 1"):
        load_snapshot([str(path)])
