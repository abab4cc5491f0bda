"""An agent restarted on the real broker does not re-send what it had just proposed (its memory topic)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from contracts.models import Proposal
from contracts.topics import REGIMES_TOPIC
from services.agents import admission_policy
from services.agents.settings import AdmissionSettings
from services.agents.wiring import Agent, run_agent
from services.runtime.producer import Producer
from tests.integration.test_referee_helpers import collect
from tests.unit.test_agents_policies import regime

pytestmark = [pytest.mark.integration]


async def run_once(bootstrap: str, prefix: str, group: str, durable: bool, node: str) -> None:
    """Start the admission agent, feed it one contended regime of ``node``, let it act, stop it."""
    s = AdmissionSettings(KAFKA_BOOTSTRAP=bootstrap, BORG_TOPIC_PREFIX=prefix, group_id=group,  # type: ignore[call-arg]
                          repropose_s=600, durable_memory=durable, max_input_age_s=100_000)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_agent(Agent("admission", s, admission_policy.evaluate),
                                           (REGIMES_TOPIC,), stop))
    producer = Producer(bootstrap=bootstrap, client_id="it-memory", topic_prefix=prefix)
    await producer.start()
    try:
        await asyncio.sleep(3)  # joined its group
        label = regime(node, "llc", worst=1.8, ts=int(time.time() * 1000))
        await producer.send(REGIMES_TOPIC, node, label)
        await producer.flush()
        await asyncio.sleep(4)  # handled, its outputs and memory flushed, offsets committed
    finally:
        await producer.stop()
        stop.set()
        await asyncio.wait_for(worker, 30)


@pytest.mark.parametrize("durable", [True, False])
async def test_a_restarted_agent_remembers_what_it_proposed(kafka_bootstrap: str, topic_prefix: str,
                                                            durable: bool) -> None:
    group = f"adm-{uuid.uuid4().hex[:8]}"
    node = f"n-{uuid.uuid4().hex[:6]}"
    await run_once(kafka_bootstrap, topic_prefix, group, durable, node)
    await run_once(kafka_bootstrap, topic_prefix, group, durable, node)  # a new process, the same input again
    got = await collect(kafka_bootstrap, f"{topic_prefix}proposals.v1", Proposal, lambda got: len(got) >= 1,
                        within=20)
    await asyncio.sleep(1)
    seen = len(got)
    got = await collect(kafka_bootstrap, f"{topic_prefix}proposals.v1", Proposal, lambda got: len(got) >= seen,
                        within=20)
    taints = [p for p, _ in got if p.kind == "taint" and p.target.name == node]
    # durable: the second process restored the first one's memory and sent nothing; without: it sent again
    assert len(taints) == (1 if durable else 2), [(p.kind, p.target.name, p.ts_ms) for p in taints]
