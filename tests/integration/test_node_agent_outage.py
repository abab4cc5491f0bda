"""Stop the real broker mid-run, restart it, and find every sample delivered in order.

The broker is shared with other tests: it is restarted in ``finally`` whatever happens,
and the outage lasts only as long as it takes to see the agent spool a dozen samples.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from contracts import NodeState, decode
from services.node_agent.main import build_agent
from services.node_agent.settings import NodeAgentSettings
from tests.conftest import ROOT, wait_until
from tests.kafka_helpers import consume

pytestmark = pytest.mark.integration
KAFKA = ["bash", str(ROOT / "infra" / "kafka" / "kafka.sh")]


def _kafka(command: str) -> None:
    done = subprocess.run([*KAFKA, command], capture_output=True, text=True, timeout=150, check=False)
    if done.returncode != 0:
        raise AssertionError(f"kafka.sh {command} failed:\n{done.stdout}\n{done.stderr}")


async def test_broker_outage_loses_nothing_and_keeps_order(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("BORG_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("NODE_AGENT_NODE", "outage-node")
    monkeypatch.setenv("NODE_AGENT_INTERVAL_S", "0.1")
    monkeypatch.setenv("NODE_AGENT_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("NODE_AGENT_DELIVERY_TIMEOUT_S", "2")
    monkeypatch.setenv("NODE_AGENT_RETRY_BACKOFF_MAX_S", "0.5")
    agent = build_agent(NodeAgentSettings())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    broker_stopped = False
    try:
        await wait_until(lambda: agent.shipper.delivered >= 5, timeout=30, what="deliveries before the outage")
        broker_stopped = True
        await asyncio.to_thread(_kafka, "stop")
        at_stop = agent.stats.samples
        await wait_until(lambda: not agent.shipper.connected, timeout=30, what="the agent noticing the outage")
        await wait_until(lambda: agent.stats.samples >= at_stop + 12, timeout=30, what="sampling during the outage")
        assert len(agent.spool) >= 5  # spooled, not lost, while sampling went on
    finally:
        if broker_stopped:
            await asyncio.to_thread(_kafka, "start")
    try:
        await wait_until(
            lambda: agent.shipper.connected and len(agent.spool) == 0,
            timeout=60,
            what="the spool drained after the restart",
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=20)
    spooled = agent.stats.spooled
    assert len(agent.spool) == 0
    assert agent.spool.dropped == 0
    # After the restart some partitions may still be electing leaders: give the reader time.
    records = await consume(kafka_bootstrap, f"{topic_prefix}nodestate.v1", spooled, timeout=90)
    seqs = [decode(NodeState, r.value).seq for r in records]
    first_seen = list(dict.fromkeys(seqs))  # at-least-once: a resend after a failure may duplicate
    assert len(first_seen) == spooled, f"{spooled} sampled, {len(first_seen)} distinct delivered"
    assert first_seen == sorted(first_seen), "delivered out of order"
    assert first_seen[-1] - first_seen[0] == spooled - 1 + agent.stats.skipped  # no gap but skipped ticks
