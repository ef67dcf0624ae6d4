"""sources/json_keys: a key given twice in one JSON object is found (exactly, escapes decoded), named with both
lines; the same key in different objects is not a repeat; files over CHECKED_BYTES are not checked."""

from __future__ import annotations

import json

from kubectl_runs.sources.json_keys import CHECKED_BYTES, duplicate_key


def test_a_repeated_key_is_named_with_both_lines():
    assert duplicate_key(b'{"a": 1,\n "b": {"c": 1,\n\n "c": 2}}') == ("c", 4, 2)


def test_escaped_keys_are_compared_as_read():
    assert duplicate_key(b'{"owner": 1, "\\u006fwner": 2}') == ("owner", 1, 1)
    assert duplicate_key(b'{"a\\"": 1, "a": 2}') is None  # 'a"' and 'a' differ


def test_the_same_key_in_different_objects_is_not_a_repeat():
    assert duplicate_key(json.dumps({"items": [{"name": "x"}, {"name": "y"}], "name": "z"}).encode()) is None
    assert duplicate_key(b'{"a": ["a", "a", {"a": 1}], "b": "a"}') is None  # values that look like keys


def test_not_json_is_left_to_the_loader():
    assert duplicate_key(b'{"a": 1,') is None


def test_files_over_the_limit_are_not_checked():
    repeated = b'{"a": 1, "a": 2, "pad": "' + b"x" * CHECKED_BYTES + b'"}'
    assert duplicate_key(repeated) is None
    assert duplicate_key(b'{"a": 1, "a": 2}') == ("a", 1, 1)
