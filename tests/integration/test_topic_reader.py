"""The shared compacted-topic reader (services/runtime/topic_reader.py) against the real broker."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from aiokafka import ConsumerRecord

from contracts.topics import REGIMES_TOPIC
from services.runtime.topic_reader import Outcome, TopicReader
from tests.conftest import broker_topics, wait_until
from tests.kafka_helpers import produce_raw

pytestmark = pytest.mark.integration
TOPIC = REGIMES_TOPIC  # any registry topic: the topic_prefix fixture creates them all


class Applied:
    """An apply function that keeps what it saw; b"boom" raises, b"bad" is reported unusable."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def __call__(self, base: str, record: ConsumerRecord[Any, Any], now_ms: int) -> Outcome:
        assert base == TOPIC and now_ms > 0
        if record.value == b"boom":
            raise RuntimeError("apply failed")
        if record.value == b"bad":
            return "bad"
        self.values.append(record.value)
        return "applied"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """One key, so one partition and a known order."""
    await produce_raw(bootstrap, topic, [(b"k", v) for v in values])


async def test_catches_up_tails_and_survives_bad_records(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}{TOPIC}"
    await send(kafka_bootstrap, topic, [b"a", b"boom", b"\xff\xfe garbage", b"bad", b"b"])
    applied = Applied()
    caught: list[int] = []
    reader = TopicReader(
        bootstrap=kafka_bootstrap, topics=[TOPIC], topic_prefix=topic_prefix, apply=applied,
        client_id="t-topic-reader", on_caught_up=lambda: caught.append(len(applied.values)),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    try:
        await asyncio.wait_for(reader.caught_up.wait(), timeout=30)
        assert applied.values == [b"a", b"\xff\xfe garbage", b"b"]  # garbage bytes are the apply's business
        assert caught == [3]  # signalled once, after everything that existed at start
        assert (reader.stats.records, reader.stats.applied, reader.stats.bad) == (5, 3, 2)
        await send(kafka_bootstrap, topic, [b"boom", b"c"])  # tailing, past another raising record
        await wait_until(lambda: applied.values[-1:] == [b"c"], timeout=30, what="tailed record")
        assert (reader.stats.records, reader.stats.bad, reader.stats.restarts) == (7, 3, 0)
        assert not task.done()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def test_reconnects_after_kafka_errors(kafka_bootstrap: str, topic_prefix: str) -> None:
    """Unreachable broker first, then the real one; then its consumer is stopped under it mid-run."""
    topic = f"{topic_prefix}{TOPIC}"
    await send(kafka_bootstrap, topic, [b"a", b"b"])
    applied = Applied()
    errors: list[str] = []
    reader = TopicReader(
        bootstrap=f"127.0.0.1:{closed_port()}", topics=[TOPIC], topic_prefix=topic_prefix, apply=applied,
        client_id="t-topic-reader", retry_s=0.1, resume=True, on_error=lambda e: errors.append(type(e).__name__),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    try:
        await wait_until(lambda: reader.stats.restarts >= 1, timeout=30, what="a failed connection")
        assert not reader.caught_up.is_set()
        reader.bootstrap = kafka_bootstrap  # the broker "comes back"
        await asyncio.wait_for(reader.caught_up.wait(), timeout=30)
        assert applied.values == [b"a", b"b"]
        restarts = reader.stats.restarts
        consumer = reader._consumer
        assert consumer is not None
        await consumer.stop()  # a Kafka failure of the running consumer
        await wait_until(lambda: reader.stats.restarts > restarts and reader._consumer not in (None, consumer),
                         timeout=30, what="reconnected")
        await send(kafka_bootstrap, topic, [b"c"])
        await wait_until(lambda: applied.values[-1:] == [b"c"], timeout=30, what="tailed after reconnect")
        assert applied.values == [b"a", b"b", b"c"]  # resume=True: nothing applied twice
        assert "ConsumerStoppedError" in errors
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


async def test_waits_for_missing_topics_without_creating_them(kafka_bootstrap: str, topic_prefix: str) -> None:
    missing = "notyet.v1"
    reader = TopicReader(
        bootstrap=kafka_bootstrap, topics=[missing], topic_prefix=topic_prefix, apply=Applied(), retry_s=0.1
    )
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    try:
        await wait_until(lambda: reader.stats.restarts >= 2, timeout=30, what="two waits for the topic")
        assert f"{topic_prefix}{missing}" not in await broker_topics(kafka_bootstrap)
        assert not reader.caught_up.is_set()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def test_steps_over_a_record_the_client_cannot_unpack(kafka_bootstrap: str, topic_prefix: str,
                                                            tmp_path: Any) -> None:
    """A header name that is not UTF-8 (sent with kcat) makes aiokafka's getmany raise for the whole fetch."""
    from tests.integration.test_malformed_corpus import CORPUS_PARTITION, kcat_send
    from tests.malformed_corpus import consumer_breaking_cases

    topic = f"{topic_prefix}{TOPIC}"
    before: list[tuple[bytes | None, bytes | None]] = [(b"k", v) for v in (b"a", b"b")]
    await produce_raw(kafka_bootstrap, topic, before, partition=CORPUS_PARTITION)
    [case] = consumer_breaking_cases(TOPIC)
    await kcat_send(kafka_bootstrap, topic, case, tmp_path / "case.bin")
    await produce_raw(kafka_bootstrap, topic, [(b"k", b"c")], partition=CORPUS_PARTITION)
    applied = Applied()
    reader = TopicReader(bootstrap=kafka_bootstrap, topics=[TOPIC], topic_prefix=topic_prefix, apply=applied,
                         client_id="t-topic-reader-unreadable")
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    try:
        await wait_until(lambda: applied.values[-1:] == [b"c"], timeout=30, what="the record after it")
        assert applied.values == [b"a", b"b", b"c"]
        assert (reader.stats.bad, reader.stats.restarts) == (1, 0)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
