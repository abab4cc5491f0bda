"""Registry topics are created with their configs: the two high-volume streams get 1 GiB segments (real broker).

The local broker's own default is 64 MB (``infra/kafka/kafka.sh``), so the segment size seen
here can only come from the registry's topic-level config.
"""

from __future__ import annotations

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from contracts.topics import TOPICS
from services.runtime.admin import connect_admin

pytestmark = pytest.mark.integration


async def test_registry_topics_carry_their_configs(kafka_bootstrap: str, topic_prefix: str) -> None:
    admin = await connect_admin(kafka_bootstrap)
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, f"{topic_prefix}{spec.name}") for spec in TOPICS])
        effective = {resource[3]: {entry[0]: entry[1] for entry in resource[4]}
                     for response in responses for resource in response.resources}
    finally:
        await admin.close()
    for spec in TOPICS:
        got = effective[f"{topic_prefix}{spec.name}"]
        assert {k: got.get(k) for k in spec.config()} == spec.config(), spec.name
    segments = {spec.name: int(effective[f"{topic_prefix}{spec.name}"]["segment.bytes"]) for spec in TOPICS}
    assert segments["nodestate.v1"] == segments["features.v1"] == 1024**3
    assert segments["decisions.v1"] == 64 * 1024**2  # the broker's default, for the rest
