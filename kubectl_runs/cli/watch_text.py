"""The pure parts of ``-w/--watch`` (cli/watching.py): when a burst of changes has settled, which changes to
name, what counts as the report's content, and the text of one block.

Blocks: a table (or wide, CSV) is preceded by a timestamp line ``--- 2025-11-01T00:15:00Z`` (with
``--output-watch-events``, one line per changed object after it); ``-o json`` prints one compact document per
line (JSON lines), ``-o yaml`` one document per ``---``; with ``--output-watch-events`` a JSON or YAML document
is ``{"events": [{"type", "kind", "namespace", "name"}], "object": <the report>}``."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

QUIET = 0.2  # seconds without a change before a burst is evaluated
MAX_DELAY = 2.0  # seconds after the first change of a burst: evaluated then even if changes keep coming
SHOWN_EVENTS = 20  # events named before a table; the rest are counted


def settle(first: float, last: float, now: float, quiet: float = QUIET, cap: float = MAX_DELAY) -> float:
    """Seconds still to wait before evaluating a burst that began at ``first`` and last changed at ``last``:
    ``quiet`` after the last change, but no later than ``cap`` after the first (0 = now)."""
    return max(0.0, min(last + quiet, first + cap) - now)


def merge_changes(changes: Sequence[Any]) -> list[Any]:
    """One change per object, in the order objects first changed, saying how it differs from the last block:
    ADDED then MODIFIED is ADDED; ADDED then DELETED is nothing; DELETED then ADDED is MODIFIED."""
    merged: dict[tuple[str, str], Any] = {}
    for change in changes:
        key = (change.kind, change.key)
        before = merged.get(key)
        if before is None:
            merged[key] = change
        elif before.type == "ADDED" and change.type == "DELETED":
            del merged[key]
        elif before.type == "ADDED":
            continue
        elif before.type == "DELETED" and change.type == "ADDED":
            merged[key] = type(change)("MODIFIED", change.kind, change.key)
        else:
            merged[key] = type(change)(change.type, change.kind, change.key)
    return list(merged.values())


def content(doc: Any, fmt: str, no_headers: bool = False) -> str:
    """What the report says, as it would be printed (notes included): two documents with the same content
    print the same."""
    from ..render import render

    out, err = io.StringIO(), io.StringIO()
    render(doc, fmt, out, err, no_headers=no_headers)
    return err.getvalue() + "\0" + out.getvalue()


def _event(change: Any) -> dict[str, str]:
    namespace, _, name = change.key.rpartition("/")
    return {"type": change.type, "kind": change.kind, "namespace": namespace, "name": name}


def block(doc: Any, fmt: str, at: datetime, changes: Sequence[Any] | None, *, no_headers: bool = False
          ) -> tuple[str, str]:
    """(stdout, stderr) of one block; ``changes`` None: without ``--output-watch-events``."""
    from ..render import _json_default, _plain, render
    from ..timeutil import rfc3339

    named = merge_changes(changes) if changes is not None else None
    if fmt in ("json", "yaml"):
        data = doc.data if named is None else {"events": [_event(c) for c in named], "object": doc.data}
        err = "".join(f"warning: {note}\n" for note in doc.notes)
        if fmt == "json":
            return json.dumps(data, default=_json_default, ensure_ascii=False, separators=(",", ":")) + "\n", err
        import yaml

        text = yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True, default_flow_style=False)
        return "---\n" + text, err
    out, err = io.StringIO(), io.StringIO()
    out.write(f"--- {rfc3339(at)}\n")
    if named is not None:
        for change in named[:SHOWN_EVENTS]:
            out.write(f"{change}\n")
        if len(named) > SHOWN_EVENTS:
            out.write(f"… and {len(named) - SHOWN_EVENTS} more changes\n")
    render(doc, fmt, out, err, no_headers=no_headers)
    return out.getvalue(), err.getvalue()
