"""Tracing export failure (collector down) must not block or slow the pipeline beyond a bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from contracts import NodeState, encode
from contracts.headers import build_headers
from tests.conftest import ROOT, wait_until
from tests.kafka_helpers import produce_raw

pytestmark = pytest.mark.integration
TS = 1_764_000_000_000
COUNT = 1500


def _state(i: int) -> NodeState:
    return NodeState(
        node=f"n{i % 10}",
        ts_ms=TS + i,
        seq=i,
        interval_ms=1000,
        source="synthetic",
        pmu="recorded",
        supported_events=[],
        cpu_util=0.1,
        mem_util=0.1,
    )


async def _time_worker(bootstrap: str, prefix: str, log: Path, endpoint: str | None) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.worker_process",
            bootstrap,
            prefix,
            f"g-{uuid.uuid4().hex}",
            str(log),
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        await wait_until(
            lambda: log.exists() and len(log.read_text().splitlines()) >= COUNT,
            timeout=120,
            what=f"{COUNT} messages handled",
        )
        elapsed = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        stop_started = time.monotonic()
        proc.wait(timeout=60)
    # Shutdown flushes spans to a dead collector: bounded by the exporter timeout, not hanging.
    assert time.monotonic() - stop_started < 30
    return elapsed


async def test_dead_collector_does_not_slow_processing(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    await produce_raw(
        kafka_bootstrap,
        f"{topic_prefix}nodestate.v1",
        [(f"n{i % 10}".encode(), encode(_state(i))) for i in range(COUNT)],
        headers=build_headers("nodestate.v1"),
    )
    baseline = await _time_worker(kafka_bootstrap, topic_prefix, tmp_path / "a.log", None)
    # Port 1 refuses connections: every export fails.
    dead = await _time_worker(kafka_bootstrap, topic_prefix, tmp_path / "b.log", "http://127.0.0.1:1")
    assert dead < baseline * 2 + 10, f"with a dead collector {dead:.1f}s vs {baseline:.1f}s without tracing"
