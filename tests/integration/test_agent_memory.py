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
from services.runtime.admin import connect_admin
from services.runtime.health import HealthServer, ReadyCheck
from services.runtime.producer import Producer
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import collect
from tests.unit.test_agents_policies import regime

pytestmark = [pytest.mark.integration]


class ReadyProbe(HealthServer):
    """Never served over HTTP: keeps the worker's readiness check so the test can wait on it."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", 0)
        self.checks: list[ReadyCheck] = []

    def add_check(self, name: str, check: ReadyCheck) -> None:
        super().add_check(name, check)
        self.checks.append(check)

    def ready(self) -> bool:
        return bool(self.checks) and all(check() for check in self.checks)


async def committed(bootstrap: str, group: str, topic: str) -> int:
    """Offsets the group committed on ``topic``, summed over its partitions."""
    admin = await connect_admin(bootstrap, timeout_s=10)
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(max(0, meta.offset) for tp, meta in offsets.items() if tp.topic == topic)


async def run_once(bootstrap: str, prefix: str, group: str, durable: bool, node: str, handled: int) -> None:
    """Start the admission agent, feed it one contended regime of ``node``, let it act, stop it.

    ``handled``: the group's committed input offsets once this run's record is behind it (the memory
    topic is written before the input is committed, so that also means the memory is flushed)."""
    s = AdmissionSettings(KAFKA_BOOTSTRAP=bootstrap, BORG_TOPIC_PREFIX=prefix, group_id=group,  # type: ignore[call-arg]
                          repropose_s=600, durable_memory=durable, max_input_age_s=100_000)
    stop = asyncio.Event()
    probe = ReadyProbe()
    worker = asyncio.create_task(run_agent(Agent("admission", s, admission_policy.evaluate),
                                           (REGIMES_TOPIC,), stop, health=probe))
    producer = Producer(bootstrap=bootstrap, client_id="it-memory", topic_prefix=prefix)
    await producer.start()
    try:
        await wait_until(probe.ready, timeout=30, interval=0.1, what="the agent joined its group")
        label = regime(node, "llc", worst=1.8, ts=int(time.time() * 1000))
        await producer.send(REGIMES_TOPIC, node, label)
        await producer.flush()
        topic = f"{prefix}{REGIMES_TOPIC}"

        async def caught_up() -> bool:
            return await committed(bootstrap, group, topic) >= handled

        await wait_until(caught_up, timeout=30, interval=0.2, what="the agent committed past its input")
    finally:
        await producer.stop()
        stop.set()
        await asyncio.wait_for(worker, 30)


@pytest.mark.parametrize("durable", [True, False])
async def test_a_restarted_agent_remembers_what_it_proposed(kafka_bootstrap: str, topic_prefix: str,
                                                            durable: bool) -> None:
    group = f"adm-{uuid.uuid4().hex[:8]}"
    node = f"n-{uuid.uuid4().hex[:6]}"
    await run_once(kafka_bootstrap, topic_prefix, group, durable, node, handled=1)
    # a new process, the same input again
    await run_once(kafka_bootstrap, topic_prefix, group, durable, node, handled=2)
    got = await collect(kafka_bootstrap, f"{topic_prefix}proposals.v1", Proposal, lambda got: len(got) >= 1,
                        within=20)
    await asyncio.sleep(1)
    seen = len(got)
    got = await collect(kafka_bootstrap, f"{topic_prefix}proposals.v1", Proposal, lambda got: len(got) >= seen,
                        within=20)
    taints = [p for p, _ in got if p.kind == "taint" and p.target.name == node]
    # durable: the second process restored the first one's memory and sent nothing; without: it sent again
    assert len(taints) == (1 if durable else 2), [(p.kind, p.target.name, p.ts_ms) for p in taints]
