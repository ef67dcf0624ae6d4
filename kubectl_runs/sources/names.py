"""Names as the API server validates them, checked before a name reaches a URL path or a filter.

A namespace is a DNS-1123 label and the name of a Run, Reservation, Workload, KaiwoJob or Lease a DNS-1123
subdomain (apimachinery's ``IsDNS1123Label`` / ``IsDNS1123Subdomain``, in its words). Anything else — ``..``,
``a/b``, ``%2e%2e``, upper case, 254 characters, a NUL — names no object the API server could hold, and in a
path it could name a different resource (``-n ../../../api/v1``). Pure: no imports beyond the standard library.
"""

from __future__ import annotations

import re

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

LABEL_RULE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')")
SUBDOMAIN_RULE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com')")


def label_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a namespace (a DNS-1123 label), in the API server's words; None if
    nothing."""
    if not value:
        return "must not be empty"
    if len(value) > LABEL_MAX:
        return f"must be no more than {LABEL_MAX} characters (it has {len(value)})"
    if not _LABEL.fullmatch(value):
        return LABEL_RULE
    return None


def subdomain_problem(value: str) -> str | None:
    """What is wrong with ``value`` as an object name (a DNS-1123 subdomain); None if nothing."""
    if not value:
        return "must not be empty"
    if len(value) > SUBDOMAIN_MAX:
        return f"must be no more than {SUBDOMAIN_MAX} characters (it has {len(value)})"
    if not _SUBDOMAIN.fullmatch(value):
        return SUBDOMAIN_RULE
    return None


def shown(value: str, limit: int = 60) -> str:
    """``value`` quoted for an error line: control and invisible characters escaped, long values cut."""
    escaped = "".join(ch if ch.isprintable() and ch not in "\"\\" else _escape(ch) for ch in value[:limit])
    more = f"… ({len(value)} characters)" if len(value) > limit else ""
    return f'"{escaped}{more}"'


def _escape(ch: str) -> str:
    if ch in "\"\\":
        return "\\" + ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
