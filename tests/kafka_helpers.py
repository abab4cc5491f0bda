"""Helpers for real-broker tests: raw produce and drain-until-N consume."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


async def produce_raw(
    bootstrap: str,
    topic: str,
    items: list[tuple[bytes | None, bytes | None]],
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for key, value in items:
            await producer.send(topic, key=key, value=value, headers=headers or [])
        await producer.flush()
    finally:
        await producer.stop()


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
