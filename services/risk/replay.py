"""Rebuilding the in-memory task history by replaying taskevents.v1 up to the committed offsets.

Runs before the processor consumes: every event the group has already committed is read
from the start of the topic (bounded by the topic's retention), ordered by event time and
fed to the history without producing anything. The consumer then resumes at the committed
offsets, so each event shapes the state exactly once and outputs after the last commit
are produced again (same keys; at-least-once).
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from contracts import ContractError, TaskEvent, decode
from services.risk.state import RiskState, event_time_us
from services.runtime.admin import describe_topics
from services.runtime.kafka_security import kafka_client_options

log = logging.getLogger(__name__)


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of ``topic`` (partitions without a commit omitted)."""
    described = await describe_topics(bootstrap, [topic])
    if topic not in described:
        return {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        out: dict[int, int] = {}
        for p in range(described[topic].partitions):
            offset = await consumer.committed(TopicPartition(topic, p))
            if offset:
                out[p] = offset
        return out
    finally:
        await consumer.stop()


async def rebuild_history(bootstrap: str, group: str, topic: str, state: RiskState) -> int:
    """Feed every committed task event to ``state``; returns how many were replayed."""
    targets = await committed_offsets(bootstrap, group, topic)
    if not targets:
        log.info("no committed offsets for %s on %s: nothing to rebuild", group, topic)
        return 0
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    events: list[tuple[int, int, int, TaskEvent]] = []
    try:
        tps = [TopicPartition(topic, p) for p in targets]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        remaining = {tp for tp in tps if await consumer.position(tp) < targets[tp.partition]}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset >= targets[tp.partition]:
                        break
                    try:
                        ev = decode(TaskEvent, record.value)
                    except ContractError:
                        continue  # dead-lettered when it was first consumed
                    events.append((event_time_us(ev), tp.partition, record.offset, ev))
            for tp in list(remaining):
                if await consumer.position(tp) >= targets[tp.partition]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    for _, _, _, ev in events:
        try:
            state.observe(ev)
        except Exception as exc:  # an event the history rejected the first time too
            log.debug("replay skipped %s: %s", ev.task_id, exc)
    log.info("rebuilt task history from %d committed events (%d running tasks)", len(events), len(state.running))
    return len(events)
