"""Helpers for real-broker tests: raw produce and drain-until-N consume."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from contracts import encode
from contracts.base import Contract
from contracts.headers import build_headers


async def produce_raw(
    bootstrap: str,
    topic: str,
    items: list[tuple[bytes | None, bytes | None]],
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for key, value in items:
            await producer.send(topic, key=key, value=value, headers=headers or [], partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


async def produce_contracts(bootstrap: str, prefix: str, topic: str, items: list[tuple[str, Contract]]) -> None:
    """Encode each (key, record) and produce it to ``prefix + topic`` with the headers a service would send."""
    await produce_raw(bootstrap, prefix + topic, [(key.encode(), encode(value)) for key, value in items],
                      headers=build_headers(topic))


async def consume(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Any]:
    """Read `count` records from the start of `topic` (fails with what was seen on timeout)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[Any] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(records) < count:
            if loop.time() > deadline:
                raise AssertionError(f"{topic}: expected {count} records, got {len(records)} within {timeout:.0f}s")
            batch = await consumer.getmany(timeout_ms=200)
            for recs in batch.values():
                records.extend(recs)
    finally:
        await consumer.stop()
    return records


async def drain(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every record currently in `topic` (up to the end offsets at call time)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[Any] = []
    try:
        partitions = consumer.assignment()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not partitions:
            await asyncio.sleep(0.05)
            partitions = consumer.assignment()
            if loop.time() > deadline:
                raise AssertionError(f"{topic}: no partitions assigned within {timeout:.0f}s")
        ends = await consumer.end_offsets(list(partitions))
        async def behind() -> bool:
            for tp, end in ends.items():
                if await consumer.position(tp) < end:
                    return True
            return False

        while await behind():
            if loop.time() > deadline:
                raise AssertionError(f"{topic}: could not read up to the end offsets within {timeout:.0f}s")
            batch = await consumer.getmany(timeout_ms=200)
            for recs in batch.values():
                records.extend(recs)
    finally:
        await consumer.stop()
    return records


async def wait_until_serving(bootstrap: str, partitions: int = 6, timeout: float = 120.0) -> float:
    """After a broker restart: wait until a NEW topic takes a write on every partition.

    A restarted broker answers metadata before it serves every new partition; a test that
    creates topics right then can see partitions without a leader for a long time (seen
    after test_stack_kafka's restart). Returns the seconds it took; fails after ``timeout``.
    """
    import uuid

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError

    loop = asyncio.get_running_loop()
    started = loop.time()
    topic = f"probe-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        last: Exception | None = None
        while loop.time() - started < timeout:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=5000)
            try:
                await producer.start()
                for p in range(partitions):
                    await asyncio.wait_for(producer.send_and_wait(topic, b"probe", partition=p), 10)
                return loop.time() - started
            except (KafkaError, TimeoutError) as exc:
                last = exc
                await asyncio.sleep(1.0)
            finally:
                await producer.stop()
        raise AssertionError(f"broker did not serve a new {partitions}-partition topic within {timeout:.0f}s: {last!r}")
    finally:
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
