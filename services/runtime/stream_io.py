"""Kafka output for stream processors: outputs, dead letters and changelog records through one producer.

Everything a processor writes goes through one idempotent aiokafka producer (``Sink``):
outputs and dead letters collect in one open batch per partition that ``push`` hands over
(``BatchStream`` pushes after every batch of input), changelog records go out as batches too.
``BatchStream`` calls ``flush`` (push, then wait until the broker acknowledged everything sent) before
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
from aiokafka.producer.message_accumulator import BatchBuilder
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanContext

from contracts import ContractError, decode, encode
from contracts.base import Contract
from contracts.headers import Headers, build_headers, headers_for_span, span_context_in
from contracts.topics import DEADLETTER_TOPIC, topic_spec
from services.runtime.deadletter import dead_letter
from services.runtime.kafka_security import kafka_client_options
from services.runtime.metrics import DEADLETTERS, MESSAGES_OUT
from services.runtime.partitioning import default_partition
from services.runtime.stream_trace import Publish, publish_span, quiet_child, quiet_publish

log = logging.getLogger(__name__)
KEY_PARTITIONS_MAX = 200_000
"""Keys whose partition is remembered (nodes, pods); the table starts afresh beyond that."""
DEAD_REMEMBERED_MAX = 100_000
"""Dead-lettered records remembered to refuse a second letter (input is re-read only from recent offsets)."""
DIRECT_ABOVE = 65_536
"""Values larger than this (bytes) bypass the open batches (dead letters of big inputs)."""


class Sink:
    """One producer for everything a stream processor writes; ``flush`` before acking a batch."""

    def __init__(self, *, bootstrap: str, service: str, topic_prefix: str, linger_ms: int = 5,
                 producer_spans: bool = True) -> None:
        self.service = service
        # a PRODUCER span per output (messaging conventions), a child of the context the output is
        # sent under (a stage's span for that record); the output's traceparent names it. Made by
        # stream_trace's direct path (cost: docs/performance.md); an unsampled record costs a span id.
        self.producer_spans = producer_spans
        self._publish: dict[str, Publish] = {}
        self._targets: dict[str, tuple[str, str]] = {}
        self.prefix = topic_prefix
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, **kafka_client_options(),
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
        # outputs not yet handed to the producer: one open batch per (topic, partition)
        self._open: dict[tuple[str, int], BatchBuilder] = {}
        self._open_counts: dict[str, int] = {}
        self._partitions: dict[str, list[int]] = {}
        self._key_partitions: dict[tuple[str, bytes], int] = {}
        self._pushing = asyncio.Lock()
        self._sent_counters: dict[str, Any] = {}
        self.dead_lettered = 0
        self.produced = 0
        # (topic, partition, offset) this service dead-lettered (since it started, and before a crash:
        # read back at start, services/runtime/recovery.py): the same record is not dead-lettered again
        self.already_dead: set[tuple[str, int, int]] = set()

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
        """A contract message with content-type, schema and the trace context ``ctx``.

        It is appended to an open batch of its partition (the one the producer's default
        partitioner picks for the key) and handed to the producer by ``push`` (after each
        batch of input) or ``flush``: one ``send_batch`` per partition instead of a
        ``send`` per message (what that saves: docs/stream.md). A value over
        ``DIRECT_ABOVE`` bytes goes through ``send`` itself, after what is open, so the
        producer's own size checks apply to it alone.
        """
        if not self.producer_spans:
            await self._append(base_topic, key, encode(value), ctx, None)
            return
        quiet = quiet_publish(ctx)
        if quiet is not None:  # as in send_encoded
            await self._append(base_topic, key, encode(value), None, None, quiet)
            return
        with publish_span(self._publish_of(base_topic), ctx) as out:  # the consumer continues from this span
            await self._append(base_topic, key, encode(value), out, None)

    async def send_encoded(self, base_topic: str, key: str, value_bytes: bytes,
                           ctx: otel_context.Context | None, *, extra_headers: Headers | None = None) -> None:
        """``send`` for a value already encoded as ``contracts.encode`` would (a processor that
        keeps the bytes anyway, e.g. regime's replay history, does not encode twice).
        ``extra_headers`` follow the standard ones (e.g. ``borg-rollout`` during a model rollout)."""
        if not self.producer_spans:
            await self._append(base_topic, key, value_bytes, ctx, extra_headers)
            return
        quiet = quiet_publish(ctx)
        if quiet is not None:  # no span processor: the producer span's ids only, straight into the headers
            await self._append(base_topic, key, value_bytes, None, extra_headers, quiet)
            return
        with publish_span(self._publish_of(base_topic), ctx) as out:
            await self._append(base_topic, key, value_bytes, out, extra_headers)

    async def send_quiet(self, base_topic: str, key: str, value_bytes: bytes, stage: SpanContext, *,
                         extra_headers: Headers | None = None) -> None:
        """``send_encoded`` under the stage span whose context is ``stage`` (``stream_trace.quiet_stage``: no
        span processor sees it): the producer span's ids go straight into the headers, no ``Context``
        built; the same ids and header bytes as ``stage_span`` + ``send_encoded``."""
        if not self.producer_spans:
            await self._append(base_topic, key, value_bytes, None, extra_headers, stage)
            return
        out = quiet_child(stage)
        if out is not None:
            await self._append(base_topic, key, value_bytes, None, extra_headers, out)
            return
        with publish_span(self._publish_of(base_topic), span_context_in(stage)) as ctx:
            await self._append(base_topic, key, value_bytes, ctx, extra_headers)

    def _publish_of(self, base_topic: str) -> Publish:
        publish = self._publish.get(base_topic)
        if publish is None:
            publish = self._publish[base_topic] = Publish(base_topic, self.topic(base_topic))
        return publish

    async def _append(self, base_topic: str, key: str, value_bytes: bytes, ctx: otel_context.Context | None,
                      extra_headers: Headers | None, span_context: SpanContext | None = None) -> None:
        """Append one output; its trace context is ``span_context`` when given, else the span in ``ctx``."""
        target = self._targets.get(base_topic)
        if target is None:  # per output topic, not per output: the spec lookup and the prefixed name
            target = self._targets[base_topic] = (self.topic(base_topic), topic_spec(base_topic).schema)
        topic, schema = target
        key_bytes = key.encode()
        headers = build_headers(schema, ctx) if span_context is None else headers_for_span(schema, span_context)
        if extra_headers:
            headers = [*headers, *extra_headers]
        if len(value_bytes) > DIRECT_ABOVE:
            await self.push()
            await self._send(topic, key_bytes, value_bytes, headers)
            self.produced += 1
            return
        partition = self._key_partitions.get((topic, key_bytes))
        if partition is None:
            partition = await self._partition_of(topic, key_bytes)
        batch = self._open.get((topic, partition))
        if batch is None:
            batch = self._open[(topic, partition)] = self._producer.create_batch()
        if batch.append(key=key_bytes, value=value_bytes, timestamp=None, headers=headers) is None:
            # full: hand it over, and start the partition's next batch (which takes any first record)
            async with self._pushing:
                if self._open.get((topic, partition)) is batch:  # else a push took it meanwhile
                    del self._open[(topic, partition)]
                    await self._submit(topic, partition, batch)
            batch = self._open.setdefault((topic, partition), self._producer.create_batch())
            batch.append(key=key_bytes, value=value_bytes, timestamp=None, headers=headers)
        self._open_counts[topic] = self._open_counts.get(topic, 0) + 1
        self.produced += 1

    async def _partition_of(self, topic: str, key: bytes) -> int:
        """The partition ``AIOKafkaProducer.send`` picks for ``key`` (``DefaultPartitioner``: murmur2).

        The topic's partitions are read once: a topic whose partition count grows needs the
        service restarted (keyed state is partitioned by that count anyway).
        """
        partitions = self._partitions.get(topic)
        if partitions is None:
            partitions = self._partitions[topic] = list(await self._producer.partitions_for(topic))
        partition = default_partition(key, partitions)
        if len(self._key_partitions) >= KEY_PARTITIONS_MAX:
            self._key_partitions.clear()
        self._key_partitions[(topic, key)] = partition
        return partition

    async def _submit(self, topic: str, partition: int, batch: BatchBuilder) -> None:
        batch.close()  # complete: sent as soon as the connection is free, without lingering
        self._pending.append(await self._producer.send_batch(batch, topic, partition=partition))

    async def push(self) -> None:
        """Hand every open output batch to the producer (``flush`` then waits for their acks).

        Pushes run one at a time (the batch loop's and the committer's flush may overlap):
        batches of one partition reach the producer in the order they were filled.
        """
        async with self._pushing:  # also waits for a push in progress (a flush counts on it)
            if not self._open:
                return
            batches, self._open = self._open, {}
            counts, self._open_counts = self._open_counts, {}
            for (topic, partition), batch in batches.items():
                await self._submit(topic, partition, batch)
        for topic, n in counts.items():
            counter = self._sent_counters.get(topic)
            if counter is None:
                counter = self._sent_counters[topic] = MESSAGES_OUT.labels(topic)
            counter.inc(n)

    def acked(self) -> asyncio.Future[Any] | None:
        """A future done when everything handed to the producer so far is acknowledged (None: nothing
        is waiting); it fails when a send fails. For watching latency only: ``flush`` is what commits."""
        if not self._pending:
            return None
        return asyncio.gather(*self._pending)

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
        """The original bytes of a consumed record (bounded), the error and where it came from."""
        where = (msg.topic, msg.partition, msg.offset)
        if where in self.already_dead:
            # a batch handled again record by record, or a record re-read after a crash
            log.info("%s[%d]@%d is dead-lettered already: not again", *where)
            return
        if len(self.already_dead) >= DEAD_REMEMBERED_MAX:
            self.already_dead.clear()
        self.already_dead.add(where)
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
        await self.push()
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
    """The record's headers as a sequence of pairs (the record's own list or tuple: read it, do not change it)."""
    headers = event.message.headers
    if headers is None:
        return ()
    if type(headers) is list or type(headers) is tuple:  # no copy per output: callers only read them
        return headers
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
