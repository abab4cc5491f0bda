"""Replay sources for `borgctl replay`: each yields chunks of pre-encoded (key, value) records.

A chunk is the records of one trace instant (or a slice of them) with its due time
``(trace_time - t0) / speedup`` seconds after the replay started; ``ts_ms`` inside
the records is ``start_ms + (trace_time - t0) * 1000 / speedup``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

Record = tuple[bytes, bytes]


@dataclass
class Chunk:
    due_s: float
    records: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class Clock:
    start_ms: int
    speedup: float = 1.0

    def ts_ms(self, offset_s: float) -> int:
        return self.start_ms + round(offset_s * 1000.0 / self.speedup)

    def due_s(self, offset_s: float) -> float:
        return offset_s / self.speedup


class ReplaySource(Protocol):
    base_topic: str
    what: str

    def chunks(self, clock: Clock) -> Iterator[Chunk]: ...
