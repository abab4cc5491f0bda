"""Drains the spool to Kafka in order; survives broker outages without ever blocking sampling.

One loop: peek the oldest records, publish them as record batches, wait for every
acknowledgement, then commit them in the spool. A failed attempt (broker down,
timeout) commits nothing: the producer is closed, a fresh idempotent one is made
after a jittered back-off (``backoff.Backoff``: agents do not all retry in lock-step
after a shared outage), and the same records are sent again — so delivery is in order and
at-least-once (a batch acknowledged just before a failure can arrive twice; consumers
deduplicate on (node, seq)). One outage produces one "unreachable" and one "back" log line.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from services.node_agent.backoff import Backoff
from services.node_agent.metrics import BROKER_UP, DELIVERED, SPOOL_BYTES, SPOOL_RECORDS
from services.node_agent.publish import BatchingProducer, BatchPublisher
from services.node_agent.spool import Spool, SpoolRecord
from services.runtime.pause import pause

log = logging.getLogger(__name__)
ProducerFactory = Callable[[], BatchingProducer]


class Shipper:
    def __init__(
        self,
        spool: Spool,
        producer_factory: ProducerFactory,
        base_topic: str,
        *,
        batch_records: int = 500,
        attempt_timeout_s: float = 10.0,
        backoff_s: tuple[float, float] = (0.2, 5.0),
        rng: random.Random | None = None,
    ) -> None:
        self.spool = spool
        self.factory = producer_factory
        self.base_topic = base_topic
        self.batch_records = batch_records
        self.attempt_timeout_s = attempt_timeout_s
        self.backoff_min, self.backoff_max = backoff_s
        self.backoff = Backoff(self.backoff_min, self.backoff_max, rng)
        self.wake = asyncio.Event()
        self.delivered = 0
        self.failures = 0
        self.connected = False
        self._producer: BatchingProducer | None = None
        self._publisher: BatchPublisher | None = None
        self._outage_started: float | None = None

    def _gauges(self) -> None:
        SPOOL_RECORDS.set(len(self.spool))
        SPOOL_BYTES.set(self.spool.live_bytes)

    async def _connect(self) -> BatchPublisher:
        if self._publisher is not None:
            return self._publisher
        producer = self.factory()
        try:
            await asyncio.wait_for(producer.start(), timeout=self.attempt_timeout_s)
            publisher = BatchPublisher(producer, self.base_topic)
            await asyncio.wait_for(publisher.start(), timeout=self.attempt_timeout_s)
        except BaseException:
            await self._close_producer(producer)
            raise
        self._producer, self._publisher = producer, publisher
        return publisher

    @staticmethod
    async def _close_producer(producer: BatchingProducer | None) -> None:
        if producer is None:
            return
        try:
            await asyncio.wait_for(producer.close_now(), timeout=2.0)
        except BaseException:  # closing a producer whose broker is gone: nothing more to do
            pass

    async def _disconnect(self) -> None:
        producer, self._producer, self._publisher = self._producer, None, None
        await self._close_producer(producer)

    async def ship_once(self) -> int:
        """Deliver up to batch_records of the oldest spooled records; returns how many (raises on failure)."""
        records = self.spool.peek(self.batch_records)
        if not records:
            return 0
        publisher = await self._connect()
        try:
            await asyncio.wait_for(self._publish(publisher, records), timeout=self.attempt_timeout_s)
        except BaseException:
            publisher.discard()
            raise
        self.spool.commit(records[-1].index)
        self.delivered += len(records)
        DELIVERED.inc(len(records))
        return len(records)

    @staticmethod
    async def _publish(publisher: BatchPublisher, records: list[SpoolRecord]) -> None:
        for record in records:
            await publisher.add(record.key, record.value, record.headers)
        await publisher.flush()

    async def run(self, stop: asyncio.Event, *, drain_on_stop_s: float = 5.0) -> None:
        self.backoff.reset()
        stop_deadline: float | None = None
        try:
            while True:
                if stop.is_set():
                    stop_deadline = stop_deadline or time.monotonic() + drain_on_stop_s
                    if not len(self.spool) or time.monotonic() > stop_deadline or not self.connected:
                        break
                try:
                    sent = await self.ship_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._on_failure(exc)
                    await self._disconnect()
                    await pause(stop, self.backoff.next_delay())
                    continue
                self.backoff.reset()
                if sent:
                    self._on_success()
                self._gauges()
                if not sent:
                    self.wake.clear()
                    if not len(self.spool):
                        await _wait_any(self.wake, stop, seconds=1.0)
        finally:
            self._gauges()
            await self._disconnect()

    def _on_failure(self, exc: BaseException) -> None:
        self.failures += 1
        BROKER_UP.set(0)
        if self.connected or self._outage_started is None:
            self._outage_started = time.monotonic()
            log.warning(
                "Kafka unreachable (%s: %s): spooling locally, %d record(s) waiting",
                type(exc).__name__,
                exc or "timeout",
                len(self.spool),
            )
        self.connected = False
        self._gauges()

    def _on_success(self) -> None:
        BROKER_UP.set(1)
        if not self.connected:
            if self._outage_started is not None:
                log.info(
                    "Kafka reachable again after %.1fs: draining the spool (%d record(s) waiting, %d dropped in total)",
                    time.monotonic() - self._outage_started,
                    len(self.spool),
                    self.spool.dropped,
                )
            self._outage_started = None
            self.connected = True



async def _wait_any(wake: asyncio.Event, stop: asyncio.Event, *, seconds: float) -> None:
    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())}
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
