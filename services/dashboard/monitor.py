"""Polls the broker for pipeline health: end offsets of every registry topic, and consumer lag per group.

Messages/s per topic is the slope of the summed end offsets (cheap: the dashboard never reads the
high-volume topics). Lag of a group is end offset minus committed offset, per partition it has
committed on, summed per topic — found through the admin client's `list_consumer_groups` and
`list_consumer_group_offsets`, so every service's group shows up without configuring any. Groups
that commit on none of this deployment's topics (other prefixes on a shared broker) are re-checked
only once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from contracts.topics import TOPICS
from services.dashboard.state import DashboardState
from services.runtime.kafka_security import kafka_client_options
from services.runtime.pause import pause
from services.runtime.topic_reader import TopicsMissingError, topic_partitions

log = logging.getLogger(__name__)
PARTITIONS_REFRESH_S = 30.0
IRRELEVANT_RECHECK_S = 60.0


class PipelineMonitor:
    def __init__(
        self,
        *,
        bootstrap: str,
        state: DashboardState,
        topic_prefix: str = "",
        interval_s: float = 2.0,
        client_id: str = "dashboard-monitor",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bootstrap = bootstrap
        self.state = state
        self.interval_s = interval_s
        self.client_id = client_id
        self.clock = clock
        self.polls = 0
        self._base = {f"{topic_prefix}{t.name}": t.name for t in TOPICS}
        self._irrelevant: dict[str, float] = {}  # group -> when to look at it again

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._run_once(stop)
            except (KafkaError, OSError, TopicsMissingError) as exc:
                self.state.set_error("monitor", str(exc) or type(exc).__name__)
                log.warning("dashboard monitor: %s; retrying", exc)
            await pause(stop, self.interval_s)

    async def _run_once(self, stop: asyncio.Event) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, **kafka_client_options(),
            client_id=self.client_id, request_timeout_ms=10_000
        )
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, **kafka_client_options(),
                                    group_id=None, client_id=self.client_id,
                                    enable_auto_commit=False)
        try:
            await admin.start()
            await consumer.start()
            partitions: list[TopicPartition] = []
            refreshed = 0.0
            while not stop.is_set():
                now = self.clock()
                if not partitions or now - refreshed > PARTITIONS_REFRESH_S:
                    partitions = await self._existing_partitions(admin)
                    refreshed = now
                await self.poll_once(admin, consumer, partitions)
                await pause(stop, self.interval_s)
        finally:
            await consumer.stop()
            await admin.close()

    async def _existing_partitions(self, admin: AIOKafkaAdminClient) -> list[TopicPartition]:
        existing = [t for t in await admin.list_topics() if t in self._base]
        if not existing:
            raise TopicsMissingError("none of the registry's topics exist yet")
        return await topic_partitions(admin, existing)

    async def poll_once(self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer,
                        partitions: list[TopicPartition]) -> None:
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        now_ms = int(self.clock() * 1000)
        totals: dict[str, int] = {}
        for tp, end in ends.items():
            base = self._base[tp.topic]
            totals[base] = totals.get(base, 0) + end
        self.state.record_offsets(now_ms, totals)
        self.state.record_lag(now_ms, await self._lags(admin, ends))
        if self.state.pipeline.reader.monitor_error is not None:
            self.state.set_error("monitor", None)
        self.polls += 1

    async def _lags(self, admin: AIOKafkaAdminClient, ends: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
        now = self.clock()
        lags: dict[str, dict[str, int]] = {}
        for entry in await admin.list_consumer_groups():
            group, protocol = str(entry[0]), str(entry[1]) if len(entry) > 1 else "consumer"
            if protocol not in ("consumer", "") or self._irrelevant.get(group, 0.0) > now:
                continue
            try:
                committed = await admin.list_consumer_group_offsets(group)
            except KafkaError as exc:
                log.debug("dashboard monitor: offsets of group %s: %s", group, exc)
                continue
            per_topic: dict[str, int] = {}
            for tp, meta in committed.items():
                if tp not in ends or meta is None or meta.offset < 0:
                    continue
                base = self._base[tp.topic]
                per_topic[base] = per_topic.get(base, 0) + max(0, ends[tp] - meta.offset)
            if per_topic:
                lags[group] = per_topic
                self._irrelevant.pop(group, None)
            else:
                self._irrelevant[group] = now + IRRELEVANT_RECHECK_S
        return lags
