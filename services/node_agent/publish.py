"""The one producer path for NodeState (agent, synthetic, replay): pre-encoded records in Kafka record batches.

Records are partitioned exactly like Kafka's default partitioner (murmur2 of the key),
so a node always lands on the same partition whichever producer sends it, and are
appended to one aiokafka ``BatchBuilder`` per partition. A full builder is handed to
the idempotent producer (``send_batch``); ``flush`` hands over the rest and waits for
every acknowledgement. Per-message cost is one C-level append — no per-message future,
partitioner call or metadata check — which is what lets one replay process publish
tens of thousands of NodeState per second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import codec
from aiokafka.partitioner import murmur2

from contracts.headers import Headers
from services.runtime.metrics import MESSAGES_OUT
from services.runtime.producer import Compression, Producer

log = logging.getLogger(__name__)


class BatchingProducer(Producer):
    """The runtime Producer plus aiokafka's batch API (create_batch / send_batch)."""

    async def close_now(self) -> None:
        """Stop without waiting for pending deliveries (they are retried from the spool)."""
        self._pending.clear()
        await self._producer.stop()

    async def partition_count(self, topic: str) -> int:
        parts = await self._producer.partitions_for(topic)
        return len(parts)

    def create_batch(self) -> Any:
        return self._producer.create_batch()

    async def send_batch(self, batch: Any, topic: str, partition: int, count: int) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = await self._producer.send_batch(batch, topic, partition=partition)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        MESSAGES_OUT.labels(topic).inc(count)
        return fut


class BatchPublisher:
    """Publishes (key, value, headers) records to one topic in per-partition record batches."""

    def __init__(self, producer: BatchingProducer, base_topic: str, *, max_in_flight: int = 32) -> None:
        self.producer = producer
        self.topic = producer.topic(base_topic)
        self.max_in_flight = max_in_flight
        self._partitions = 0
        self._part_of: dict[bytes, int] = {}
        self._builders: dict[int, Any] = {}
        self._counts: dict[int, int] = {}
        self._in_flight: list[asyncio.Future[object]] = []
        self.sent = 0

    async def start(self) -> None:
        self._partitions = await self.producer.partition_count(self.topic)
        if self._partitions <= 0:
            raise RuntimeError(f"topic {self.topic} has no partitions (does it exist?)")

    def partition(self, key: bytes) -> int:
        part = self._part_of.get(key)
        if part is None:
            part = self._part_of[key] = partition_for(key, self._partitions)
        return part

    async def _ship(self, part: int) -> None:
        builder = self._builders.pop(part, None)
        count = self._counts.pop(part, 0)
        if builder is not None and count:
            fut = await self.producer.send_batch(builder, self.topic, part, count)
            self._in_flight.append(fut)
            self.sent += count
        if len(self._in_flight) > self.max_in_flight:
            await self._in_flight.pop(0)  # bounded pipelining; raises if that batch failed
            self._in_flight = [f for f in self._in_flight if not f.done() or f.exception() is not None]

    async def _append_slow(self, part: int, key: bytes, value: bytes, headers: Headers, ts: int | None) -> None:
        """The current batch of ``part`` is full (or absent): ship it and start a new one."""
        if part in self._builders:
            await self._ship(part)
        builder = self._builders[part] = self.producer.create_batch()
        if builder.append(key=key, value=value, timestamp=ts, headers=headers) is None:
            raise ValueError(f"a {len(value)}-byte record does not fit in an empty batch")
        self._counts[part] = 1

    async def add(self, key: bytes, value: bytes, headers: Headers, timestamp_ms: int | None = None) -> None:
        part = self.partition(key)
        builder = self._builders.get(part)
        if builder is None or builder.append(key=key, value=value, timestamp=timestamp_ms, headers=headers) is None:
            await self._append_slow(part, key, value, headers, timestamp_ms)
        else:
            self._counts[part] += 1

    async def add_chunk(self, records: Sequence[tuple[bytes, bytes]], headers: Headers) -> None:
        """Many records with the same headers: the replay hot loop (no coroutine per record)."""
        part_of, builders, counts = self._part_of, self._builders, self._counts
        for key, value in records:
            part = part_of.get(key)
            if part is None:
                part = self.partition(key)
            builder = builders.get(part)
            if builder is None or builder.append(key=key, value=value, timestamp=None, headers=headers) is None:
                await self._append_slow(part, key, value, headers, None)
            else:
                counts[part] += 1

    async def add_many(self, records: Iterable[tuple[bytes, bytes, Headers]]) -> None:
        for key, value, headers in records:
            await self.add(key, value, headers)

    async def flush(self) -> None:
        """Hand over every partly filled batch and wait for all acknowledgements (raises on failure)."""
        for part in list(self._builders):
            await self._ship(part)
        pending, self._in_flight = self._in_flight, []
        if pending:
            await asyncio.gather(*pending)

    def discard(self) -> None:
        """Forget unsent builders and in-flight futures (after a failed flush, before retrying)."""
        self._builders.clear()
        self._counts.clear()
        for fut in self._in_flight:
            if fut.done() and not fut.cancelled():
                fut.exception()  # mark retrieved
        self._in_flight.clear()


def pick_compression(wanted: str) -> Compression:
    """The codec if aiokafka can use it here (lz4/zstd/snappy need the cramjam package), else gzip."""
    if wanted == "none":
        return None
    available = {
        "gzip": codec.has_gzip(),
        "lz4": codec.has_lz4(),
        "zstd": codec.has_zstd(),
        "snappy": codec.has_snappy(),
    }
    if wanted not in available:
        raise ValueError(f"unknown compression {wanted!r}; choose from {', '.join(available)}, none")
    if available[wanted]:
        return wanted  # type: ignore[return-value]
    log.warning("compression %s unavailable (aiokafka needs the cramjam package); using gzip", wanted)
    return "gzip"


def partition_for(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2, positive, modulo): what the Java client would pick."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


async def publish_all(publisher: BatchPublisher, records: Sequence[tuple[bytes, bytes, Headers]]) -> None:
    await publisher.add_many(records)
    await publisher.flush()
