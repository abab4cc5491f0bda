"""Creating and describing the registry's topics on a broker."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from contracts.topics import TOPICS, TopicSpec
from services.runtime.kafka_security import kafka_client_options


@dataclass(frozen=True)
class TopicState:
    name: str
    partitions: int
    cleanup_policy: str


CONNECT_TIMEOUT_ENV = "BORG_KAFKA_CONNECT_TIMEOUT_S"
"""How long callers that pass no timeout retry an unreachable broker (default 30 s; tests of the
unreachable case set it short instead of waiting the default out)."""


async def connect_admin(bootstrap: str, timeout_s: float | None = None) -> AIOKafkaAdminClient:
    if timeout_s is None:
        timeout_s = float(os.environ.get(CONNECT_TIMEOUT_ENV) or 30.0)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options(), request_timeout_ms=10_000)
        try:
            await admin.start()
            return admin
        except KafkaConnectionError:
            await admin.close()
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def create_topics(bootstrap: str, prefix: str = "", specs: tuple[TopicSpec, ...] = TOPICS,
                        replication: int = 1, partitions: Mapping[str, int] | None = None) -> list[str]:
    """Create missing topics from the registry (``replication`` copies each; ``partitions`` overrides the
    registry's counts by base name, ``BORG_TOPIC_PARTITIONS``); returns the names created."""
    admin = await connect_admin(bootstrap)
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name=f"{prefix}{s.name}",
                num_partitions=(partitions or {}).get(s.name, s.partitions),
                replication_factor=replication,
                topic_configs=s.config(),
            )
            for s in specs
            if f"{prefix}{s.name}" not in existing
        ]
        if wanted:
            try:
                response = await admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                response = None
            # the broker answers per topic; aiokafka does not raise for those errors (e.g. a replication
            # factor above the broker count): report them instead of claiming the topics exist
            refused = [(name, code, message) for name, code, message, *_ in getattr(response, "topic_errors", ())
                       if code not in (0, TopicAlreadyExistsError.errno)]
            if refused:
                name, code, message = refused[0]
                raise RuntimeError(f"the broker refused {len(refused)} of {len(wanted)} topics, e.g. {name}: "
                                   f"error {code} {message or ''} (replication {replication})".rstrip())
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


class PartitionCountError(RuntimeError):
    """Input topics whose partition counts differ from what a processor's state assumes."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


async def check_partitions(bootstrap: str, topics: Mapping[str, int], *, wait_s: float = 10.0) -> None:
    """Raise :class:`PartitionCountError` unless every topic exists with the expected partitions.

    A stateful processor keeps the state of input partition p in changelog partition p, and
    co-partitioned inputs (risk joins taskevents.v1 with features.v1 by node) must route a
    key to the same partition number: a topic created or grown with another count silently
    splits a key's state. Checked once at start, every topic named in one error. A topic
    missing (or without a leader yet) is asked about again for up to ``wait_s``: a broker's
    metadata lags a topic created moments before.
    """
    if not topics:
        return
    admin = await connect_admin(bootstrap)
    try:
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            described = {t["topic"]: t for t in await admin.describe_topics(list(topics))}
            problems, transient = _partition_problems(topics, described)
            if not problems:
                return
            if not transient or asyncio.get_running_loop().time() > deadline:
                raise PartitionCountError(problems)
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


def _partition_problems(topics: Mapping[str, int], described: Mapping[str, dict[str, Any]]) -> tuple[list[str], bool]:
    """What is wrong with each topic, and whether waiting may mend all of it (missing, no leader)."""
    problems: list[str] = []
    transient = True
    for name, expected in topics.items():
        meta: dict[str, Any] = described.get(name) or {"error_code": UnknownTopicOrPartitionError.errno}
        error = meta.get("error_code", 0)
        if error == UnknownTopicOrPartitionError.errno:
            problems.append(f"topic {name} does not exist (expected with {expected} partitions)")
        elif error:
            problems.append(f"topic {name} could not be described (broker error code {error})")
        elif (actual := len(meta["partitions"])) != expected:
            problems.append(f"topic {name} has {actual} partitions, expected {expected}")
            transient = False
    return problems, transient
