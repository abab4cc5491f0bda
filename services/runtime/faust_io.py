"""Kafka I/O for faust stream processors: outputs, dead letters and table changelog writes.

Faust's own producer path costs ~100–400 µs per message on this class of machine, so
stream processors produce through one idempotent aiokafka producer here instead. faust
commits only offsets of acknowledged events (``Stream.take_events`` acks when the loop
body returns) and flushes before it commits; :func:`flush_before_commit` makes that flush
include this producer (or, with ``STREAM_FLUSH_EACH_BATCH``, every batch is flushed before
it is acknowledged). Either way outputs, dead letters and state are durable before the
input offset is committed (at-least-once; duplicates carry the same idempotent key).

Table state is written the same way: the value goes into the faust table's store and a
record into the table's changelog topic (the source event's partition, as faust itself
would), so faust's changelog recovery restores it after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from opentelemetry import context as otel_context

from contracts import ContractError, decode, encode
from contracts.base import Contract
from contracts.headers import Headers, build_headers
from contracts.topics import DEADLETTER_TOPIC, topic_spec
from services.runtime.deadletter import dead_letter
from services.runtime.metrics import DEADLETTERS, MESSAGES_IN, MESSAGES_OUT

log = logging.getLogger(__name__)


class Sink:
    """One producer for everything a stream processor writes; ``flush`` before acking a batch."""

    def __init__(self, *, bootstrap: str, service: str, topic_prefix: str, linger_ms: int = 5) -> None:
        self.service = service
        self.prefix = topic_prefix
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=f"{service}-sink",
            enable_idempotence=True,
            acks="all",
            linger_ms=linger_ms,
            max_batch_size=262_144,
        )
        self._pending: list[asyncio.Future[Any]] = []
        self.dead_lettered = 0
        self.produced = 0

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        try:
            await self.flush()
        finally:
            await self._producer.stop()

    def topic(self, base: str) -> str:
        return f"{self.prefix}{base}"

    async def _send(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers,
                    partition: int | None = None) -> None:
        fut = await self._producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        self._pending.append(fut)
        MESSAGES_OUT.labels(topic).inc()

    async def send(self, base_topic: str, key: str, value: Contract, ctx: otel_context.Context | None) -> None:
        """A contract message with content-type, schema and the trace context ``ctx``."""
        spec = topic_spec(base_topic)
        await self._send(self.topic(base_topic), key.encode(), encode(value), build_headers(spec.schema, ctx))
        self.produced += 1

    async def changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        await self._send(topic, key, value, [], partition=partition)

    async def changelog_many(self, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
        """Table records in order, one producer batch per partition (far cheaper than one send each)."""
        by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
        for partition, key, value in records:
            by_partition.setdefault(partition, []).append((key, value))
        for partition, items in by_partition.items():
            batch = self._producer.create_batch()
            for key, value in items:
                if batch.append(key=key, value=value, timestamp=None) is None:
                    self._pending.append(await self._producer.send_batch(batch, topic, partition=partition))
                    batch = self._producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None)
            self._pending.append(await self._producer.send_batch(batch, topic, partition=partition))
        MESSAGES_OUT.labels(topic).inc(len(records))

    async def dead_letter(self, event: Any, error: str, kind: str) -> None:
        """The original bytes of a faust event, the error and where it came from."""
        msg = event.message
        letter = dead_letter(
            service=self.service,
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            headers=list(msg.headers or ()),
            error=error,
            kind=kind,
        )
        await self.send(DEADLETTER_TOPIC, msg.topic, letter, None)
        DEADLETTERS.labels(msg.topic, kind).inc()
        self.dead_lettered += 1
        log.warning("dead-lettered %s[%d]@%d (%s): %s", msg.topic, msg.partition, msg.offset, kind, error[:300])

    async def flush(self) -> None:
        """Wait until everything sent so far is acknowledged by the broker (raises on failure)."""
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)


class ChangelogTable:
    """Key-value state in a faust table, persisted through ``Sink.changelog`` (not faust's producer).

    ``put`` updates the table's store at once and queues a changelog record for the partition
    of the event being handled (set ``partition`` first); ``drain`` sends the queue. Values are
    bytes, so what faust's recovery restores is exactly what was written.
    """

    def __init__(self, table: Any, sink: Sink) -> None:
        self.table = table
        self.sink = sink
        self.data = table.data
        self.partition = 0
        self.pending: list[tuple[int, bytes, bytes]] = []

    def get(self, key: str) -> bytes | None:
        value = self.data.get(key.encode())
        return None if value is None else bytes(value)

    def put(self, key: str, value: bytes) -> None:
        k = key.encode()
        self.data[k] = value
        self.pending.append((self.partition, k, value))

    def mark(self) -> int:
        return len(self.pending)

    def discard_since(self, mark: int) -> None:
        """Forget records queued since ``mark`` (the event that queued them failed)."""
        del self.pending[mark:]

    async def drain(self) -> None:
        """Send the queued records (call once per batch: they go out as one producer batch per partition)."""
        if self.pending:
            pending, self.pending = self.pending, []
            await self.sink.changelog_many(self.table.changelog_topic.get_topic_name(), pending)


def flush_before_commit(app: Any, sink: Sink) -> None:
    """Make faust flush ``sink`` wherever it flushes its own producer: before every offset commit.

    faust's consumer awaits ``app.producer.flush()`` before it commits acknowledged offsets
    (also at rebalance and shutdown). Chaining the sink's flush there keeps at-least-once
    while a batch no longer waits for the broker's acknowledgements before the next one
    (``STREAM_FLUSH_EACH_BATCH=false``, the default).
    """
    producer = app.producer
    original = producer.flush

    async def flush_all() -> None:
        await sink.flush()
        await original()

    producer.flush = flush_all


def decode_event(model: type[Contract], event: Any) -> Contract:
    """Decode a raw faust event value into its contract model (raises ContractError)."""
    MESSAGES_IN.labels(event.message.topic).inc()
    return decode(model, event.message.value)


def headers_of(event: Any) -> Sequence[tuple[str, bytes]]:
    headers = event.message.headers
    if headers is None:
        return ()
    if isinstance(headers, dict):
        return list(headers.items())
    return list(headers)


def timestamp_ms(event: Any) -> int:
    """The record timestamp (producer create time) of a faust event, in epoch ms."""
    ts = event.message.timestamp
    return round(ts * 1000) if ts < 1e11 else int(ts)


__all__ = [
    "ChangelogTable",
    "ContractError",
    "Sink",
    "decode_event",
    "flush_before_commit",
    "headers_of",
    "timestamp_ms",
]
