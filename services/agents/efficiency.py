"""Agent B: consolidate / memory balloon / scale in when demand is low (`borgctl serve agent-efficiency`)."""

from __future__ import annotations

import asyncio

from contracts.topics import CAPABILITIES_TOPIC, FORECASTS_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic
from services.agents import efficiency_policy
from services.agents.settings import EfficiencySettings
from services.agents.wiring import Agent, run_agent
from services.runtime.health import HealthServer
from services.runtime.service import run_service

INPUT_TOPICS = (
    REGIMES_TOPIC, Topic.ANOMALIES, RISK_TOPIC, Topic.CLUSTERSTATE, Topic.TASKEVENTS, Topic.NODESTATE, FORECASTS_TOPIC,
    CAPABILITIES_TOPIC,
)


async def body(settings: EfficiencySettings, stop: asyncio.Event, health: HealthServer) -> None:
    agent = Agent("efficiency", settings, efficiency_policy.evaluate)
    await run_agent(agent, INPUT_TOPICS, stop, health)


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (AGENT_* and AGENT_EFFICIENCY_*)
    return run_service("agent-efficiency", EfficiencySettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
