"""The reconciler's log (one logfmt line per action on stderr) and the metrics it reports to when metrics are
off (``NullMetrics``: every call a no-op)."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO


def _logfmt_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\\\n\t'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class Logger:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def __call__(self, msg: str, level: str = "info", **fields: Any) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        parts = [f"time={stamp}", f"level={level}", f"msg={_logfmt_value(msg)}"]
        parts += [f"{key}={_logfmt_value(value)}" for key, value in fields.items() if value is not None]
        line = " ".join(parts) + "\n"
        with self._lock:
            try:
                self.stream.write(line)
                self.stream.flush()
            except (OSError, ValueError):
                pass


class NullMetrics:
    """Stands in for reconciler/metrics.py's ReconcilerMetrics when metrics are off."""

    def observe_reconcile(self, seconds: float) -> None: ...
    def count_write(self, kind: str, action: str, outcome: str) -> None: ...
    def count_api_error(self, verb: str, resource: str, reason: str) -> None: ...
    def set_queue_depth(self, depth: int) -> None: ...
    def count_decision(self, flavor: str, domain: str | None, status: Any) -> None: ...
    def update_fleet(self, snapshot: Any, at: Any, book: Any = None, phases: Any = None) -> None: ...
    def set_leader(self, leader: bool) -> None: ...
    def set_ready(self, ready: bool) -> None: ...
