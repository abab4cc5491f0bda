"""A changelog topic is created compacted, with 64 MB / 10 min segments and a jittered roll (real broker)."""

from __future__ import annotations

import uuid

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from services.runtime.admin import connect_admin
from services.runtime.changelog import CHANGELOG_CONFIG, ensure_changelog

pytestmark = pytest.mark.integration


async def test_created_changelog_has_the_configs(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}borg-test-{uuid.uuid4().hex[:6]}-changelog"
    assert await ensure_changelog(kafka_bootstrap, topic, partitions=6)
    assert not await ensure_changelog(kafka_bootstrap, topic, partitions=6)  # exists: left as it is
    with pytest.raises(RuntimeError, match="has 6 partitions; its input has 3"):
        await ensure_changelog(kafka_bootstrap, topic, partitions=3)
    admin = await connect_admin(kafka_bootstrap)
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        effective = {entry[0]: entry[1] for response in responses for resource in response.resources
                     for entry in resource[4]}
    finally:
        await admin.close()
    assert {k: effective.get(k) for k in CHANGELOG_CONFIG} == CHANGELOG_CONFIG
    assert effective["cleanup.policy"] == "compact" and int(effective["segment.jitter.ms"]) == 300_000
