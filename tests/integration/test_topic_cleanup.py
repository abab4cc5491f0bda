"""A bench's or test's topics are gone from the broker's disk when ``delete_topics`` returns, not a
minute later (``file.delete.delay.ms``): back-to-back pipeline benches otherwise paid for deleting
the previous run's gigabytes in the middle of their step (real broker, its data directory read from
the ``server.properties`` that infra/kafka/kafka.sh wrote)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from borgctl.paths import state_dir
from contracts.topics import Topic
from loadtests.procs import delete_topics
from services.runtime.admin import create_topics

pytestmark = [pytest.mark.integration]


def _data_dir() -> Path:
    props = state_dir() / "kafka" / "server.properties"
    if not props.is_file():
        pytest.fail(f"{props} missing: the local broker was not started by infra/kafka/kafka.sh")
    for line in props.read_text().splitlines():
        if line.startswith("log.dirs="):
            return Path(line.split("=", 1)[1].strip())
    pytest.fail(f"{props} names no log.dirs")


async def test_deleted_topics_leave_the_disk_within_seconds(kafka_bootstrap: str) -> None:
    data = _data_dir()
    prefix = f"t{uuid.uuid4().hex[:10]}-"
    await create_topics(kafka_bootstrap, prefix=prefix)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(prefix + Topic.NODESTATE, b"x" * 1000, key=b"n")
    finally:
        await producer.stop()
    assert any(p.name.startswith(prefix) for p in data.iterdir()), "the topics' directories should exist"

    assert await delete_topics(kafka_bootstrap, prefix) > 0
    # 1 s after the deletion, but a broker started less than 30 s ago runs its first deletion round only
    # then (Kafka's initial task delay); either way well below the 60 s a broker without the setting waits
    deadline = time.monotonic() + 40
    left = [p.name for p in data.iterdir() if p.name.startswith(prefix)]
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        left = [p.name for p in data.iterdir() if p.name.startswith(prefix)]
    assert not left, f"still on disk 40 s after deletion: {left[:3]}"
