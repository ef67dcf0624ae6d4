"""Small words for people: counts with the right plural."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "GPU")`` -> ``1 GPU``; ``counted(1200, "lease")`` -> ``1,200 leases``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
