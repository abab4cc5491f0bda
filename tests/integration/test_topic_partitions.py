"""Partition counts are a setting (issue 26 item 4): topics created with ``BORG_TOPIC_PARTITIONS`` run a
stateful stage whose changelog follows them; a stage started without the setting refuses those topics at
start-up, naming it (real broker, the regime stage as a real process)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from contracts.topics import REGIMES_TOPIC
from loadtests.procs import delete_topics
from services.runtime.admin import create_topics, describe_topics
from services.runtime.settings import CO_PARTITIONED, parse_topic_partitions
from tests.integration.test_stream_pipeline import running, spawn, wait_ready

pytestmark = [pytest.mark.integration]
COUNT = 3


async def test_a_stage_follows_the_configured_counts_and_refuses_topics_made_otherwise(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}-"
    setting = ",".join(f"{name}={COUNT}" for name in sorted(CO_PARTITIONED))
    counts = parse_topic_partitions(setting)
    await create_topics(kafka_bootstrap, prefix=prefix, partitions=counts)
    try:
        made = await describe_topics(kafka_bootstrap, [f"{prefix}features.v1", f"{prefix}{REGIMES_TOPIC}",
                                                       f"{prefix}decisions.v1"])
        assert [made[f"{prefix}{t}"].partitions for t in ("features.v1", REGIMES_TOPIC, "decisions.v1")] == \
            [COUNT, COUNT, 3]

        configured = spawn("regime", kafka_bootstrap, prefix, tmp_path, BORG_TOPIC_PARTITIONS=setting)
        with running(configured):
            await wait_ready((configured,), timeout=90)
        changelog = f"{prefix}borg-regime-hysteresis-changelog"
        assert (await describe_topics(kafka_bootstrap, [changelog]))[changelog].partitions == COUNT

        (tmp_path / "unset").mkdir()
        unset = spawn("regime", kafka_bootstrap, prefix, tmp_path / "unset")
        with running(unset):
            assert unset.proc.wait(60) != 0, "a stage without the setting must refuse the topics"
        log = unset.log.read_text(errors="replace")
        assert f"topic {prefix}features.v1 has {COUNT} partitions, expected 6" in log, unset.tail()
        assert "BORG_TOPIC_PARTITIONS" in log, unset.tail()
    finally:
        await delete_topics(kafka_bootstrap, prefix)
