"""``Sink`` against the real broker: outputs collect in per-partition batches and land where ``send`` would put them.

Each key's records must reach the partition the producer's default partitioner picks (the
same as a plain ``AIOKafkaProducer.send``: consumers and compacted tables depend on it), in
the order they were sent, with their headers; ``push`` hands them over without a flush; a
value over ``DIRECT_ABOVE`` goes out by itself, still in order with the batched ones.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from contracts import DeadLetterV2, RegimeLabelV2, decode
from contracts.headers import build_headers
from contracts.topics import REGIMES_TOPIC
from services.runtime import stream_io
from services.runtime.stream_io import Sink
from tests.kafka_helpers import consume

pytestmark = pytest.mark.integration

NODES = 60
WINDOWS = 5


def _label(node: str, ts_ms: int) -> RegimeLabelV2:
    return RegimeLabelV2(node=node, ts_ms=ts_ms, regime="llc", confidence=0.5, raw_regime="llc", changed=False,
                       interference={"cpu_bound": 1.0}, model_version="v1", input_ts_ms=ts_ms - 10)


async def test_batched_outputs_land_on_the_producers_partition_in_order(kafka_bootstrap: str,
                                                                        topic_prefix: str) -> None:
    topic = f"{topic_prefix}{REGIMES_TOPIC}"
    nodes = [f"sink-node-{i}" for i in range(NODES)]
    # no producer spans: the headers compared below are the contract's own (an SDK another test installed
    # in this process would add a traceparent per output; producer spans: tests/unit/test_publish_span.py)
    async with Sink(bootstrap=kafka_bootstrap, service="sinktest", topic_prefix=topic_prefix,
                    producer_spans=False) as sink:
        for w in range(WINDOWS):
            for node in nodes:
                await sink.send(REGIMES_TOPIC, node, _label(node, 1_700_000_000_000 + 1000 * w), None)
        assert sink.produced == NODES * WINDOWS
        await sink.push()  # handed over: the broker gets them without a flush
        seen = await consume(kafka_bootstrap, topic, NODES * WINDOWS)
        await sink.flush()

    # the same keys through the producer's own send, for the partition it chooses
    plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await plain.start()
    try:
        chosen: dict[bytes, int] = {}
        for node in nodes:
            meta = await (await plain.send(topic, key=node.encode(), value=b"plain"))
            chosen[node.encode()] = meta.partition
    finally:
        await plain.stop()
    assert len(set(chosen.values())) > 1, "60 keys should spread over several of the 6 partitions"

    by_node: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for r in seen:
        label = decode(RegimeLabelV2, r.value)
        assert r.key == label.node.encode()
        assert r.partition == chosen[r.key], f"{label.node} on {r.partition}, send() picks {chosen[r.key]}"
        assert list(r.headers) == build_headers(REGIMES_TOPIC)
        assert r.timestamp > 1_700_000_000_000  # stamped when appended
        by_node[r.key].append((r.offset, label.ts_ms))
    assert len(by_node) == NODES
    for windows in by_node.values():
        windows.sort()
        assert [ts for _, ts in windows] == [1_700_000_000_000 + 1000 * w for w in range(WINDOWS)]


def _letter(sink: Sink, offset: int, size: int) -> Any:
    msg = SimpleNamespace(topic="features.v1", partition=0, offset=offset, key=b"k", value=bytes(size), headers=[])
    return sink.dead_letter_record(msg, f"bad {offset}", "schema")


async def test_a_large_value_goes_alone_and_keeps_its_place(kafka_bootstrap: str, topic_prefix: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    big = stream_io.DIRECT_ABOVE + 1000
    async with Sink(bootstrap=kafka_bootstrap, service="sinktest", topic_prefix=topic_prefix) as sink:
        direct: list[int] = []
        send_one = sink._send

        async def spying(topic: str, key: bytes | None, value: bytes | None, headers: Any,
                         partition: int | None = None) -> None:
            direct.append(len(value or b""))
            await send_one(topic, key, value, headers, partition)

        monkeypatch.setattr(sink, "_send", spying)
        await _letter(sink, 1, 10)
        await _letter(sink, 2, big)  # over DIRECT_ABOVE once encoded: a send of its own
        await _letter(sink, 3, 10)
        await sink.flush()
        assert sink.dead_lettered == 3
        assert len(direct) == 1 and direct[0] > stream_io.DIRECT_ABOVE, direct
    records = await consume(kafka_bootstrap, f"{topic_prefix}deadletter.v2", 3)
    letters = [decode(DeadLetterV2, r.value) for r in records]
    assert [letter.offset for letter in letters] == [1, 2, 3]
    assert len(records[1].value) > stream_io.DIRECT_ABOVE


async def test_a_full_batch_is_handed_over_while_sending(kafka_bootstrap: str, topic_prefix: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    topic = f"{topic_prefix}{REGIMES_TOPIC}"
    async with Sink(bootstrap=kafka_bootstrap, service="sinktest", topic_prefix=topic_prefix) as sink:
        sent: list[int] = []
        submit = sink._submit

        async def counting(topic: str, partition: int, batch: Any) -> None:
            sent.append(batch.record_count())
            await submit(topic, partition, batch)

        monkeypatch.setattr(sink, "_submit", counting)
        count = 3000  # ~300 B each: several 256 kB batches for one key
        for i in range(count):
            await sink.send(REGIMES_TOPIC, "one-node", _label("one-node", 1_700_000_000_000 + i), None)
        assert len(sent) >= 2 and sum(sent) < count, f"full batches handed over while sending: {sent}"
        await sink.flush()
        assert sum(sent) == count
    records = await consume(kafka_bootstrap, topic, count)
    assert [decode(RegimeLabelV2, r.value).ts_ms for r in sorted(records, key=lambda r: r.offset)] == \
        [1_700_000_000_000 + i for i in range(count)]
