"""An independent client (kcat) produces garbage; the runtime dead-letters it with bytes and offset."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import uuid

import pytest

from contracts import DeadLetterV2, decode
from services.runtime.worker import Incoming, Outgoing, StreamWorker
from tests.conftest import wait_until
from tests.kafka_helpers import consume

pytestmark = pytest.mark.integration


def kcat(*args: str, stdin: bytes | None = None) -> str:
    exe = shutil.which("kcat")
    assert exe, "kcat is required (scripts/ensure-system.sh installs it)"
    done = subprocess.run([exe, *args], input=stdin, capture_output=True, check=True, timeout=30)
    return done.stdout.decode()


async def test_kcat_lists_topics_and_garbage_lands_in_deadletter(kafka_bootstrap: str, topic_prefix: str) -> None:
    listing = kcat("-b", kafka_bootstrap, "-L")
    assert f'topic "{topic_prefix}nodestate.v1" with 6 partitions' in listing
    topic = f"{topic_prefix}taskevents.v1"
    garbage = b"this is not json \x00\x01"
    kcat("-b", kafka_bootstrap, "-P", "-t", topic, "-p", "2", "-k", "task-1", stdin=garbage)


    async def handle(_: Incoming) -> list[Outgoing]:
        return []

    worker = StreamWorker(
        service="kcat-test",
        bootstrap=kafka_bootstrap,
        group_id=f"g-{uuid.uuid4().hex}",
        input_topics=["taskevents.v1"],
        handler=handle,
        topic_prefix=topic_prefix,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await wait_until(lambda: worker.stats.dead_lettered == 1, what="one dead letter")
    finally:
        stop.set()
        await task
    [record] = await consume(kafka_bootstrap, f"{topic_prefix}deadletter.v2", 1)
    letter = decode(DeadLetterV2, record.value)
    assert (letter.source_topic, letter.partition, letter.offset) == (topic, 2, 0)
    assert letter.value is not None and base64.b64decode(letter.value.b64) == garbage
    assert not letter.value.truncated and letter.value.size == len(garbage)
    assert letter.key is not None and base64.b64decode(letter.key.b64) == b"task-1"
    assert letter.error_kind == "malformed"
    # kcat, too, reads the dead letter back.
    out = kcat("-b", kafka_bootstrap, "-C", "-t", f"{topic_prefix}deadletter.v2", "-c", "1", "-e", "-f", "%s")
    assert '"error_kind":"malformed"' in out
