"""Per-record handlers (the agents) on the one stream runtime: ``BatchStream`` + ``Sink``.

A handler takes one decoded input (``Incoming``) and returns its outputs (``Outgoing``); this
adapter decodes each record of a batch, runs the handler inside the record's consumer span,
sends the outputs through the stage's ``Sink`` and dead-letters what cannot be decoded or
handled (``ERROR_POLICY``). Delivery, commits, crash recovery (poison pills, dead letters
written once) and bounded dead letters are the runtime's, the same as for the stream
processors: at-least-once, offsets committed only after every output and dead letter of a
record is acknowledged; downstream consumers deduplicate on the idempotent keys carried in
the contracts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from contracts import ContractError, decode
from contracts import telemetry as names
from contracts.base import Contract
from contracts.headers import extract_trace
from contracts.topics import topic_spec
from services.runtime.batch_stream import Batch, BatchStream, Record
from services.runtime.metrics import PROCESSING_SECONDS
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import StreamSettings

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


class StreamWorker:
    """Consume ``input_topics`` in ``group_id`` and run ``handler`` per record (on ``BatchStream``)."""

    def __init__(
        self,
        *,
        service: str,
        bootstrap: str,
        group_id: str,
        input_topics: Sequence[str],
        handler: Handler,
        topic_prefix: str = "",
        error_policy: Literal["deadletter", "crash"] = "deadletter",
        max_records: int = 500,
        commit_interval_s: float = 1.0,
    ) -> None:
        self.service = service
        self.group_id = group_id
        self.handler = handler
        self.error_policy = error_policy
        self.stats = WorkerStats()
        settings = StreamSettings(KAFKA_BOOTSTRAP=bootstrap, BORG_TOPIC_PREFIX=topic_prefix,  # type: ignore[call-arg]
                                  ERROR_POLICY=error_policy)
        self.sink = Sink(bootstrap=bootstrap, service=service, topic_prefix=topic_prefix, producer_spans=True)
        self.stream = BatchStream(service=service, settings=settings, sink=self.sink, topics=list(input_topics),
                                  handle=self._handle_batch, batch_max=max_records,
                                  commit_interval_s=commit_interval_s, group=group_id)
        self._base = {settings.topic(t): t for t in input_topics}
        self.ready = self.stream.ready

    def is_ready(self) -> bool:
        return self.stream.is_ready()

    async def run(self, stop: asyncio.Event) -> None:
        await self.sink.start()
        try:
            await self.stream.run(stop)
        finally:
            await self.sink.stop()

    async def _handle_batch(self, batch: Batch) -> None:
        for records in batch.values():
            for record in records:
                await self._handle(record)
        self.stats.dead_lettered = self.sink.dead_lettered

    async def _handle(self, record: Record) -> None:
        base = self._base[record.topic]
        started = time.perf_counter()
        with tracer.start_as_current_span(
            names.SPAN_PROCESS.format(topic=base),
            context=extract_trace(record.headers),
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
                await self.sink.dead_letter_record(record, exc.message, exc.kind)
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
                await self.sink.dead_letter_record(record, f"{type(exc).__name__}: {exc}", "processing")
                return
            for out in outputs:
                await self.sink.send(out.base_topic, out.key, out.value, None)
            self.stats.produced += len(outputs)
            self.stats.handled += 1
        PROCESSING_SECONDS.labels(record.topic).observe(time.perf_counter() - started)
