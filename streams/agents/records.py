"""The record every agent publishes, whatever the path (streams.agents.io)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Out:
    topic: str
    key: bytes | None
    value: bytes
    timestamp_ms: float | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None
