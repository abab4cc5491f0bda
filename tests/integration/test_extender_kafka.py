"""The extender's state reader against the real broker: compacted topics from the beginning, latest per node."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Literal

import pytest

from contracts.models import AnomalyScore, FailureRiskV2, HorizonRisk, RegimeLabelV2, RegimeName
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from services.runtime.producer import Producer
from services.scheduler_extender.reader import StateReader
from services.scheduler_extender.scoring import CLASS_INDEX, ScoringConfig
from services.scheduler_extender.state import NodeStateStore
from tests.conftest import wait_until
from tests.kafka_helpers import produce_raw
from tests.samples import unknown_label

pytestmark = pytest.mark.integration


def label(node: str, ts: int, regime: RegimeName = "membw", slowdown: float = 2.4) -> RegimeLabelV2:
    return RegimeLabelV2(
        node=node,
        ts_ms=ts,
        regime=regime,
        confidence=0.9,
        raw_regime=regime,
        changed=False,
        interference={"memory_bound": slowdown},
        model_version="m",
        input_ts_ms=ts,
    )


def risk(target: str, ts: int, p: float, kind: Literal["task", "node"] = "node") -> FailureRiskV2:
    return FailureRiskV2(
        target_kind=kind,
        target=target,
        ts_ms=ts,
        model_version="m",
        input_ts_ms=ts,
        horizons=[HorizonRisk(horizon_s=600, probability=p)],
    )


async def test_reader_catches_up_then_follows(kafka_bootstrap: str, topic_prefix: str) -> None:
    now = int(time.time() * 1000)
    producer = Producer(bootstrap=kafka_bootstrap, client_id="t-extender", topic_prefix=topic_prefix)
    await producer.start()
    try:
        await producer.send(REGIMES_TOPIC, "n1", label("n1", now - 5_000, "llc", 1.2))
        await producer.send(REGIMES_TOPIC, "n1", label("n1", now))  # latest for n1
        await producer.send(REGIMES_TOPIC, "n2", label("n2", now))
        await producer.send(
            "anomalies.v1",
            "n1",
            AnomalyScore(
                node="n1", ts_ms=now, score=0.2, is_anomaly=False, threshold=0.9, model_version="m", input_ts_ms=now
            ),
        )
        await producer.send(RISK_TOPIC, "n1", risk("n1", now, 0.3))
        await producer.send(RISK_TOPIC, "task-1", risk("task-1", now, 0.99, kind="task"))  # not node state
        await producer.flush()
    finally:
        await producer.stop()
    # A record that is not a RegimeLabelV2, and a tombstone removing n2's regime.
    await produce_raw(kafka_bootstrap, f"{topic_prefix}{REGIMES_TOPIC}", [(b"n3", b'{"node": "n3"}')])
    await produce_raw(kafka_bootstrap, f"{topic_prefix}{REGIMES_TOPIC}", [(b"n2", None)])

    store = NodeStateStore(ScoringConfig())
    reader = StateReader(bootstrap=kafka_bootstrap, store=store, topic_prefix=topic_prefix)
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    try:
        await asyncio.wait_for(reader.caught_up.wait(), timeout=30)
        assert reader.stats.records == 8
        assert reader.stats.bad == 1
        assert store.stats.ignored == 1  # the task risk
        assert store.nodes() == ["n1"]  # n2's only input was deleted by the tombstone
        card = store.card("n1", int(time.time() * 1000))
        assert (card.regime, card.anomaly, card.risk) == ("membw", 0.2, 0.3)
        assert card.reasons[CLASS_INDEX["memory_bound"]] is not None

        # Live updates after the catch-up are applied as they come.
        later = int(time.time() * 1000)
        live = Producer(bootstrap=kafka_bootstrap, client_id="t-extender-live", topic_prefix=topic_prefix)
        await live.start()
        try:
            # the model now abstains on n1: the newer unknown label lifts the filter of its old one
            unknown = unknown_label("n1", later, changed=True, model_version="m")
            await live.send(REGIMES_TOPIC, "n1", unknown)
            await live.flush()
        finally:
            await live.stop()
        await wait_until(
            lambda: store.card("n1", int(time.time() * 1000)).regime == "unknown",
            timeout=20,
            what="live regime update for n1",
        )
        card = store.card("n1", int(time.time() * 1000))
        assert card.reasons[CLASS_INDEX["memory_bound"]] is None
        assert (card.regime_status, card.abstain) == ("abstained", ("counters_missing",))
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def test_reader_retries_while_kafka_is_unreachable() -> None:
    """No broker: the reader keeps retrying instead of crashing; the extender answers neutrally meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    store = NodeStateStore(ScoringConfig())
    reader = StateReader(bootstrap=f"127.0.0.1:{closed_port}", store=store, retry_s=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    try:
        await wait_until(lambda: reader.stats.restarts >= 2, timeout=30, what="two retries")
        assert not reader.caught_up.is_set()
        assert not task.done()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
