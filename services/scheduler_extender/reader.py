"""Reads regimes.v1 / anomalies.v1 / risk.v1 from the beginning into the node state store.

No consumer group: every partition of the three compacted topics is assigned and read from the
start on every start-up (compaction keeps the latest value per key), nothing is committed. The
reader is *caught up* once it has reached the end offsets seen at start-up. It waits for the
topics to exist rather than subscribing to them, because subscribing to a missing topic makes a
broker with ``auto.create.topics.enable`` create it with the wrong (non-compacted) config.

A record that does not decode is skipped with a warning and counted; it is not dead-lettered,
because re-reading from the beginning on every restart would dead-letter it again each time
(the producing service already dead-letters its own bad inputs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client import Counter

from contracts import ContractError, decode
from contracts.topics import topic_spec
from services.scheduler_extender.state import STATE_TOPICS, NodeStateStore

log = logging.getLogger(__name__)
STATE_MESSAGES = Counter("borg_extender_state_messages_total", "State records read", ["topic", "outcome"])


class TopicsMissingError(Exception):
    """The state topics do not exist (yet)."""


@dataclass
class ReaderStats:
    records: int = 0
    applied: int = 0
    bad: int = 0
    restarts: int = 0


class StateReader:
    def __init__(
        self,
        *,
        bootstrap: str,
        store: NodeStateStore,
        topic_prefix: str = "",
        client_id: str = "scheduler-extender",
        clock: Callable[[], float] = time.time,
        retry_s: float = 2.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.store = store
        self.prefix = topic_prefix
        self.client_id = client_id
        self.clock = clock
        self.retry_s = retry_s
        self.stats = ReaderStats()
        self.caught_up = asyncio.Event()
        self._base = {f"{topic_prefix}{t}": t for t in STATE_TOPICS}

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; reconnects (re-reading from the beginning) after a Kafka failure."""
        while not stop.is_set():
            try:
                await self._run_once(stop)
            except (KafkaError, OSError, TopicsMissingError) as exc:
                self.stats.restarts += 1
                log.warning(
                    "state reader: %s; retrying in %.0fs (scores stay neutral for unknown nodes)", exc, self.retry_s
                )
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.retry_s)
                except TimeoutError:
                    pass

    async def _run_once(self, stop: asyncio.Event) -> None:
        partitions = await self._partitions()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            client_id=self.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=5000,
        )
        try:
            await consumer.start()
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            targets: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
            log.info("state reader: %d partitions, %d records to catch up", len(targets), sum(targets.values()))
            idle_polls = 0
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=5000)
                now_ms = int(self.clock() * 1000)
                idle_polls = 0 if batch else idle_polls + 1
                for records in batch.values():
                    for record in records:
                        self._apply(record, now_ms)
                if targets and not self.caught_up.is_set():
                    done = [await consumer.position(tp) >= end for tp, end in targets.items()]
                    # Safety net: offsets at the end that hold no record (control markers) may never be
                    # "reached"; five empty polls in a row also mean there is nothing left to read.
                    if all(done) or idle_polls >= 5:
                        targets = {}
                if not targets and not self.caught_up.is_set():
                    self.caught_up.set()
                    log.info("state reader: caught up (%d nodes held)", len(self.store))
        finally:
            await consumer.stop()

    async def _partitions(self) -> list[TopicPartition]:
        """Every partition of the three topics; raises TopicsMissingError (never creates a topic)."""
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, request_timeout_ms=10_000
        )
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            missing = sorted(t for t in self._base if t not in existing)
            if missing:
                raise TopicsMissingError(f"topics {', '.join(missing)} do not exist yet")
            described = await admin.describe_topics(list(self._base))
        finally:
            await admin.close()
        partitions = [
            TopicPartition(t["topic"], p["partition"])
            for t in described
            if t["topic"] in self._base
            for p in t["partitions"]
        ]
        if {tp.topic for tp in partitions} != set(self._base):
            raise TopicsMissingError("topic metadata incomplete")
        return sorted(partitions)

    def _apply(self, record: ConsumerRecord[Any, Any], now_ms: int) -> None:
        base = self._base[record.topic]
        self.stats.records += 1
        if record.value is None:  # tombstone on a compacted topic
            if record.key is not None:
                self.store.forget(base, record.key.decode("utf-8", "replace"), now_ms)
            STATE_MESSAGES.labels(base, "tombstone").inc()
            return
        try:
            value = decode(topic_spec(base).model, record.value)
        except ContractError as exc:
            self.stats.bad += 1
            STATE_MESSAGES.labels(base, "bad").inc()
            log.warning(
                "state reader: skipping %s[%d]@%d: %s", record.topic, record.partition, record.offset, exc.message
            )
            return
        if self.store.apply(value, now_ms) is not None:
            self.stats.applied += 1
            STATE_MESSAGES.labels(base, "applied").inc()
        else:
            STATE_MESSAGES.labels(base, "ignored").inc()
