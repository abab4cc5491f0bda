"""`borgctl up/status/topics` against the real broker (the restart test is test_zz_broker_restart.py)."""

from __future__ import annotations

import pytest

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
    assert "regimes.v1                      6  compact" in done.stdout  # read-only, still registered
    assert "regimes.v2                      6  compact" in done.stdout
    assert "risk.v2                         6  compact" in done.stdout
