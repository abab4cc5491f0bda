"""A broker restart that keeps the data (last of the integration tests, by file name).

It runs last on purpose: right after a restart, stream processors started at once were seen
to spin on producer metadata for a new changelog topic (aiokafka kept refreshing metadata
for a partition it believed leaderless) while the broker reported every leader; tests that
need a restarted broker (tests/integration/test_node_agent_outage.py) wait for it
themselves.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.conftest import ROOT
from tests.kafka_helpers import consume, produce_raw, wait_until_serving

pytestmark = pytest.mark.integration


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
    # the tests after this one create topics at once: let the restarted broker settle first
    waited = await wait_until_serving(kafka_bootstrap)
    print(f"\nrestarted broker served a new topic after {waited:.1f}s")
    [record] = await consume(kafka_bootstrap, topic, 1)
    assert record.value == b"survives a restart"
