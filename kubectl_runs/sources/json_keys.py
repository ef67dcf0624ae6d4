"""Refuse a JSON object that gives a key twice, as ``strict_yaml`` does for YAML.

JSON parsers keep the last value of a repeated key (msgspec too, with no option to say so), so a hand-written
``"concurrency": 1, …, "concurrency": 64`` would read as 64; the API server refuses such an object under strict
field validation. No parser at C speed reports repeated keys, and checking every object of a file costs about
three decodes of it, so the check is exact for files up to ``CHECKED_BYTES`` — hand-written files, where a key
is given twice by mistake — and skipped above: large snapshot files are written by kubectl, the API server or
``snapshot save``, which never repeat a key. On a file it refuses, a second pass names the key and both lines.
"""

from __future__ import annotations

import json
import re

CHECKED_BYTES = 1 << 20  # 1 MiB: about 10 ms of checking at most

_TOKEN = re.compile(rb'("(?:[^"\\]|\\.)*")\s*:|"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


class _Repeated(Exception):
    pass


def _unique(pairs: list[tuple[str, object]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Repeated
    return found


def duplicate_key(data: bytes) -> tuple[str, int, int] | None:
    """(key, line, line where it was first given) of the first key given twice in one object of ``data``, or
    None (none, a file over ``CHECKED_BYTES``, or not JSON the standard parser reads: the loader says why)."""
    if len(data) > CHECKED_BYTES:
        return None
    try:
        json.loads(data, object_pairs_hook=_unique)
    except _Repeated:
        return _locate(data)
    except (ValueError, RecursionError):
        return None
    return None


def _locate(data: bytes) -> tuple[str, int, int] | None:
    """The first repeated key, token by token (only for a file that is refused)."""
    stack: list[dict[str, int] | None] = []  # per open collection: an object's keys -> offset, or None (array)
    for match in _TOKEN.finditer(data):
        token = match.group()
        if token == b"{":
            stack.append({})
        elif token == b"[":
            stack.append(None)
        elif token in (b"}", b"]"):
            if stack:
                stack.pop()
        elif match.group(1) is not None and stack and stack[-1] is not None:
            key = json.loads(match.group(1))
            first = stack[-1].setdefault(key, match.start())
            if first != match.start():
                return key, data.count(b"\n", 0, match.start()) + 1, data.count(b"\n", 0, first) + 1
    return None
