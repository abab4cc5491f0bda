"""check_partitions refuses input topics whose partition count differs from the state's (real broker)."""

from __future__ import annotations

import re
import uuid

import pytest
from aiokafka.admin import NewTopic

from services.runtime.admin import PartitionCountError, check_partitions, connect_admin
from services.runtime.stream_settings import PARTITIONS

pytestmark = pytest.mark.integration


async def test_wrong_and_missing_topics_are_named(kafka_bootstrap: str, topic_prefix: str) -> None:
    good = f"{topic_prefix}taskevents.v1"  # created by the fixture from the registry: 6 partitions
    wrong = f"{topic_prefix}wrong-{uuid.uuid4().hex[:6]}"
    missing = f"{topic_prefix}missing-{uuid.uuid4().hex[:6]}"
    admin = await connect_admin(kafka_bootstrap)
    try:
        await admin.create_topics([NewTopic(wrong, num_partitions=4, replication_factor=1)])
    finally:
        await admin.close()

    # just created: the broker may not list it yet; the check waits for it
    await check_partitions(kafka_bootstrap, {good: PARTITIONS, f"{topic_prefix}features.v1": PARTITIONS, wrong: 4})
    await check_partitions(kafka_bootstrap, {})

    with pytest.raises(PartitionCountError, match=re.escape(f"topic {wrong} has 4 partitions, expected {PARTITIONS}")):
        await check_partitions(kafka_bootstrap, {good: PARTITIONS, wrong: PARTITIONS})

    with pytest.raises(PartitionCountError) as raised:
        await check_partitions(kafka_bootstrap, {missing: 6, wrong: 4, good: 3}, wait_s=0.0)
    assert raised.value.problems == [
        f"topic {missing} does not exist (expected with 6 partitions)",
        f"topic {good} has 6 partitions, expected 3",
    ]
