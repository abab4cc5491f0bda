"""lag_reporter's rules on a scripted consumer: fallbacks, partial rounds, errors, revocation, stop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError, KafkaTimeoutError
from prometheus_client import REGISTRY

from services.runtime.lag import lag_reporter
from tests.conftest import wait_until

A = TopicPartition("lagunit-a", 0)
B = TopicPartition("lagunit-a", 1)


def _gauge(tp: TopicPartition) -> float | None:
    value: float | None = REGISTRY.get_sample_value("borg_consumer_lag",
                                                    {"topic": tp.topic, "partition": str(tp.partition)})
    return value


class Scripted:
    """The four consumer calls the reporter makes, each answering what the test set."""

    def __init__(self) -> None:
        self.assigned = {A, B}
        self.positions = {A: 5, B: 7}
        self.ends: dict[TopicPartition, int] | Exception = {A: 9, B: 7}
        self.highs: dict[TopicPartition, int] = {}
        self.position_error: Exception | None = None
        self.assignment_error: Exception | None = None
        self.rounds = 0

    def assignment(self) -> set[TopicPartition]:
        self.rounds += 1
        if self.assignment_error is not None:
            raise self.assignment_error
        return set(self.assigned)

    async def position(self, tp: TopicPartition) -> int:
        if self.position_error is not None and tp == B:
            raise self.position_error
        return self.positions[tp]

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.highs.get(tp)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if isinstance(self.ends, Exception):
            raise self.ends
        return {tp: self.ends[tp] for tp in tps}


async def _run(consumer: Any, totals: list[int]) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(lag_reporter(consumer, stop, interval_s=0.01, on_total=totals.append))


async def _rounds(consumer: Scripted, n: int) -> None:
    start = consumer.rounds
    await wait_until(lambda: consumer.rounds >= start + n, timeout=5, what=f"{n} more rounds")


async def test_lag_per_partition_total_and_stop() -> None:
    consumer, totals = Scripted(), list[int]()
    stop, task = await _run(consumer, totals)
    await wait_until(lambda: totals, timeout=5, what="a first total")
    assert totals[-1] == 4 and (_gauge(A), _gauge(B)) == (4.0, 0.0)
    consumer.positions[A] = 9
    await wait_until(lambda: totals[-1] == 0, timeout=5, what="caught up")
    stop.set()
    await asyncio.wait_for(task, timeout=5)


async def test_end_offsets_failing_falls_back_to_highwater_then_skips_unknown() -> None:
    consumer, totals = Scripted(), list[int]()
    consumer.ends = KafkaTimeoutError()
    consumer.highs = {A: 15, B: 8}
    stop, task = await _run(consumer, totals)
    await wait_until(lambda: totals, timeout=5, what="a total from high-water marks")
    assert totals[-1] == 11
    consumer.highs = {A: 15}  # B has no high-water mark yet: no total (it would understate)
    await _rounds(consumer, 2)  # the round under way when it changed has ended
    n = len(totals)
    await _rounds(consumer, 3)
    assert len(totals) == n
    assert _gauge(A) == 10.0
    stop.set()
    await asyncio.wait_for(task, timeout=5)


async def test_errors_never_end_it_and_revoked_partitions_lose_their_gauge(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="services.runtime.lag")
    consumer, totals = Scripted(), list[int]()
    stop, task = await _run(consumer, totals)
    await wait_until(lambda: totals, timeout=5, what="a first total")
    consumer.position_error = IllegalStateError("not assigned")
    await _rounds(consumer, 2)
    n = len(totals)
    await _rounds(consumer, 3)
    assert len(totals) == n  # partial rounds give no total
    consumer.assignment_error = RuntimeError("a bug")
    await _rounds(consumer, 3)
    assert not task.done()
    assert any(r.levelno == logging.WARNING and "failed this round" in r.getMessage() for r in caplog.records)
    consumer.assignment_error = None
    consumer.position_error = None
    consumer.assigned = {A}  # B revoked
    await _rounds(consumer, 2)
    assert _gauge(B) is None and _gauge(A) == 4.0
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert task.exception() is None
