"""borg_consumer_lag is reported on a timer: right while nothing is consumed, 0 after (real broker)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic
from prometheus_client import REGISTRY

from services.runtime.admin import connect_admin
from services.runtime.lag import lag_reporter
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def _gauge(topic: str, partition: int) -> float | None:
    value: float | None = REGISTRY.get_sample_value("borg_consumer_lag", {"topic": topic, "partition": str(partition)})
    return value


async def test_lag_reporter_follows_a_stalled_then_caught_up_consumer(kafka_bootstrap: str,
                                                                     topic_prefix: str) -> None:
    topic = f"{topic_prefix}lag-{uuid.uuid4().hex[:6]}"
    admin = await connect_admin(kafka_bootstrap)
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for i in range(30):
            await producer.send(topic, f"{i}".encode(), partition=i % 3 // 2)  # 20 to partition 0, 10 to 1
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=f"lag-{uuid.uuid4().hex[:6]}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    stop = asyncio.Event()
    totals: list[int] = []
    reporter = asyncio.create_task(lag_reporter(consumer, stop, interval_s=0.2, on_total=totals.append))
    try:
        # nothing consumed: the whole topic is lag, though no batch ever arrived
        await wait_until(lambda: totals and totals[-1] == 30, timeout=30, what="total lag 30 before consuming")
        assert (_gauge(topic, 0), _gauge(topic, 1)) == (20.0, 10.0)
        seen = 0
        while seen < 30:
            batch = await consumer.getmany(timeout_ms=1000)
            seen += sum(len(records) for records in batch.values())
        await consumer.commit()
        await wait_until(lambda: totals[-1] == 0, timeout=30, what="total lag 0 after consuming")
        assert (_gauge(topic, 0), _gauge(topic, 1)) == (0.0, 0.0)
        assert await consumer.committed(TopicPartition(topic, 0)) == 20
    finally:
        stop.set()
        await asyncio.wait_for(reporter, timeout=10)  # ends when stop is set
        await consumer.stop()
    assert reporter.exception() is None

