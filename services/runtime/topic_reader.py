"""The one reader for topics a service folds into in-memory state (dashboard, scheduler extender).

No consumer group and nothing committed: every partition of the topics is assigned directly and
read from the start policy's offsets (default: the beginning; compaction keeps the latest value
per key). The reader is *caught up* once it has reached the end offsets seen when it first
connected, then keeps tailing. It waits for the topics to exist instead of subscribing, because
subscribing to a missing topic makes a broker with ``auto.create.topics.enable`` create it with the
wrong (non-compacted) configuration.

No record can stop it: `apply` returns "bad" for a record it cannot use, and an exception raised by
`apply` is counted as bad too; the reader logs the first and then every `LOG_EVERY`-th bad record
and keeps going. Bad records are deliberately *not* dead-lettered: a reader that re-reads from the
beginning on every start would dead-letter the same record again each time (the producing
service already dead-letters its own bad inputs). After a Kafka error it reconnects after
`retry_s`; with ``resume=True`` it continues where it stopped (nothing applied twice), otherwise
it re-reads from the start policy's offsets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import ConsumerStoppedError, KafkaError

from services.runtime.kafka_security import kafka_client_options
from services.runtime.pause import pause

log = logging.getLogger(__name__)
LOG_EVERY = 1000
IDLE_POLLS_CAUGHT_UP = 5

Outcome = Literal["applied", "ignored", "bad"]
Apply = Callable[[str, "ConsumerRecord[Any, Any]", int], Outcome]
# (consumer, partitions to position) -> seeks them; only called for partitions not yet read.
StartPolicy = Callable[[AIOKafkaConsumer, list[TopicPartition]], Awaitable[None]]


class TopicsMissingError(Exception):
    """The topics do not exist (yet)."""


@dataclass
class ReaderStats:
    records: int = 0
    applied: int = 0
    bad: int = 0
    restarts: int = 0


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


async def from_beginning(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
    await consumer.seek_to_beginning(*partitions)


async def seek_since(consumer: AIOKafkaConsumer, partitions: list[TopicPartition], since_ms: int) -> None:
    """Each partition at its first record timestamped ``since_ms`` or later (none: its end)."""
    found = await consumer.offsets_for_times({tp: since_ms for tp in partitions})
    ends = await consumer.end_offsets(partitions)
    for tp in partitions:
        hit = found.get(tp)
        consumer.seek(tp, hit.offset if hit is not None else ends[tp])


def _ignore(*_: object) -> None:
    return None


class TopicReader:
    def __init__(
        self,
        *,
        bootstrap: str,
        topics: list[str],
        apply: Apply,
        topic_prefix: str = "",
        client_id: str = "topic-reader",
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        start: StartPolicy = from_beginning,
        resume: bool = False,
        max_records: int = 5000,
        on_connected: Callable[[], None] = _ignore,
        on_error: Callable[[BaseException], None] = _ignore,
        on_caught_up: Callable[[], None] = _ignore,
    ) -> None:
        self.bootstrap = bootstrap
        self.apply = apply
        self.client_id = client_id
        self.retry_s = retry_s
        self.clock = clock
        self.start = start
        self.resume = resume
        self.max_records = max_records
        self.on_connected = on_connected
        self.on_error = on_error
        self.on_caught_up = on_caught_up
        self.stats = ReaderStats()
        self.caught_up = asyncio.Event()
        self.base = {f"{topic_prefix}{t}": t for t in topics}  # full topic name -> registry name
        self._positions: dict[TopicPartition, int] = {}  # next offset to read (only with resume)
        self._next: dict[TopicPartition, int] = {}  # next offset to read in this connection
        self._consumer: AIOKafkaConsumer | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; reconnects after a Kafka failure or missing topics."""
        while not stop.is_set():
            try:
                await self._run_once(stop)
            # ConsumerStoppedError: the consumer was closed under us (e.g. by a shutdown hook); reconnect.
            except (KafkaError, OSError, TopicsMissingError, ConsumerStoppedError) as exc:
                self.stats.restarts += 1
                self.on_error(exc)
                log.warning(
                    "%s reader: %s; retrying in %.1fs", self.client_id, str(exc) or type(exc).__name__, self.retry_s
                )
                await pause(stop, self.retry_s)

    async def _partitions(self) -> list[TopicPartition]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, **kafka_client_options(),
            client_id=self.client_id, request_timeout_ms=10_000
        )
        try:
            await admin.start()
            return await topic_partitions(admin, list(self.base))
        finally:
            await admin.close()

    async def _run_once(self, stop: asyncio.Event) -> None:
        partitions = await self._partitions()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, **kafka_client_options(),
            group_id=None,
            client_id=self.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=self.max_records,
        )
        self._consumer = consumer
        try:
            await consumer.start()
            consumer.assign(partitions)
            self._next = dict(self._positions)
            fresh = [tp for tp in partitions if tp not in self._positions]
            for tp in partitions:
                if tp in self._positions:
                    consumer.seek(tp, self._positions[tp])
            if fresh:
                await self.start(consumer, fresh)
            targets: dict[TopicPartition, int] = {}
            if not self.caught_up.is_set():
                targets = await consumer.end_offsets(partitions)
            self.on_connected()
            log.info("%s reader: %d partitions assigned", self.client_id, len(partitions))
            idle_polls = 0
            while not stop.is_set():
                try:
                    batch = await consumer.getmany(timeout_ms=200, max_records=self.max_records)
                except UnicodeDecodeError as exc:
                    await self._step_over_unreadable(consumer, partitions, exc)
                    continue
                idle_polls = 0 if batch else idle_polls + 1
                self._apply_batch(batch)
                if batch:
                    await asyncio.sleep(0)  # let the service's web server answer between large batches
                if targets:
                    done = [await consumer.position(tp) >= end for tp, end in targets.items()]
                    # Offsets at the end that hold no record (transaction markers) may never be
                    # "reached"; several empty polls in a row also mean there is nothing left to read.
                    if all(done) or idle_polls >= IDLE_POLLS_CAUGHT_UP:
                        targets = {}
                if not targets and not self.caught_up.is_set():
                    self.caught_up.set()
                    self.on_caught_up()
                    log.info("%s reader: caught up after %d records", self.client_id, self.stats.records)
        finally:
            self._consumer = None
            await consumer.stop()

    async def _step_over_unreadable(self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition],
                                    exc: UnicodeDecodeError) -> None:
        """A record the client cannot unpack (a header name that is not UTF-8) makes every ``getmany`` raise.

        Each partition goes back to the record after the last one applied (the failed call may have
        moved positions past records it never returned), then is read one record at a time up to
        ``max_records``; the read that fails names the record, which is counted bad and stepped over.
        """
        log.warning("%s reader: the Kafka client could not unpack a fetched batch (%s): reading record by record",
                    self.client_id, exc)
        for tp in partitions:
            if tp in self._next:
                consumer.seek(tp, self._next[tp])
        for tp in partitions:
            for _ in range(self.max_records):
                try:
                    got = await consumer.getmany(tp, timeout_ms=200, max_records=1)
                except UnicodeDecodeError:
                    offset = await consumer.position(tp)
                    self.stats.records += 1
                    self.stats.bad += 1
                    log.warning("%s reader: skipping %s[%d]@%d (the client cannot unpack it)", self.client_id,
                                tp.topic, tp.partition, offset)
                    consumer.seek(tp, offset + 1)
                    self._next[tp] = offset + 1
                    if self.resume:
                        self._positions[tp] = offset + 1
                    continue
                if not got:
                    break
                self._apply_batch(got)

    def _apply_batch(self, batch: dict[TopicPartition, list[ConsumerRecord[Any, Any]]]) -> None:
        now_ms = int(self.clock() * 1000)
        for tp, records in batch.items():
            for record in records:
                self._apply(record, now_ms)
            # where to go back to (a record the client cannot unpack) or resume from (a reconnect)
            self._next[tp] = records[-1].offset + 1
            if self.resume:
                self._positions[tp] = records[-1].offset + 1

    def _apply(self, record: ConsumerRecord[Any, Any], now_ms: int) -> None:
        self.stats.records += 1
        base = self.base[record.topic]
        try:
            outcome = self.apply(base, record, now_ms)
            reason = "not usable"
        except Exception as exc:  # no record may stop the reader
            outcome, reason = "bad", f"{type(exc).__name__}: {exc}"
        if outcome == "applied":
            self.stats.applied += 1
        elif outcome == "bad":
            self.stats.bad += 1
            if self.stats.bad % LOG_EVERY == 1 or LOG_EVERY == 1:
                log.warning(
                    "%s reader: skipping %s[%d]@%d (%s; %d bad so far)",
                    self.client_id, record.topic, record.partition, record.offset, reason, self.stats.bad,
                )
