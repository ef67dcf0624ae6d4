"""Exit codes (API.md §5) and the one exception type that reaches users as a one-line message."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # not found, forbidden, unreachable, invalid object, a failed verify
    USAGE = 2  # bad flags or arguments (click's own usage errors exit 2 as well)
    FINDINGS = 3  # `leases audit --strict` found problems
    PARTIAL = 4  # a report over several clusters: some were read and printed, some could not be read


class UserError(Exception):
    """A failure explained in one line; ``main`` prints ``error: <message>`` and exits with ``code``."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED):
        super().__init__(message)
        self.message = message
        self.code = code


class UsageError(UserError):
    def __init__(self, message: str):
        super().__init__(message, ExitCode.USAGE)
