"""Reads regimes.v2 / anomalies.v1 / risk.v2 / forecasts.v1 from the beginning into the node state store,
and actions.v1 for the decisions later placements link to.

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
from typing import Any

from aiokafka import ConsumerRecord
from prometheus_client import Counter

from contracts import ContractError, decode
from contracts.models import ActionResult
from contracts.topics import topic_spec
from services.runtime.topic_reader import Outcome, ReaderStats, TopicReader, TopicsMissingError
from services.scheduler_extender.state import ACTIONS_TOPIC, STATE_TOPICS, NodeStateStore

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
    ) -> None:
        self.store = store
        self._reader = TopicReader(
            bootstrap=bootstrap,
            topics=[*STATE_TOPICS, ACTIONS_TOPIC],
            apply=self._apply,
            topic_prefix=topic_prefix,
            client_id=client_id,
            retry_s=retry_s,
            clock=clock,
        )
        self.stats: ReaderStats = self._reader.stats
        self.caught_up: asyncio.Event = self._reader.caught_up

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; reconnects (re-reading from the beginning) after a Kafka failure."""
        await self._reader.run(stop)

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
        if isinstance(value, ActionResult):  # a decision carried out: later placements link it
            kept = self.store.note_action(value, traceparent)
            STATE_MESSAGES.labels(base, "applied" if kept else "ignored").inc()
            return "applied" if kept else "ignored"
        if self.store.apply(value, now_ms, traceparent) is not None:
            STATE_MESSAGES.labels(base, "applied").inc()
            return "applied"
        STATE_MESSAGES.labels(base, "ignored").inc()
        return "ignored"
