"""Reads regimes.v2 / anomalies.v1 / risk.v2 / forecasts.v1 from the beginning into the node state store,
and actions.v1 for the decisions later placements link to. With the load term, podpressure.v1 too: a stream
(one record per pod and window, kept 6 h), so it is read only from ``pressure_lookback_ms`` before start-up
(older estimates are stale anyway) and handed to ``on_pressure``.

Runs on the shared `TopicReader` (services/runtime/topic_reader.py): no consumer group, every
partition read from the beginning on every start (compaction keeps the latest value per key),
caught up at the end offsets seen at start-up, reconnects after Kafka errors, never subscribes to a
missing topic. This module only decodes and applies records.

A record that does not decode is skipped and counted; it is not dead-lettered, because re-reading
from the beginning on every restart would dead-letter it again each time (the producing service
already dead-letters its own bad inputs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from prometheus_client import Counter

from contracts import ContractError, decode
from contracts.models import ActionResult, PodPressure
from contracts.topics import Topic, topic_spec
from services.runtime.topic_reader import Outcome, ReaderStats, TopicReader, TopicsMissingError, seek_since
from services.scheduler_extender.state import ACTIONS_TOPIC, STATE_TOPICS, NodeStateStore

if TYPE_CHECKING:
    from services.scheduler_extender.residents import LoadFollower

STATE_MESSAGES = Counter("borg_extender_state_messages_total", "State records read", ["topic", "outcome"])

__all__ = ["STATE_MESSAGES", "ReaderStats", "StateReader", "TopicsMissingError"]


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
        on_pressure: Callable[[PodPressure], object] | None = None,
        pressure_lookback_ms: int = 60_000,
    ) -> None:
        self.store = store
        self.on_pressure = on_pressure
        self.loads: LoadFollower | None = None  # the load term's follower behind ``on_pressure`` (main.build)
        self.pressure_lookback_ms = pressure_lookback_ms
        self.clock = clock
        self._reader = TopicReader(
            bootstrap=bootstrap,
            topics=[*STATE_TOPICS, ACTIONS_TOPIC, *([Topic.PODPRESSURE] if on_pressure is not None else [])],
            apply=self._apply,
            topic_prefix=topic_prefix,
            client_id=client_id,
            retry_s=retry_s,
            clock=clock,
            start=self._seek_start,
        )
        self.stats: ReaderStats = self._reader.stats
        self.caught_up: asyncio.Event = self._reader.caught_up

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; reconnects (re-reading from the beginning) after a Kafka failure."""
        await self._reader.run(stop)

    async def _seek_start(self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
        stream = [tp for tp in partitions if self._reader.base[tp.topic] == Topic.PODPRESSURE]
        state = [tp for tp in partitions if tp not in stream]
        if state:
            await consumer.seek_to_beginning(*state)
        if stream:
            await seek_since(consumer, stream, int(self.clock() * 1000) - self.pressure_lookback_ms)

    def _apply(self, base: str, record: ConsumerRecord[Any, Any], now_ms: int) -> Outcome:
        if record.value is None:  # tombstone on a compacted topic
            if record.key is not None:
                self.store.forget(base, record.key.decode("utf-8", "replace"), now_ms)
            STATE_MESSAGES.labels(base, "tombstone").inc()
            return "ignored"
        try:
            value = decode(topic_spec(base).model, record.value)
        except ContractError:
            STATE_MESSAGES.labels(base, "bad").inc()
            return "bad"
        traceparent = next((v for k, v in record.headers or () if k == "traceparent"), None)
        if isinstance(value, PodPressure):
            if self.on_pressure is None:
                return "ignored"
            self.on_pressure(value)
            STATE_MESSAGES.labels(base, "applied").inc()
            return "applied"
        if isinstance(value, ActionResult):  # a decision carried out: later placements link it
            kept = self.store.note_action(value, traceparent)
            STATE_MESSAGES.labels(base, "applied" if kept else "ignored").inc()
            return "applied" if kept else "ignored"
        if self.store.apply(value, now_ms, traceparent) is not None:
            STATE_MESSAGES.labels(base, "applied").inc()
            return "applied"
        STATE_MESSAGES.labels(base, "ignored").inc()
        return "ignored"
