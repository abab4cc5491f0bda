"""`borgctl up/status/topics` against the real broker, and a restart that keeps the data."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.conftest import ROOT
from tests.kafka_helpers import consume, produce_raw
from tests.unit.test_cli_errors import borgctl

pytestmark = pytest.mark.integration


def test_up_is_idempotent_and_status_reports_kafka(kafka_bootstrap: str) -> None:
    first = borgctl("up", "--only", "kafka")
    assert first.returncode == 0, first.stderr
    second = borgctl("up", "--only", "kafka")
    assert second.returncode == 0
    assert "already running" in second.stdout
    assert "topics: 0 created (all present)" in second.stdout
    status = borgctl("status")
    assert status.returncode == 0
    kafka_line = next(line for line in status.stdout.splitlines() if line.startswith("kafka "))
    assert "127.0.0.1:9092" in kafka_line and "healthy" in kafka_line


def test_topics_match_the_registry(kafka_bootstrap: str) -> None:
    done = borgctl("topics")
    assert done.returncode == 0, done.stdout
    assert "MISSING" not in done.stdout and "DIFFERS" not in done.stdout
    assert "regimes.v1                      6  compact" in done.stdout


async def test_restart_keeps_data(kafka_bootstrap: str) -> None:
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    await produce_raw(kafka_bootstrap, topic, [(b"k", b"survives a restart")])
    script = ROOT / "infra" / "kafka" / "kafka.sh"
    try:
        stopped = subprocess.run(["bash", str(script), "stop"], capture_output=True, text=True, timeout=60, check=False)
        assert "stopped" in stopped.stdout
        down = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, check=False)
        assert down.returncode == 3 and "down" in down.stdout
    finally:
        started = subprocess.run(
            ["bash", str(script), "start"], capture_output=True, text=True, timeout=120, check=False
        )
    assert started.returncode == 0, started.stderr
    [record] = await consume(kafka_bootstrap, topic, 1)
    assert record.value == b"survives a restart"
