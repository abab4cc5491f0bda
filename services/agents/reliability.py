"""Agent A: replicate / scale out when failure risk or SLA pressure is high, and (opt-in) evict a pod whose
co-runners push a latency-sensitive pod past its SLO (`borgctl serve agent-reliability`)."""

from __future__ import annotations

import asyncio

from contracts.topics import CAPABILITIES_TOPIC, RISK_TOPIC, Topic
from services.agents import reliability_policy
from services.agents.settings import ReliabilitySettings
from services.agents.wiring import Agent, run_agent
from services.runtime.health import HealthServer
from services.runtime.service import run_service

INPUT_TOPICS = (RISK_TOPIC, Topic.CLUSTERSTATE, Topic.TASKEVENTS, CAPABILITIES_TOPIC, Topic.PODPRESSURE)


async def body(settings: ReliabilitySettings, stop: asyncio.Event, health: HealthServer) -> None:
    agent = Agent("reliability", settings, reliability_policy.evaluate)
    if not settings.interference:
        await run_agent(agent, INPUT_TOPICS, stop, health)
        return
    from services.agents.kube_pods import follow_cluster
    from services.runtime.kube_client import api_client

    api = await api_client(settings.kubeconfig)  # no usable kubeconfig: exit 2 at start-up, named
    follower = asyncio.create_task(follow_cluster(api, agent.view, settings, stop), name="follow-cluster")
    try:
        await run_agent(agent, INPUT_TOPICS, stop, health)
    finally:
        stop.set()
        await follower


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (AGENT_* and AGENT_RELIABILITY_*)
    return run_service("agent-reliability", ReliabilitySettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
