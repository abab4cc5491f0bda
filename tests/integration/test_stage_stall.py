"""A stage whose input waits while nothing is committed stops itself, to be restarted (real broker)."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.batch_stream import Batch, BatchStream, StageStalledError
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import StreamSettings
from tests.kafka_helpers import produce_raw

pytestmark = [pytest.mark.integration]


async def test_a_stuck_stage_stops_with_the_reason(kafka_bootstrap: str, topic_prefix: str) -> None:
    await produce_raw(kafka_bootstrap, f"{topic_prefix}nodestate.v1", [(b"k", b"x")] * 20)
    settings = StreamSettings(KAFKA_BOOTSTRAP=kafka_bootstrap, BORG_TOPIC_PREFIX=topic_prefix,  # type: ignore[call-arg]
                              HEALTH_STALL_AFTER_S=2, STREAM_BATCH_MAX=5, STREAM_COMMIT_INTERVAL_S=0.2)
    handled = 0
    stuck = asyncio.Event()

    async def handle(batch: Batch) -> None:
        nonlocal handled
        handled += sum(map(len, batch.values()))
        if handled >= 10:
            await stuck.wait()  # e.g. a producer that never gets a leader: never set

    async with Sink(bootstrap=kafka_bootstrap, service="stall", topic_prefix=topic_prefix) as sink:
        stream = BatchStream(service="stall", settings=settings, sink=sink, topics=["nodestate.v1"], handle=handle)
        with pytest.raises(StageStalledError, match=r"input lag .* and no offset commit"):
            await asyncio.wait_for(stream.run(asyncio.Event()), timeout=60)
    assert 10 <= handled < 20


async def test_an_idle_stage_is_not_stalled(kafka_bootstrap: str, topic_prefix: str) -> None:
    settings = StreamSettings(KAFKA_BOOTSTRAP=kafka_bootstrap, BORG_TOPIC_PREFIX=topic_prefix,  # type: ignore[call-arg]
                              HEALTH_STALL_AFTER_S=1)

    async def handle(batch: Batch) -> None:
        del batch

    stop = asyncio.Event()
    async with Sink(bootstrap=kafka_bootstrap, service="idle", topic_prefix=topic_prefix) as sink:
        stream = BatchStream(service="idle", settings=settings, sink=sink, topics=["nodestate.v1"], handle=handle)
        task = asyncio.create_task(stream.run(stop))
        await asyncio.wait_for(stream.ready.wait(), timeout=30)
        await asyncio.sleep(4)  # four stall periods with no input: a bounded observation window, not a wait
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, timeout=30)
