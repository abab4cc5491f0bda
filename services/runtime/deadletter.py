"""Building dead letters: the original bytes, the error and where the message came from."""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence

from contracts import DeadLetter
from contracts.topics import DEADLETTER_TOPIC

__all__ = ["DEADLETTER_TOPIC", "dead_letter", "original_value"]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dead_letter(
    *,
    service: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]] | None,
    error: str,
    kind: str,
) -> DeadLetter:
    return DeadLetter(
        source_topic=topic,
        partition=partition,
        offset=offset,
        key_b64=_b64(key),
        value_b64=_b64(value),
        headers=[(k, _b64(v) or "") for k, v in headers or ()],
        error=error[:4000] or "unknown error",
        error_kind=kind,  # type: ignore[arg-type]
        service=service,
        ts_ms=int(time.time() * 1000),
    )


def original_value(letter: DeadLetter) -> bytes | None:
    return None if letter.value_b64 is None else base64.b64decode(letter.value_b64)
