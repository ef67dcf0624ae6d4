"""Refuse absurdly nested documents before a parser sees them.

A YAML document nested 50,000 deep overflows the C stack inside the YAML C loader's composer (the process dies
with SIGSEGV, nothing printed); JSON that deep ends in a RecursionError. No Kubernetes object is more than a
few dozen levels deep, so anything deeper than ``MAX_DEPTH`` collections (mappings and sequences, the ``List``
around the objects included) is refused with the file named.

The checks cost next to nothing on ordinary files: a bound computed at C speed (``bytes.count`` and one regular
expression search) proves most files shallow; only a file the bound cannot clear is measured exactly, and the
exact measure stops at the first collection past the limit (so a 100,000-deep file is refused in milliseconds).
"""

from __future__ import annotations

import re
from itertools import accumulate

MAX_DEPTH = 256

_OPENERS = (b"[", b"{")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DELTA = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def _flow_openers(data: bytes) -> int:
    """A bound on how many levels flow collections can add: the opening brackets, less those closed at once
    (``[]`` and ``{}`` are empty leaves, or text: together they add at most one level to any path)."""
    return sum(map(data.count, _OPENERS)) - data.count(b"[]") - data.count(b"{}") + 1


def json_too_deep(data: bytes, limit: int = MAX_DEPTH) -> int | None:
    """The line (1-based) where JSON ``data`` opens its ``limit + 1``-th nested collection, else None."""
    if _flow_openers(data) <= limit:
        return None
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if max(accumulate(map(_DELTA.__getitem__, brackets)), default=0) <= limit:
        return None
    depth = 0  # too deep: find where, token by token (only ever done for a file that is refused)
    for match in _JSON_TOKEN.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return data.count(b"\n", 0, match.start()) + 1
        elif token in (b"]", b"}"):
            depth -= 1
    return None  # unbalanced in a way the bound overcounted: the parser will say what is wrong


def yaml_too_deep(data: bytes, limit: int = MAX_DEPTH) -> int | None:
    """The line (1-based) where YAML ``data`` opens its ``limit + 1``-th nested collection, else None.

    The bound: flow collections (``[``, ``{``) add at most one level per opening bracket anywhere in the file,
    and block collections at most two levels per column of a line's indentation and indicators (a sequence may
    sit at its key's indentation; ``- - x`` nests on one line), so a file with few brackets and no line
    indented past ``(limit - brackets) / 2`` columns is shallow enough. Otherwise libyaml's event parser (which
    keeps its state on the heap, unlike the loader's composer) measures the real depth."""
    flow = _flow_openers(data)
    room = (limit - flow - 2) // 2
    if room > 0 and re.search(rb"^[ \t?:-]{%d}" % room, data, re.M) is None:
        return None
    import yaml

    depth = 0
    try:
        for event in yaml.parse(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > limit:
                    return event.start_mark.line + 1
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        # libyaml 0.2.5's own limit (PyYAML >= 6.0.4 builds it in): its scanner reads a flow collection's tokens
        # ahead of the events, so a file past that depth (1,000, beyond ours) stops here before any event counts.
        mark = getattr(exc, "problem_mark", None)
        if mark is not None and "maximum nesting depth" in (getattr(exc, "problem", None) or ""):
            return mark.line + 1
        return None  # not valid YAML before it got too deep: the loader will say where
    return None


def too_deep_message(name: str, line: int, limit: int = MAX_DEPTH) -> str:
    return (f"{name}: nested more than {limit} levels deep at line {line}: refused before parsing "
            "(no Kubernetes object is nested that deep)")
