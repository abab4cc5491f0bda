"""The shared runtime against the real broker: dead letters, trace continuation, crash safety."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from contracts import AnomalyScore, DeadLetterV2, NodeState, decode, encode
from contracts.headers import build_headers, trace_id_of
from services.runtime.deadletter import original_value
from services.runtime.worker import Incoming, Outgoing, StreamWorker
from tests.conftest import ROOT, wait_until
from tests.kafka_helpers import consume, drain, produce_raw

pytestmark = pytest.mark.integration
TS = 1_764_000_000_000


def state(node: str, seq: int) -> NodeState:
    return NodeState(
        node=node,
        ts_ms=TS + seq * 1000,
        seq=seq,
        interval_ms=1000,
        source="synthetic",
        pmu="recorded",
        supported_events=[],
        cpu_util=0.3,
        mem_util=0.4,
    )


async def test_valid_handled_invalid_dead_lettered_with_offsets(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}nodestate.v1"
    traceparent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    good = [(b"n1", encode(state("n1", i))) for i in range(5)]
    bad_json = (b"n1", b'{"node": "n1", "ts_ms": ')
    bad_schema = (b"n1", orjson.dumps({**orjson.loads(encode(state("n1", 99))), "cpu_util": 7}))
    # One partition key so offsets are in produce order.
    await produce_raw(
        kafka_bootstrap,
        topic,
        [*good[:2], bad_json, *good[2:4], bad_schema, good[4]],
        headers=[("traceparent", traceparent)],
    )

    handled: list[int] = []

    async def handle(msg: Incoming) -> list[Outgoing]:
        assert isinstance(msg.value, NodeState)
        handled.append(msg.value.seq)
        score = AnomalyScore(
            node=msg.value.node,
            ts_ms=msg.value.ts_ms,
            score=0.2,
            is_anomaly=False,
            threshold=0.5,
            model_version="t",
            input_ts_ms=msg.value.ts_ms,
        )
        return [Outgoing("anomalies.v1", msg.value.node, score)]

    worker = StreamWorker(
        service="t",
        bootstrap=kafka_bootstrap,
        group_id=f"g-{uuid.uuid4().hex}",
        input_topics=["nodestate.v1"],
        handler=handle,
        topic_prefix=topic_prefix,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await wait_until(
            lambda: worker.stats.handled == 5 and worker.stats.dead_lettered == 2, what="5 handled, 2 dead"
        )
    finally:
        stop.set()
        await task
    assert handled == [0, 1, 2, 3, 4]

    letters = [decode(DeadLetterV2, r.value) for r in await consume(kafka_bootstrap, f"{topic_prefix}deadletter.v2", 2)]
    by_offset = {letter.offset: letter for letter in letters}
    assert sorted(by_offset) == [2, 5]
    assert by_offset[2].error_kind == "malformed"
    assert original_value(by_offset[2]) == bad_json[1]
    assert by_offset[5].error_kind == "schema" and "cpu_util" in by_offset[5].error
    assert original_value(by_offset[5]) == bad_schema[1]
    assert all(letter.source_topic == topic and letter.partition >= 0 for letter in letters)

    outputs = await consume(kafka_bootstrap, f"{topic_prefix}anomalies.v1", 5)
    for record in outputs:
        # The output continues the input's trace.
        assert trace_id_of(record.headers) == "0af7651916cd43dd8448eb211c80319c"
        assert dict(record.headers)["schema"] == b"anomalies.v1"


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {
        tp.partition: meta.offset
        for tp, meta in offsets.items()
        if isinstance(tp, TopicPartition) and tp.topic == topic
    }


def _spawn(bootstrap: str, prefix: str, group: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.worker_process", bootstrap, prefix, group, str(log)],
        cwd=ROOT,
        # the killed worker's session (the smallest the settings accept) is what the second one waits out
        env={**os.environ, "PYTHONPATH": str(ROOT), "STREAM_SESSION_TIMEOUT_S": "6"},
    )


def _lines(log: Path) -> list[tuple[int, int]]:
    if not log.exists():
        return []
    return [(int(p), int(o)) for p, o, *_ in (line.split() for line in log.read_text().splitlines() if line)]


async def test_killed_consumer_loses_nothing_and_repeats_nothing_committed(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}nodestate.v1"
    total = 400
    await produce_raw(
        kafka_bootstrap,
        topic,
        [(f"n{i % 8}".encode(), encode(state(f"n{i % 8}", i))) for i in range(total)],
        headers=build_headers("nodestate.v1"),
    )
    group = f"g-{uuid.uuid4().hex}"
    log = tmp_path / "handled.log"

    first = _spawn(kafka_bootstrap, topic_prefix, group, log)
    try:
        await wait_until(lambda: len(_lines(log)) >= 120, timeout=60, what="first worker to handle 120")
        first.send_signal(signal.SIGKILL)  # a crash: no chance to commit the batch in flight
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    before_kill = _lines(log)
    committed = await _committed(kafka_bootstrap, group, topic)
    assert committed, "the first worker committed nothing before being killed"

    second = _spawn(kafka_bootstrap, topic_prefix, group, log)

    async def all_committed() -> bool:
        # not "every offset in the log": the killed worker logged records it never committed (nor
        # flushed the outputs of); the second worker is done when the group's offsets reach the ends
        done = await _committed(kafka_bootstrap, group, topic)
        return sum(done.values()) >= total

    try:
        await wait_until(all_committed, timeout=90, interval=0.5, what="every offset handled and committed")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    assert second.returncode == 0, "graceful SIGTERM should exit cleanly"

    after = _lines(log)[len(before_kill) :]
    assert len({*before_kill, *after}) == total  # nothing lost
    repeated = set(before_kill) & set(after)
    for partition, offset in repeated:
        # Only messages that had not been committed may be handled again.
        assert offset >= committed.get(partition, 0), f"committed offset {partition}@{offset} handled twice"
    # every input is committed, so every output is on the topic (a commit waits for the outputs' acks); read
    # them all: inputs handled again after the kill add duplicates, so the first `total` could stop short
    outputs = await drain(kafka_bootstrap, f"{topic_prefix}anomalies.v1")
    assert {decode(AnomalyScore, r.value).ts_ms for r in outputs} == {TS + i * 1000 for i in range(total)}
