"""TopicReader's per-record handling: no record stops it, bad ones are counted and logged once per N."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from services.runtime import topic_reader
from services.runtime.topic_reader import Outcome, TopicReader


def record(value: bytes | None, offset: int) -> ConsumerRecord[Any, Any]:
    return ConsumerRecord(
        topic="p-x.v1", partition=0, offset=offset, timestamp=0, timestamp_type=0, key=b"k", value=value,
        checksum=None, serialized_key_size=1, serialized_value_size=len(value or b""), headers=(),
    )


def apply(base: str, rec: ConsumerRecord[Any, Any], now_ms: int) -> Outcome:
    if rec.value == b"raise":
        raise ValueError("boom")
    return {b"ok": "applied", b"skip": "ignored"}.get(rec.value, "bad")  # type: ignore[return-value]


def test_outcomes_and_exceptions_are_counted_and_resume_positions_kept() -> None:
    reader = TopicReader(bootstrap="unused:1", topics=["x.v1"], topic_prefix="p-", apply=apply, resume=True)
    values = [b"ok", b"skip", b"raise", b"\x00garbage", None, b"ok"]
    records = [record(value, offset) for offset, value in enumerate(values)]
    reader._apply_batch({TopicPartition(records[0].topic, records[0].partition): records})
    s = reader.stats
    assert (s.records, s.applied, s.bad, s.restarts) == (6, 2, 3, 0)
    assert list(reader._positions.values()) == [6]


def test_bad_records_are_logged_once_per_n(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_reader, "LOG_EVERY", 10)
    reader = TopicReader(bootstrap="unused:1", topics=["x.v1"], topic_prefix="p-", apply=apply)
    with caplog.at_level(logging.WARNING, logger=topic_reader.__name__):
        for offset in range(25):
            reader._apply(record(b"raise", offset), now_ms=1)
    assert reader.stats.bad == 25
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3  # the 1st, 11th and 21st
    assert "ValueError: boom" in warnings[0] and "1 bad so far" in warnings[0]
