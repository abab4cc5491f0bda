"""Creating and describing the registry's topics on a broker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

from contracts.topics import TOPICS, TopicSpec


@dataclass(frozen=True)
class TopicState:
    name: str
    partitions: int
    cleanup_policy: str


async def connect_admin(bootstrap: str, timeout_s: float = 30.0) -> AIOKafkaAdminClient:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            await admin.start()
            return admin
        except KafkaConnectionError:
            await admin.close()
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def create_topics(bootstrap: str, prefix: str = "", specs: tuple[TopicSpec, ...] = TOPICS) -> list[str]:
    """Create missing topics from the registry; returns the names created."""
    admin = await connect_admin(bootstrap)
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name=f"{prefix}{s.name}",
                num_partitions=s.partitions,
                replication_factor=1,
                topic_configs=s.config(),
            )
            for s in specs
            if f"{prefix}{s.name}" not in existing
        ]
        if wanted:
            try:
                await admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                pass
        return [t.name for t in wanted]
    finally:
        await admin.close()


async def describe_topics(bootstrap: str, names: list[str]) -> dict[str, TopicState]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = await connect_admin(bootstrap)
    try:
        meta = await admin.describe_topics(names)
        configs = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
        )
        policy: dict[str, str] = {}
        for response in configs:
            for resource in response.resources:
                _, _, _, rname, entries = resource[:5]
                for entry in entries:
                    if entry[0] == "cleanup.policy":
                        policy[rname] = entry[1]
        out = {}
        for topic in meta:
            if topic.get("error_code", 0) != 0:
                continue
            name = topic["topic"]
            out[name] = TopicState(name, len(topic["partitions"]), policy.get(name, "?"))
        return out
    finally:
        await admin.close()
