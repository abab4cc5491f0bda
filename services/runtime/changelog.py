"""Changelog topics for stream-processor state: make sure one exists, and read partitions back.

A changelog is a compacted topic with one partition per input partition; the records of
the state derived from input partition ``p`` go to changelog partition ``p``, so the
worker that is assigned input partition ``p`` restores exactly that state by reading
changelog partition ``p`` from the beginning to its end (tombstones delete a key).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from services.runtime.admin import connect_admin
from services.runtime.kafka_security import kafka_client_options

log = logging.getLogger(__name__)

CHANGELOG_CONFIG = {
    "cleanup.policy": "compact",
    # compact soon, so a restart replays little more than the live state
    "segment.bytes": str(64 * 1024 * 1024),
    "segment.ms": str(10 * 60 * 1000),
    # every partition of every changelog is created together, so without jitter all of them
    # roll at the same 10-minute mark and the log cleaner compacts them in one burst (seen as
    # the worst seconds of a 10-minute run at 10,000 NodeState/s); a per-segment random
    # 0–5 min earlier roll spreads that work
    "segment.jitter.ms": str(5 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.2",
}


async def ensure_changelog(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> bool:
    """Create the compacted changelog topic when missing; True when it was created.

    An existing topic with a different partition count is refused: its partitions would
    no longer line up with the input partitions whose state they hold.
    """
    admin = await connect_admin(bootstrap)
    try:
        if topic in set(await admin.list_topics()):
            described = await admin.describe_topics([topic])
            have = len(described[0].get("partitions", ())) if described else 0
            if have and have != partitions:
                raise RuntimeError(f"changelog topic {topic} has {have} partitions; its input has {partitions}")
            return False
        try:
            await admin.create_topics([NewTopic(name=topic, num_partitions=partitions,
                                                replication_factor=replication, topic_configs=CHANGELOG_CONFIG)])
        except TopicAlreadyExistsError:
            return False
        await _wait_for_leaders(admin, topic, partitions)
        return True
    finally:
        await admin.close()


async def _wait_for_leaders(admin: Any, topic: str, partitions: int, limit_s: float = 30.0) -> None:
    """Return once every partition of a just-created topic has a leader.

    The restore consumer reads the changelog right after it is created; asking a new
    partition for offsets before its leader is elected left an aiokafka client spinning on
    metadata requests (seen in tests: the processor stalled), so the worker waits here instead.
    """
    deadline = time.monotonic() + limit_s
    while True:
        described = await admin.describe_topics([topic])
        led = [p for p in (described[0].get("partitions", ()) if described else ()) if p.get("leader", -1) >= 0]
        if len(led) >= partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"changelog topic {topic}: {len(led)} of {partitions} partitions have a leader "
                               f"after {limit_s:.0f}s")
        await asyncio.sleep(0.1)


async def read_to_end(bootstrap: str, tps: list[TopicPartition]) -> AsyncIterator[tuple[TopicPartition, list[Any]]]:
    """Every committed record of ``tps`` from the beginning to the end offsets seen at the start, in batches."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                max_poll_records=10_000, fetch_max_bytes=64 * 1024 * 1024)
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        remaining = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, msgs in batch.items():
                yield tp, msgs
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()


async def read_changelog(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, dict[bytes, bytes]]:
    """Per partition of the changelog ``topic``: every live key with its newest value."""
    tps = [TopicPartition(topic, p) for p in sorted(set(partitions))]
    state: dict[int, dict[bytes, bytes]] = {tp.partition: {} for tp in tps}
    if not tps:
        return state
    started = time.monotonic()
    records = 0
    async for tp, msgs in read_to_end(bootstrap, tps):
        live = state[tp.partition]
        for msg in msgs:
            records += 1
            if msg.key is None:
                continue
            if msg.value is None:
                live.pop(msg.key, None)
            else:
                live[msg.key] = msg.value
    log.info("restored %d keys from %d changelog records of %s %s in %.3fs", sum(map(len, state.values())),
             records, topic, sorted(state), time.monotonic() - started)
    return state
