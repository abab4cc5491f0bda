"""After a crash, the dead letters a service wrote past its committed offsets are read back (real broker)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from services.runtime.recovery import read_back_dead_letters
from services.runtime.stream_io import Sink

pytestmark = [pytest.mark.integration]


@dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes = b"k"
    value: bytes = b"not json"
    headers: list[tuple[str, bytes]] = field(default_factory=list)


async def test_read_back_finds_own_letters_past_the_committed_offset(kafka_bootstrap: str, topic_prefix: str) -> None:
    since = int(time.time() * 1000)
    source = f"{topic_prefix}nodestate.v1"
    async with Sink(bootstrap=kafka_bootstrap, service="svc-a", topic_prefix=topic_prefix) as sink:
        for partition, offset in ((0, 3), (0, 5), (0, 9), (1, 2), (2, 7)):
            await sink.dead_letter_record(_Record(source, partition, offset), "bad", "schema")
    async with Sink(bootstrap=kafka_bootstrap, service="svc-b", topic_prefix=topic_prefix) as other:
        await other.dead_letter_record(_Record(source, 0, 11), "bad", "schema")
    found = await read_back_dead_letters(
        kafka_bootstrap, f"{topic_prefix}deadletter.v2", service="svc-a", since_ms=since,
        from_offsets={(source, 0): 4, (source, 1): 0})
    # partition 2 is not this start's; offset 3 was committed; svc-b's letter is not svc-a's
    assert found == {(source, 0, 5), (source, 0, 9), (source, 1, 2)}


async def test_a_missing_topic_reads_back_nothing(kafka_bootstrap: str, topic_prefix: str) -> None:
    found = await read_back_dead_letters(kafka_bootstrap, f"{topic_prefix}no-such-topic", service="svc",
                                         since_ms=int(time.time() * 1000), from_offsets={("t", 0): 0})
    assert found == set()
