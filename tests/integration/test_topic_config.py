"""Registry topics are created with their configs: the two high-volume streams get 1 GiB segments (real broker).

The local broker's own default is 64 MB (``infra/kafka/kafka.sh``), so the segment size seen
here can only come from the registry's topic-level config.
"""

from __future__ import annotations

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from contracts.topics import TOPICS
from services.runtime.admin import connect_admin
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


async def test_registry_topics_carry_their_configs(kafka_bootstrap: str, topic_prefix: str) -> None:
    admin = await connect_admin(kafka_bootstrap)
    effective: dict[str, dict[str, str]] = {}

    async def described() -> bool:
        # a topic the controller has just created can be described before the broker has applied
        # its metadata: that answer carries an error code and no entries (seen once in CI), so ask again
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, f"{topic_prefix}{spec.name}") for spec in TOPICS])
        effective.clear()
        effective.update({resource[3]: {entry[0]: entry[1] for entry in resource[4]}
                          for response in responses for resource in response.resources if resource[0] == 0})
        return len(effective) == len(TOPICS) and all(effective.values())

    try:
        await wait_until(described, timeout=30, interval=0.5, what="every registry topic described")
    finally:
        await admin.close()
    for spec in TOPICS:
        got = effective[f"{topic_prefix}{spec.name}"]
        assert {k: got.get(k) for k in spec.config()} == spec.config(), spec.name
    segments = {spec.name: int(effective[f"{topic_prefix}{spec.name}"]["segment.bytes"]) for spec in TOPICS}
    assert segments["nodestate.v1"] == segments["features.v1"] == 1024**3
    assert segments["decisions.v1"] == 64 * 1024**2  # the broker's default, for the rest
