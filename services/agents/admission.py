"""Agent C: deprioritize / throttle / taint / cordon / evict / hold admission (`borgctl serve agent-admission`)."""

from __future__ import annotations

import asyncio

from contracts.topics import CAPABILITIES_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic
from services.agents import admission_policy
from services.agents.settings import AdmissionSettings
from services.agents.wiring import Agent, run_agent
from services.runtime.health import HealthServer
from services.runtime.service import run_service

INPUT_TOPICS = (REGIMES_TOPIC, Topic.ANOMALIES, RISK_TOPIC, Topic.CLUSTERSTATE, Topic.TASKEVENTS, CAPABILITIES_TOPIC)


async def body(settings: AdmissionSettings, stop: asyncio.Event, health: HealthServer) -> None:
    agent = Agent("admission", settings, admission_policy.evaluate)
    await run_agent(agent, INPUT_TOPICS, stop, health)


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (AGENT_* and AGENT_ADMISSION_*)
    return run_service("agent-admission", AdmissionSettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
