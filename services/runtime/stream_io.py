"""Kafka output for stream processors: outputs, dead letters and changelog records through one producer.

Everything a processor writes goes through one idempotent aiokafka producer (``Sink``);
``BatchStream`` calls ``flush`` (wait until the broker acknowledged everything sent) before
it commits input offsets, so outputs, dead letters and state are durable before the input
is marked done (at-least-once; duplicates carry the same idempotent key). Consumed records
are read through ``event.message.<field>`` (``batch_stream.RecordEvent``).
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
from services.runtime.metrics import DEADLETTERS, MESSAGES_OUT

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
            # a batch whose partition has no known leader fails after this long even with
            # idempotence; a broker restart with many topics can take tens of seconds to elect
            # them all, and the stream then waits (its commit waits for this flush) instead of
            # failing the flush and stopping
            request_timeout_ms=120_000,
        )
        self._pending: list[asyncio.Future[Any]] = []
        self._sent_counters: dict[str, Any] = {}
        self.dead_lettered = 0
        self.produced = 0

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        try:
            await self.flush()
        finally:
            await self._producer.stop()

    async def __aenter__(self) -> Sink:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def topic(self, base: str) -> str:
        return f"{self.prefix}{base}"

    async def _send(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers,
                    partition: int | None = None) -> None:
        fut = await self._producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        self._pending.append(fut)
        counter = self._sent_counters.get(topic)
        if counter is None:  # labels() per message was ~1.5 µs of every send
            counter = self._sent_counters[topic] = MESSAGES_OUT.labels(topic)
        counter.inc()

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
        """The original bytes of a consumed event (``event.message``), the error and where it came from."""
        await self.dead_letter_record(event.message, error, kind)

    async def dead_letter_record(self, msg: Any, error: str, kind: str) -> None:
        """The original bytes of a consumed record, the error and where it came from."""
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
        """Wait until everything sent so far is acknowledged by the broker (raises on failure).

        Safe to call from concurrent tasks (the stream's committer and its batch loop): each
        call waits for *every* send made before it, not only for the ones no other flush took.
        """
        if not self._pending:
            return
        waited = list(self._pending)
        await asyncio.gather(*waited)  # raises the first failure; the failed send stays for the next flush
        # only what this call waited for (and saw succeed) leaves the list: a send made
        # meanwhile, even one already failed, is the next flush's to report
        acknowledged = set(map(id, waited))
        self._pending = [f for f in self._pending if id(f) not in acknowledged]


def decode_event(model: type[Contract], event: Any) -> Contract:
    """Decode a consumed event's value into its contract model (raises ContractError)."""
    return decode(model, event.message.value)


def headers_of(event: Any) -> Sequence[tuple[str, bytes]]:
    headers = event.message.headers
    if headers is None:
        return ()
    if isinstance(headers, dict):
        return list(headers.items())
    return list(headers)


def timestamp_ms(event: Any) -> int:
    """The record timestamp (producer create time) of a consumed event, in epoch ms."""
    ts = event.message.timestamp
    return round(ts * 1000) if ts < 1e11 else int(ts)


__all__ = [
    "ContractError",
    "Sink",
    "decode_event",
    "headers_of",
    "timestamp_ms",
]
