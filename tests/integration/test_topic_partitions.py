"""Partition counts are a setting (issue 26 item 4): topics created with ``BORG_TOPIC_PARTITIONS`` run a
stateful stage whose changelog follows them; a stage started without the setting refuses those topics at
start-up, naming it (real broker, the regime stage as a real process)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from contracts.topics import REGIMES_TOPIC
from loadtests.procs import delete_topics
from services.runtime.admin import check_partitions, create_topics
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
        # the broker's metadata may lag the creation: check_partitions waits for the topics, then compares
        await check_partitions(kafka_bootstrap, {f"{prefix}features.v1": COUNT, f"{prefix}{REGIMES_TOPIC}": COUNT,
                                                 f"{prefix}decisions.v1": 3}, wait_s=20)

        configured = spawn("regime", kafka_bootstrap, prefix, tmp_path, BORG_TOPIC_PARTITIONS=setting)
        with running(configured):
            await wait_ready((configured,), timeout=90)
        changelog = f"{prefix}borg-regime-hysteresis-changelog"
        await check_partitions(kafka_bootstrap, {changelog: COUNT}, wait_s=20)

        (tmp_path / "unset").mkdir()
        unset = spawn("regime", kafka_bootstrap, prefix, tmp_path / "unset")
        with running(unset):
            assert unset.proc.wait(60) != 0, "a stage without the setting must refuse the topics"
        log = unset.log.read_text(errors="replace")
        assert f"topic {prefix}features.v1 has {COUNT} partitions, expected 6" in log, unset.tail()
        assert "BORG_TOPIC_PARTITIONS" in log, unset.tail()
    finally:
        await delete_topics(kafka_bootstrap, prefix)
