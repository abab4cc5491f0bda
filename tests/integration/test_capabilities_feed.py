"""Agents propose only what the cluster can carry out (issue 26 item 1): the referee's actuator reads API
discovery on the real kube-apiserver and writes capabilities.v1; a real admission agent on the broker reads
it and withholds a taint while node writes are not served, then proposes it once they are."""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts.models import ClusterCapabilities, Proposal
from contracts.topics import CAPABILITIES_TOPIC, REGIMES_TOPIC
from services.agents import admission, admission_policy
from services.agents.settings import AdmissionSettings
from services.agents.wiring import Agent, run_agent
from services.referee.actuator import KubeActuator
from services.referee.capabilities import Capabilities
from services.referee.capabilities_feed import publish_capabilities
from services.referee.settings import RefereeSettings
from services.runtime.producer import Producer
from services.runtime.stream_io import Sink
from tests.integration.test_referee_helpers import collect, kube_admin, referee_kubeconfig  # noqa: F401 (fixtures)
from tests.unit.test_agents_policies import regime

pytestmark = [pytest.mark.integration, pytest.mark.kube]


@dataclass
class Fixed:
    """The capabilities the real discovery found, less what a test takes away (an older cluster)."""

    caps: Capabilities

    async def capabilities(self) -> Capabilities | None:
        return self.caps


async def publish_once(bootstrap: str, prefix: str, caps: Capabilities, cluster: str) -> ClusterCapabilities:
    """Run the referee's feed until its record is on the topic; that record."""
    stop = asyncio.Event()
    async with Sink(bootstrap=bootstrap, service="referee", topic_prefix=prefix) as sink:
        feed = asyncio.create_task(publish_capabilities(Fixed(caps), sink, cluster=cluster, reporter="it-referee",
                                                        refresh_s=3600, stop=stop))
        try:
            expected = caps.report(cluster, 1_700_000_000_000, "it-referee").supported
            got = await collect(bootstrap, prefix + CAPABILITIES_TOPIC, ClusterCapabilities,
                                lambda got: any(v.cluster == cluster and v.supported == expected for v, _ in got),
                                within=20)
        finally:
            stop.set()
            await asyncio.wait_for(feed, 10)
    record: ClusterCapabilities = next(v for v, _ in reversed(got) if v.cluster == cluster)
    return record


async def taints_of(bootstrap: str, prefix: str, node: str, at_least: int) -> list[Proposal]:
    got = await collect(bootstrap, prefix + "proposals.v1", Proposal,
                        lambda got: sum(1 for p, _ in got if p.kind == "taint" and p.target.name == node) >= at_least,
                        within=20)
    return [p for p, _ in got if p.kind == "taint" and p.target.name == node]


async def test_the_agent_withholds_what_discovery_rules_out_and_proposes_it_once_served(
        kafka_bootstrap: str, topic_prefix: str, referee_kubeconfig: Path) -> None:
    s = RefereeSettings(mode="apply", kubeconfig=str(referee_kubeconfig))  # type: ignore[call-arg]
    actuator = await KubeActuator.connect(s)
    try:
        served = await actuator.capabilities()
    finally:
        await actuator.close()
    assert served is not None
    cluster = f"it-{uuid.uuid4().hex[:6]}"
    # the real API serves every action; the same cluster without node writes rules out taint, cordon, consolidate
    full = await publish_once(kafka_bootstrap, topic_prefix, served, cluster)
    assert full.unsupported == [] and "memory_balloon" in full.supported
    no_nodes = await publish_once(kafka_bootstrap, topic_prefix, Capabilities(served.served - {"v1 nodes"}), cluster)
    assert sorted(u.action for u in no_nodes.unsupported) == ["consolidate", "cordon", "taint"]
    assert all(u.missing == ["v1 nodes"] for u in no_nodes.unsupported)

    node = f"n-{uuid.uuid4().hex[:6]}"
    settings = AdmissionSettings(KAFKA_BOOTSTRAP=kafka_bootstrap, BORG_TOPIC_PREFIX=topic_prefix,  # type: ignore[call-arg]
                                 group_id=f"adm-{uuid.uuid4().hex[:8]}", repropose_s=0, durable_memory=False,
                                 max_input_age_s=100_000)
    agent = Agent("admission", settings, admission_policy.evaluate)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_agent(agent, admission.INPUT_TOPICS, stop))
    producer = Producer(bootstrap=kafka_bootstrap, client_id="it-capabilities", topic_prefix=topic_prefix)
    await producer.start()
    try:
        deadline = time.monotonic() + 20
        while "taint" not in agent.unsupported:  # read the compacted topic from its start (the latest record)
            assert time.monotonic() < deadline, "the agent never read capabilities.v1"
            await asyncio.sleep(0.2)
        await producer.send(REGIMES_TOPIC, node, regime(node, "llc", worst=1.8, ts=int(time.time() * 1000)))
        await producer.flush()
        await asyncio.sleep(3)  # handled (a taint would be on proposals.v1 by now)
        await publish_once(kafka_bootstrap, topic_prefix, served, cluster)  # the cluster serves node writes again
        deadline = time.monotonic() + 20
        while agent.unsupported:
            assert time.monotonic() < deadline, f"the agent kept {agent.unsupported}"
            await asyncio.sleep(0.2)
        await producer.send(REGIMES_TOPIC, node, regime(node, "llc", worst=1.8, ts=int(time.time() * 1000)))
        await producer.flush()
        taints = await taints_of(kafka_bootstrap, topic_prefix, node, 1)
    finally:
        await producer.stop()
        stop.set()
        await asyncio.wait_for(worker, 30)
    # exactly one: the one after node writes were served again; none while they were not
    assert len(taints) == 1, [(p.kind, p.ts_ms) for p in taints]

    # A restarted agent resumes after its committed offset, past the latest capabilities record: it reads
    # the compacted topic from its start before consuming, so it withholds at once what the cluster cannot do.
    await publish_once(kafka_bootstrap, topic_prefix, Capabilities(served.served - {"v1 nodes"}), cluster)
    stop = asyncio.Event()
    first = asyncio.create_task(run_agent(agent, admission.INPUT_TOPICS, stop))
    deadline = time.monotonic() + 20
    while "taint" not in agent.unsupported:
        assert time.monotonic() < deadline, "the agent never read the new capabilities record"
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.wait_for(first, 30)  # commits past the record
    restarted = Agent("admission", settings, admission_policy.evaluate)
    stop = asyncio.Event()
    second = asyncio.create_task(run_agent(restarted, admission.INPUT_TOPICS, stop))
    try:
        deadline = time.monotonic() + 20
        while "taint" not in restarted.unsupported:
            assert time.monotonic() < deadline, "a restarted agent did not restore capabilities from the topic"
            await asyncio.sleep(0.2)
        assert sorted(restarted.unsupported) == ["consolidate", "cordon", "taint"]
    finally:
        stop.set()
        await asyncio.wait_for(second, 30)
