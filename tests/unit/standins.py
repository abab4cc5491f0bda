"""Stand-ins for consumed Kafka events, for unit tests of processors without a broker.

Processors read a consumed record as ``event.message.<field>`` (``batch_stream.RecordEvent``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: float


@dataclass
class Ev:
    message: Msg
