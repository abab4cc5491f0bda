"""``Sink.flush`` with concurrent callers: each waits for every send made before it, none loses a failure.

The stream's committer and its batch loop (``STREAM_FLUSH_EACH_BATCH``) may flush at the same
time; the producer is replaced by a stand-in whose acknowledgements the test controls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.runtime.stream_io import Sink


class _Producer:
    def __init__(self) -> None:
        self.acks: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, **_: Any) -> asyncio.Future[Any]:
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack


async def _sink() -> tuple[Sink, _Producer]:
    sink = Sink(bootstrap="127.0.0.1:1", service="t", topic_prefix="")
    producer = _Producer()
    sink._producer = producer  # type: ignore[assignment]
    return sink, producer


async def test_a_later_flush_also_waits_for_sends_an_earlier_flush_is_waiting_for() -> None:
    sink, producer = await _sink()
    await sink.changelog("c", 0, b"k", b"1")
    first = asyncio.create_task(sink.flush())
    await asyncio.sleep(0)
    await sink.changelog("c", 0, b"k", b"2")
    second = asyncio.create_task(sink.flush())
    producer.acks[1].set_result(None)  # the later send is acknowledged first
    await asyncio.sleep(0.01)
    assert not second.done(), "the second flush returned while an earlier send was unacknowledged"
    producer.acks[0].set_result(None)
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    assert sink._pending == []


async def test_a_send_failing_during_another_flush_is_reported_by_the_next() -> None:
    sink, producer = await _sink()
    await sink.changelog("c", 0, b"k", b"1")
    flushing = asyncio.create_task(sink.flush())
    await asyncio.sleep(0)
    await sink.changelog("c", 0, b"k", b"2")
    producer.acks[1].set_exception(OSError("refused"))
    producer.acks[0].set_result(None)
    await asyncio.wait_for(flushing, 1)  # it waited only for the first send
    with pytest.raises(OSError, match="refused"):
        await sink.flush()
    with pytest.raises(OSError, match="refused"):
        await sink.flush()  # still reported: a failure is never dropped silently
