"""Reads the dashboard's topics into DashboardState: no consumer group, nothing committed.

Every partition is assigned directly and read from the configured start (`earliest`, `latest`, or
`lookback` minutes back via the broker's time index; clusterstate.v1, compacted and small, always
from the beginning). After a Kafka failure the reader reconnects and resumes where it stopped, so
nothing is counted twice. It waits for the topics to exist instead of subscribing to missing ones
(a broker with auto-creation would create them with the wrong configuration).

A record that does not decode is counted and shown, not dead-lettered: the dashboard only watches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client import Counter

from contracts import ContractError, decode
from contracts.headers import trace_id_of
from contracts.topics import topic_spec
from services.dashboard.settings import StartAt
from services.dashboard.state import CONSUMED_TOPICS, DashboardState

log = logging.getLogger(__name__)
RECORDS = Counter("borg_dashboard_records_total", "Records the dashboard read", ["topic", "outcome"])
ALWAYS_FROM_START = ("clusterstate.v1",)


class TopicsMissingError(Exception):
    """The topics do not exist (yet)."""


async def topic_partitions(admin: AIOKafkaAdminClient, names: list[str]) -> list[TopicPartition]:
    """Every partition of `names`; raises TopicsMissingError (never creates a topic)."""
    existing = set(await admin.list_topics())
    missing = sorted(t for t in names if t not in existing)
    if missing:
        raise TopicsMissingError(f"topics {', '.join(missing)} do not exist yet")
    described = await admin.describe_topics(names)
    partitions = [
        TopicPartition(t["topic"], p["partition"]) for t in described if t["topic"] in names for p in t["partitions"]
    ]
    if {tp.topic for tp in partitions} != set(names):
        raise TopicsMissingError("topic metadata incomplete")
    return sorted(partitions)


class DashboardReader:
    def __init__(
        self,
        *,
        bootstrap: str,
        state: DashboardState,
        topic_prefix: str = "",
        start: StartAt = "lookback",
        lookback_minutes: float = 30.0,
        client_id: str = "dashboard",
        clock: Callable[[], float] = time.time,
        retry_s: float = 2.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.state = state
        self.start = start
        self.lookback_ms = int(lookback_minutes * 60_000)
        self.client_id = client_id
        self.clock = clock
        self.retry_s = retry_s
        self.caught_up = asyncio.Event()
        self.records = 0
        self._base = {f"{topic_prefix}{t}": t for t in CONSUMED_TOPICS}
        self._positions: dict[TopicPartition, int] = {}  # next offset to read, kept across reconnects

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._run_once(stop)
            except (KafkaError, OSError, TopicsMissingError) as exc:
                self.state.set_reader(connected=False)
                self.state.set_error("reader", str(exc) or type(exc).__name__)
                log.warning("dashboard reader: %s; retrying in %.0fs", exc, self.retry_s)
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.retry_s)
                except TimeoutError:
                    pass

    async def _seek_start(self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
        fresh: list[TopicPartition] = []
        for tp in partitions:
            if tp in self._positions:
                consumer.seek(tp, self._positions[tp])
            else:
                fresh.append(tp)
        beginning = [tp for tp in fresh if self.start == "earliest" or self._base[tp.topic] in ALWAYS_FROM_START]
        rest = [tp for tp in fresh if tp not in beginning]
        if beginning:
            await consumer.seek_to_beginning(*beginning)
        if not rest:
            return
        if self.start == "latest":
            await consumer.seek_to_end(*rest)
            return
        since_ms = int(self.clock() * 1000) - self.lookback_ms
        found = await consumer.offsets_for_times({tp: since_ms for tp in rest})
        ends = await consumer.end_offsets(rest)
        for tp in rest:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])

    async def _run_once(self, stop: asyncio.Event) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, request_timeout_ms=10_000
        )
        try:
            await admin.start()
            partitions = await topic_partitions(admin, list(self._base))
        finally:
            await admin.close()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            client_id=self.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=2000,
        )
        try:
            await consumer.start()
            consumer.assign(partitions)
            await self._seek_start(consumer, partitions)
            targets: dict[TopicPartition, int] = {}
            if not self.caught_up.is_set():
                targets = await consumer.end_offsets(partitions)
            self.state.set_reader(connected=True)
            self.state.set_error("reader", None)
            log.info("dashboard reader: %d partitions assigned (start=%s)", len(partitions), self.start)
            idle_polls = 0
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=2000)
                idle_polls = 0 if batch else idle_polls + 1
                for records in batch.values():
                    for record in records:
                        self._apply(record)
                if batch:
                    await asyncio.sleep(0)  # let the web server answer between large batches
                if targets:
                    done = [await consumer.position(tp) >= end for tp, end in targets.items()]
                    if all(done) or idle_polls >= 5:  # control markers may leave an unreachable end offset
                        targets = {}
                if not targets and not self.caught_up.is_set():
                    self.caught_up.set()
                    self.state.set_reader(caught_up=True)
                    log.info("dashboard reader: caught up after %d records", self.records)
        finally:
            await consumer.stop()

    def _apply(self, record: ConsumerRecord[Any, Any]) -> None:
        base = self._base[record.topic]
        self.records += 1
        self._positions[TopicPartition(record.topic, record.partition)] = record.offset + 1
        if record.value is None:
            if record.key is not None:
                self.state.forget(base, record.key.decode("utf-8", "replace"))
            RECORDS.labels(base, "tombstone").inc()
            return
        try:
            value = decode(topic_spec(base).model, record.value)
        except ContractError as exc:
            self.state.bad(base, exc.message)
            RECORDS.labels(base, "bad").inc()
            log.warning("dashboard reader: skipping %s[%d]@%d: %s", record.topic, record.partition, record.offset,
                        exc.message)
            return
        self.state.apply(base, value, trace_id=trace_id_of(record.headers))
        RECORDS.labels(base, "ok").inc()
