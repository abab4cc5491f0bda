"""Producing contract messages with schema and trace headers."""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from aiokafka import AIOKafkaProducer
from opentelemetry import context as otel_context

from contracts import encode
from contracts.base import Contract
from contracts.headers import Headers, build_headers
from contracts.topics import topic_spec
from services.runtime.kafka_security import kafka_client_options
from services.runtime.metrics import MESSAGES_OUT

log = logging.getLogger(__name__)
Compression = Literal["gzip", "lz4", "snappy", "zstd"] | None


class Producer:
    """An idempotent aiokafka producer that sends contract models to registered topics.

    `send` returns the delivery future without awaiting it, so callers can batch;
    `flush` waits for everything sent so far.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        client_id: str,
        topic_prefix: str = "",
        compression: Compression = None,
        linger_ms: int = 5,
        idempotent: bool = True,
        max_batch_size: int = 262_144,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.topic_prefix = topic_prefix
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, **kafka_client_options(),
            client_id=client_id,
            enable_idempotence=idempotent,
            acks="all",
            compression_type=compression,
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            request_timeout_ms=request_timeout_ms,
        )
        self._pending: set[asyncio.Future[object]] = set()

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        try:
            await self.flush()
        finally:
            await self._producer.stop()

    def topic(self, base: str) -> str:
        return f"{self.topic_prefix}{base}"

    async def send(
        self,
        base_topic: str,
        key: str,
        value: Contract,
        *,
        ctx: otel_context.Context | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[object]:
        spec = topic_spec(base_topic)
        if not isinstance(value, spec.model):
            raise TypeError(f"{base_topic} carries {spec.model.__name__}, not {type(value).__name__}")
        return await self.send_raw(
            self.topic(base_topic),
            key.encode(),
            encode(value),
            build_headers(spec.schema, ctx),
            timestamp_ms=timestamp_ms,
        )

    async def send_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        *,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = await self._producer.send(
            topic, value=value, key=key, headers=headers, timestamp_ms=timestamp_ms
        )
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        MESSAGES_OUT.labels(topic).inc()
        return fut

    async def flush(self) -> None:
        """Wait until every message sent so far is acknowledged (raises on delivery failure)."""
        if self._pending:
            pending = list(self._pending)
            await asyncio.gather(*pending)
        await self._producer.flush()
