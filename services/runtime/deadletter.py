"""Building dead letters: the original bytes (bounded), the error and where the message came from.

A dead letter must always fit in one produce request, whatever the input was: a record just under
the broker's 1 MB limit becomes ~1.33 MB of base64, which the producer refuses (that refusal used to
stop the service, and the restart met the same record again). Every copy of input bytes is therefore
bounded (``BoundedBytes``): the whole value when it is small, else a prefix plus the size and the
SHA-256 of the whole, marked ``truncated``. With the limits below a dead letter stays under ~240 kB.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Sequence
from typing import Any

from contracts import DeadLetter, DeadLetterV2
from contracts.models import BoundedBytes, DeadHeader, DeadLetterKind
from contracts.topics import DEADLETTER_TOPIC

__all__ = [
    "DEADLETTER_TOPIC",
    "HEADERS_MAX",
    "HEADER_VALUE_MAX",
    "KEY_MAX",
    "VALUE_MAX",
    "bounded",
    "dead_letter",
    "original_value",
]

VALUE_MAX = 128 * 1024
"""Bytes of a value kept in a dead letter (base64 makes it ~171 kB of JSON)."""
KEY_MAX = 1024
HEADER_VALUE_MAX = 1024
HEADERS_MAX = 32
"""Headers kept per dead letter; the rest are counted in ``headers_dropped``."""
HEADER_NAME_MAX = 253
ERROR_MAX = 4000
KINDS: frozenset[str] = frozenset(DeadLetterKind.__args__)  # type: ignore[attr-defined]


def bounded(data: bytes, limit: int) -> BoundedBytes:
    kept = data[:limit]
    return BoundedBytes(
        b64=base64.b64encode(kept).decode("ascii"),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        truncated=len(kept) < len(data),
    )


def _as_bytes(data: Any) -> bytes | None:
    if data is None:
        return None
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    return str(data).encode("utf-8", "replace")


def _headers(headers: Sequence[tuple[Any, Any]] | None) -> tuple[list[DeadHeader], int]:
    items = list(headers or ())
    kept = []
    for name, value in items[:HEADERS_MAX]:
        raw = _as_bytes(value)
        label = name if isinstance(name, str) else (_as_bytes(name) or b"").decode("utf-8", "replace")
        kept.append(DeadHeader(name=label[:HEADER_NAME_MAX],
                               value=None if raw is None else bounded(raw, HEADER_VALUE_MAX)))
    return kept, max(0, len(items) - HEADERS_MAX)


def dead_letter(
    *,
    service: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[Any, Any]] | None,
    error: str,
    kind: str,
) -> DeadLetterV2:
    """A deadletter.v2 record for one consumed record (never raises on strange input)."""
    kept, dropped = _headers(headers)
    raw_key, raw_value = _as_bytes(key), _as_bytes(value)
    return DeadLetterV2(
        source_topic=topic or "unknown",
        partition=max(0, partition),
        offset=max(0, offset),
        key=None if raw_key is None else bounded(raw_key, KEY_MAX),
        value=None if raw_value is None else bounded(raw_value, VALUE_MAX),
        headers=kept,
        headers_dropped=dropped,
        error=error[:ERROR_MAX] or "unknown error",
        error_kind=kind if kind in KINDS else "processing",  # type: ignore[arg-type]
        service=service,
        ts_ms=int(time.time() * 1000),
    )


def original_value(letter: DeadLetterV2 | DeadLetter) -> bytes | None:
    """The value bytes a dead letter kept (a prefix when ``letter.value.truncated``)."""
    if isinstance(letter, DeadLetter):
        return None if letter.value_b64 is None else base64.b64decode(letter.value_b64)
    return None if letter.value is None else base64.b64decode(letter.value.b64)
