"""JSON text exactly as ``json.dumps(value, indent=2, ensure_ascii=False, default=default)`` writes it, faster.

json writes indented text with its pure-Python encoder (its C encoder has no indent): a generator step per value,
most of the rendering time of a report with thousands of findings. Here a container whose items are all scalars
(strings, numbers, booleans, null) — a finding, a row — is written by json's C encoder in one call, with the
newline and indentation of its level as the item separator; only containers that hold containers are walked in
Python. A list of such dicts whose values are strings, integers, booleans and nulls only (the findings) is
written by msgspec in one call and indented by it (``msgspec.json.format``), which writes exactly what json
writes for those (floats are left to json: the two spell exponents differently). Anything else (keys that are
not strings, no C encoder) is handed to ``json.dumps`` itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import chain
from json import encoder as _json
from typing import Any

INDENT = 2
_SCALARS = frozenset({str, int, float, bool, type(None)})
# What msgspec writes exactly as json does (ints of any size are tried: msgspec refuses those past 64 bits).
_SAME_IN_MSGSPEC = frozenset({str, int, bool, type(None)})


class _Unusual(Exception):
    """Something only ``json.dumps`` itself writes (here: a key that is not a string)."""


def dumps(value: Any, default: Callable[[Any], Any]) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False, default=default)``, byte for byte."""
    if _json.c_make_encoder is None:
        return json.dumps(value, indent=INDENT, ensure_ascii=False, default=default)
    chunks: list[str] = []
    try:
        _Writer(default, chunks).write(value, 0)
    except _Unusual:
        return json.dumps(value, indent=INDENT, ensure_ascii=False, default=default)
    return "".join(chunks)


class _Writer:
    def __init__(self, default: Callable[[Any], Any], chunks: list[str]) -> None:
        self.default = default
        self.chunks = chunks
        self.encoders: dict[int, Callable[[Any, int], Any]] = {}  # level -> C encoder of a flat container there

    def encoder(self, level: int) -> Callable[[Any, int], Any]:
        found = self.encoders.get(level)
        if found is None:
            found = self.encoders[level] = _json.c_make_encoder(
                {}, self.default, _json.encode_basestring, None, ": ", ",\n" + " " * (INDENT * level), False, False,
                True,
            )
        return found

    def write(self, value: Any, level: int) -> None:
        chunks = self.chunks
        kind = type(value)
        if kind in _SCALARS or isinstance(value, (str, int, float)):
            chunks.extend(self.encoder(0)(value, 0))
        elif isinstance(value, dict):
            self.write_dict(value, level)
        elif isinstance(value, (list, tuple)):
            self.write_list(value, level)
        else:
            self.write(self.default(value), level)

    def write_dict(self, value: dict, level: int) -> None:
        chunks = self.chunks
        if not value:
            chunks.append("{}")
            return
        inner = "\n" + " " * (INDENT * (level + 1))
        if type(value) is dict and all(type(v) in _SCALARS for v in value.values()) and all(
            type(k) is str for k in value
        ):
            text = "".join(self.encoder(level + 1)(value, 0))  # {"a": 1,\n<indent>"b": 2}
            chunks.append("{" + inner + text[1:-1] + "\n" + " " * (INDENT * level) + "}")
            return
        chunks.append("{")
        first = True
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unusual
            chunks.append(inner if first else "," + inner)
            first = False
            chunks.append(_json.encode_basestring(key))
            chunks.append(": ")
            self.write(item, level + 1)
        chunks.append("\n" + " " * (INDENT * level) + "}")

    def write_list(self, value: list | tuple, level: int) -> None:
        chunks = self.chunks
        if not value:
            chunks.append("[]")
            return
        if type(value) is list and _flat_records(value):
            import msgspec  # (here: `kubectl runs version` writes JSON without importing it)

            try:
                text = msgspec.json.format(msgspec.json.encode(value), indent=INDENT).decode()
            except (TypeError, OverflowError, ValueError, UnicodeError):  # an int past 64 bits, a lone surrogate
                pass
            else:  # (no string holds a newline once encoded: each newline is the formatter's)
                chunks.append(text.replace("\n", "\n" + " " * (INDENT * level)) if level else text)
                return
        inner = "\n" + " " * (INDENT * (level + 1))
        if type(value) in (list, tuple) and all(type(v) in _SCALARS for v in value):
            text = "".join(self.encoder(level + 1)(value, 0))
            chunks.append("[" + inner + text[1:-1] + "\n" + " " * (INDENT * level) + "]")
            return
        chunks.append("[")
        first = True
        for item in value:
            chunks.append(inner if first else "," + inner)
            first = False
            self.write(item, level + 1)
        chunks.append("\n" + " " * (INDENT * level) + "]")


def _flat_records(value: list) -> bool:
    """A list of plain dicts with string keys and only strings, ints, booleans and nulls as values (checked by
    C-level passes, not a Python step per item)."""
    if not set(map(type, value)) <= {dict}:
        return False
    return set(map(type, chain.from_iterable(value))) <= {str} and set(
        map(type, chain.from_iterable(map(dict.values, value)))) <= _SAME_IN_MSGSPEC
