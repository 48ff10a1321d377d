"""The small formats every generated table shares: a count, a goal's mark, a row."""

from __future__ import annotations

Row = tuple[str, str, str, str]  # benchmark, anchor, result, goal


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def mark(met: bool) -> str:
    return "✅" if met else "❌ missed"
