"""The consume → handle → produce loop with an explicit error policy.

At-least-once: offsets are committed only after every output of a message (or its
dead letter) is acknowledged by the broker. Downstream consumers deduplicate on
the idempotent keys carried in the contracts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from contracts import ContractError, decode
from contracts import telemetry as names
from contracts.base import Contract
from contracts.headers import extract_trace
from contracts.topics import DEADLETTER_TOPIC, topic_spec
from services.runtime.deadletter import dead_letter
from services.runtime.metrics import CONSUMER_LAG, DEADLETTERS, MESSAGES_IN, PROCESSING_SECONDS
from services.runtime.producer import Producer

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.runtime")


@dataclass(frozen=True)
class Incoming:
    """One decoded input message and the trace context it arrived with."""

    topic: str
    base_topic: str
    partition: int
    offset: int
    key: str | None
    value: Contract
    timestamp_ms: int
    ctx: otel_context.Context


@dataclass(frozen=True)
class Outgoing:
    base_topic: str
    key: str
    value: Contract
    links: Sequence[trace.Link] = field(default_factory=tuple)


Handler = Callable[[Incoming], Awaitable[Sequence[Outgoing]]]


class ProcessingError(Exception):
    """Raised by a handler for an input it cannot process (dead-lettered as `processing`)."""


@dataclass
class WorkerStats:
    handled: int = 0
    dead_lettered: int = 0
    produced: int = 0
    committed_batches: int = 0


class StreamWorker:
    def __init__(
        self,
        *,
        service: str,
        bootstrap: str,
        group_id: str,
        input_topics: Sequence[str],
        handler: Handler,
        producer: Producer,
        topic_prefix: str = "",
        error_policy: str = "deadletter",
        max_records: int = 500,
        auto_offset_reset: str = "earliest",
    ) -> None:
        self.service = service
        self.group_id = group_id
        self.prefix = topic_prefix
        self.handler = handler
        self.producer = producer
        self.error_policy = error_policy
        self.max_records = max_records
        self.stats = WorkerStats()
        self._topics = [f"{topic_prefix}{t}" for t in input_topics]
        self._base = dict(zip(self._topics, input_topics, strict=True))
        self._consumer = AIOKafkaConsumer(
            *self._topics,
            bootstrap_servers=bootstrap,
            group_id=group_id,
            client_id=f"{service}-{group_id}",
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            max_poll_records=max_records,
            isolation_level="read_committed",
        )
        self.ready = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.start()
        try:
            self.ready.set()
            while not stop.is_set():
                batch = await self._consumer.getmany(timeout_ms=200, max_records=self.max_records)
                if not batch:
                    continue
                commits: dict[TopicPartition, int] = {}
                for tp, records in batch.items():
                    for record in records:
                        await self._handle(record)
                    commits[tp] = records[-1].offset + 1
                    self._report_lag(tp, records[-1].offset)
                await self.producer.flush()
                await self._consumer.commit({tp: off for tp, off in commits.items()})
                self.stats.committed_batches += 1
        finally:
            await self._consumer.stop()

    def _report_lag(self, tp: TopicPartition, last_offset: int) -> None:
        high = self._consumer.highwater(tp)
        if high is not None:
            CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - last_offset - 1))

    async def _handle(self, record: ConsumerRecord[Any, Any]) -> None:
        base = self._base[record.topic]
        MESSAGES_IN.labels(record.topic).inc()
        started = time.perf_counter()
        parent = extract_trace(record.headers)
        with tracer.start_as_current_span(
            names.SPAN_PROCESS.format(topic=base),
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                names.MESSAGING_SYSTEM: "kafka",
                names.MESSAGING_OPERATION: "process",
                names.MESSAGING_DESTINATION: record.topic,
                names.MESSAGING_CONSUMER_GROUP: self.group_id,
                names.MESSAGING_KAFKA_PARTITION: str(record.partition),
                names.MESSAGING_KAFKA_OFFSET: record.offset,
            },
        ) as span:
            try:
                value = decode(topic_spec(base).model, record.value)
            except ContractError as exc:
                span.set_attribute(names.DEADLETTER_KIND, exc.kind)
                await self._dead_letter(record, exc.message, exc.kind)
                return
            incoming = Incoming(
                topic=record.topic,
                base_topic=base,
                partition=record.partition,
                offset=record.offset,
                key=record.key.decode("utf-8", "replace") if record.key is not None else None,
                value=value,
                timestamp_ms=record.timestamp,
                ctx=otel_context.get_current(),
            )
            try:
                outputs = await self.handler(incoming)
            except Exception as exc:  # the error policy decides what an unexpected failure means
                if self.error_policy == "crash" and not isinstance(exc, ProcessingError):
                    raise
                span.record_exception(exc)
                span.set_attribute(names.DEADLETTER_KIND, "processing")
                log.warning("processing failed at %s[%d]@%d: %s", record.topic, record.partition, record.offset, exc)
                await self._dead_letter(record, f"{type(exc).__name__}: {exc}", "processing")
                return
            for out in outputs:
                await self.producer.send(out.base_topic, out.key, out.value)
            self.stats.produced += len(outputs)
            self.stats.handled += 1
        PROCESSING_SECONDS.labels(record.topic).observe(time.perf_counter() - started)

    async def _dead_letter(self, record: ConsumerRecord[Any, Any], error: str, kind: str) -> None:
        letter = dead_letter(
            service=self.service,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            headers=record.headers,
            error=error,
            kind=kind,
        )
        await self.producer.send(DEADLETTER_TOPIC, record.topic, letter)
        DEADLETTERS.labels(record.topic, kind).inc()
        self.stats.dead_lettered += 1
