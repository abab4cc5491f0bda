"""Registry topics are created with the replication factor asked for; a broker's refusal is an error, not silence."""

from __future__ import annotations

import pytest

from contracts.topics import topic_spec
from services.runtime.admin import create_topics, describe_topics
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration]


async def test_a_refused_replication_factor_is_reported_and_a_possible_one_is_used(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    spec = topic_spec("proposals.v1")
    prefix = f"{topic_prefix}rep-"
    # the local stack has one broker: three copies cannot be placed, and the broker says so per topic
    with pytest.raises(RuntimeError, match=r"refused 1 of 1 topics.*replication factor of 3"):
        await create_topics(kafka_bootstrap, prefix=prefix, specs=(spec,), replication=3)
    assert await create_topics(kafka_bootstrap, prefix=prefix, specs=(spec,), replication=1) == [f"{prefix}{spec.name}"]
    name = f"{prefix}{spec.name}"

    async def described() -> bool:  # metadata reaches the describe call a moment after the create
        return name in await describe_topics(kafka_bootstrap, [name])

    await wait_until(described, timeout=20, what=f"{name} described")
    assert (await describe_topics(kafka_bootstrap, [name]))[name].partitions == spec.partitions
