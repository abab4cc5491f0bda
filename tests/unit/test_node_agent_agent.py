"""The agent without a broker: sampling schedule, in-order shipping with retries, never blocked by Kafka."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from contracts import NodeState, decode
from services.node_agent.agent import NodeAgent
from services.node_agent.main import main as agent_main
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.shipper import Shipper
from services.node_agent.spool import Spool
from services.node_agent.synthetic import SyntheticSource
from tests.conftest import wait_until


class FakeBuilder:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes, bytes]] = []

    def append(self, *, key: bytes, value: bytes, timestamp: int | None, headers: Any) -> object | None:
        if len(self.records) >= self.capacity:
            return None
        self.records.append((key, value))
        return object()


class FakeProducer:
    """Stands in for BatchingProducer: records what was acknowledged; can fail on demand."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    def topic(self, base: str) -> str:
        return base

    async def start(self) -> None:
        if self.broker.down:
            raise ConnectionError("broker down")
        if self.broker.hang:
            await asyncio.Event().wait()

    async def close_now(self) -> None:
        return None

    async def partition_count(self, topic: str) -> int:
        return 3

    def create_batch(self) -> FakeBuilder:
        return FakeBuilder(self.broker.batch_capacity)

    async def send_batch(self, batch: FakeBuilder, topic: str, partition: int, count: int) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.broker.down:
            fut.set_exception(ConnectionError("broker down"))
        else:
            self.broker.acked.extend(batch.records)
            fut.set_result(None)
        return fut


class FakeBroker:
    def __init__(self) -> None:
        self.down = False
        self.hang = False
        self.acked: list[tuple[bytes, bytes]] = []
        self.batch_capacity = 7

    def factory(self) -> Any:
        return lambda: FakeProducer(self)


async def test_shipper_delivers_in_order_across_an_outage(tmp_path: Path) -> None:
    broker = FakeBroker()
    spool = Spool(tmp_path, max_bytes=1 << 20)
    shipper = Shipper(spool, broker.factory(), "nodestate.v1", batch_records=10, backoff_s=(0.01, 0.02))
    for i in range(25):
        spool.append(b"n1", f"{i}".encode())
    assert await shipper.ship_once() == 10
    broker.down = True
    with pytest.raises(ConnectionError):
        await shipper.ship_once()
    assert len(spool) == 15  # nothing committed on failure
    stop = asyncio.Event()
    task = asyncio.create_task(shipper.run(stop))
    for i in range(25, 40):
        spool.append(b"n1", f"{i}".encode())
        shipper.wake.set()
    await wait_until(lambda: shipper.failures >= 2, timeout=5, what="failed attempts during the outage")
    broker.down = False
    await wait_until(lambda: len(spool) == 0, timeout=5, what="spool drained after the outage")
    stop.set()
    await task
    values = [int(v) for _, v in broker.acked]
    assert values == list(range(40))  # every record, in order, no duplicates with this fake
    assert shipper.delivered == 40


async def test_sampling_is_never_blocked_by_the_broker(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.hang = True  # producer start never returns
    spool = Spool(tmp_path / "spool", max_bytes=1 << 20)
    shipper = Shipper(spool, broker.factory(), "nodestate.v1", attempt_timeout_s=30.0)
    source = SyntheticSource(
        node="agent-test", nodes=3, seed=1, interval_ms=20, truth_path=str(tmp_path / "truth.jsonl")
    )
    agent = NodeAgent(source=source, spool=spool, shipper=shipper, interval_s=0.02, drain_timeout_s=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    await wait_until(lambda: agent.stats.samples >= 10, timeout=10, what="10 samples while Kafka hangs")
    assert len(spool) >= 30
    assert broker.acked == []
    assert agent.healthy()
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    records = Spool(tmp_path / "spool", max_bytes=1 << 20).peek(10_000)
    states = [decode(NodeState, r.value) for r in records]
    assert {s.node for s in states} == {"agent-test-0000", "agent-test-0001", "agent-test-0002"}
    seqs = [s.seq for s in states if s.node == "agent-test-0000"]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert all(s.ts_ms == s.seq * 20 for s in states)  # ticks aligned to the wall clock
    assert all(dict(r.headers)["schema"] == b"nodestate.v1" for r in records)
    truth = [orjson.loads(line) for line in (tmp_path / "truth.jsonl").read_text().splitlines()]
    assert len(truth) == 3 * agent.stats.samples
    assert "regime" in truth[0]
    assert "regime" not in records[0].value.decode()  # ground truth never travels with NodeState


def test_sample_once_validates_and_skips_bad_states(tmp_path: Path) -> None:
    class Broken:
        name = "broken"

        def open(self) -> None: ...

        def close(self) -> None: ...

        def sample(self, *, ts_ms: int, seq: int, interval_ms: int) -> list[dict[str, Any]]:
            good = {
                "node": "ok",
                "ts_ms": ts_ms,
                "seq": seq,
                "interval_ms": interval_ms,
                "source": "software",
                "pmu": "software",
                "supported_events": [],
                "cpu_util": 0.5,
                "mem_util": 0.5,
            }
            bad = dict(good, node="bad", cpu_util=1.5)
            return [good, bad]

    spool = Spool(tmp_path, max_bytes=1 << 20)
    agent = NodeAgent(
        source=Broken(), spool=spool, shipper=Shipper(spool, FakeBroker().factory(), "nodestate.v1"), interval_s=1.0
    )
    assert agent.sample_once(1_700_000_000_000) == 1
    assert agent.stats.invalid == 1
    (record,) = spool.peek(10)
    assert decode(NodeState, record.value).seq == 1_700_000_000


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NODE_AGENT_NODE", "worker-7")
    monkeypatch.setenv("NODE_AGENT_INTERVAL_S", "0.5")
    monkeypatch.setenv("NODE_AGENT_SOURCE", "synthetic")
    monkeypatch.setenv("NODE_AGENT_SPOOL_DIR", str(tmp_path))
    monkeypatch.setenv("NODE_AGENT_RAW_EVENTS", "r0280, cpu/event=0x3c/")
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "broker:9092")
    settings = NodeAgentSettings()
    assert (settings.node, settings.interval_s, settings.source) == ("worker-7", 0.5, "synthetic")
    assert settings.kafka_bootstrap == "broker:9092"
    assert settings.raw_events.split(",")[1].strip() == "cpu/event=0x3c/"
    monkeypatch.setenv("NODE_AGENT_INTERVAL_S", "-1")
    with pytest.raises(SystemExit):
        agent_main([])


def test_compression_falls_back_when_the_codec_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from aiokafka import codec

    from services.node_agent.publish import pick_compression

    assert pick_compression("none") is None
    monkeypatch.setattr(codec, "has_zstd", lambda: False)
    assert pick_compression("zstd") == "gzip"
    assert "cramjam" in caplog.text
    with pytest.raises(ValueError, match="unknown compression"):
        pick_compression("brotli")
