"""Kafka over TLS + SASL/SCRAM against a real second broker (``infra/kafka/kafka.sh secure-start``).

The secure broker has one client listener, SASL_SSL with SCRAM-SHA-512/256 and a self-signed CA;
the shared plaintext broker on 9092 is never touched. A real features process, configured only by
KAFKA_* environment variables (password from a file, as a mounted Kubernetes Secret), consumes,
keeps changelog state and produces over it; ``borgctl topics create`` makes the topics and the
test's own side uses the runtime's Producer and TopicReader (admin + consumer) with the same
settings. A wrong password and a plaintext client are refused fast.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError

from contracts import FeatureVector, NodeState, decode
from services.runtime.kafka_security import KafkaAccessError, check_access, kafka_client_options
from services.runtime.producer import Producer
from services.runtime.topic_reader import Outcome, TopicReader
from tests.integration.test_stream_pipeline import running, scenario, spawn, wait_ready

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "infra" / "kafka" / "kafka.sh"
pytestmark = [pytest.mark.integration]


def _kafka_sh(command: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), command], capture_output=True, text=True, check=False,
                          timeout=timeout)


@pytest.fixture(scope="module")
def secure_broker() -> Iterator[dict[str, str]]:
    """The private SASL_SSL broker; stopped after this module unless it was already running before."""
    was_up = _kafka_sh("secure-status").returncode == 0
    started = _kafka_sh("secure-start")
    if started.returncode != 0:
        pytest.fail(f"could not start the secure Kafka broker:\n{started.stdout}\n{started.stderr}")
    env = dict(line.split("=", 1) for line in _kafka_sh("secure-env").stdout.splitlines() if "=" in line)
    yield env
    if not was_up:
        _kafka_sh("secure-stop", timeout=60)


@pytest.fixture
def secure_env(secure_broker: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This process's clients configured for the secure broker (the options are cached per process)."""
    for name, value in secure_broker.items():
        monkeypatch.setenv(name, value)
    kafka_client_options.cache_clear()
    yield secure_broker
    kafka_client_options.cache_clear()


async def test_features_stage_runs_end_to_end_over_sasl_ssl(secure_env: dict[str, str], tmp_path: Path) -> None:
    bootstrap = secure_env["KAFKA_BOOTSTRAP"]
    prefix = f"sec{uuid.uuid4().hex[:8]}-"
    await check_access(bootstrap)
    # borgctl reads the same variables: creates the registry's topics, then describes them (exit 0 = all match)
    created = await asyncio.to_thread(
        subprocess.run, [str(ROOT / ".venv" / "bin" / "borgctl"), "topics", "create", "--prefix", prefix],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    assert f"{prefix}features.v1" in created.stdout
    sc = scenario(nodes=4, ticks=30, seed=3)
    assert sc.expected_windows  # the offline computation closes windows for this traffic
    service = spawn("features", bootstrap, prefix, tmp_path, **secure_env)
    with running(service):
        await wait_ready((service,), timeout=60)
        producer = Producer(bootstrap=bootstrap, client_id="sec-test", topic_prefix=prefix)
        await producer.start()
        try:
            for state in sc.states:
                await producer.send("nodestate.v1", state["node"], NodeState.model_validate(state))
        finally:
            await producer.stop()

        windows: set[tuple[str, int]] = set()

        def apply(base: str, record: ConsumerRecord[Any, Any], now_ms: int) -> Outcome:
            vector = decode(FeatureVector, record.value)
            windows.add((vector.node, vector.ts_ms))
            return "applied"

        stop = asyncio.Event()
        reader = TopicReader(bootstrap=bootstrap, topics=["features.v1"], apply=apply, topic_prefix=prefix,
                             client_id="sec-test-reader")
        task = asyncio.create_task(reader.run(stop))
        try:
            deadline = time.monotonic() + 45
            while windows != sc.expected_windows and time.monotonic() < deadline:
                assert service.proc.poll() is None, f"features exited:\n{service.tail()}"
                await asyncio.sleep(0.2)
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
    assert windows == sc.expected_windows, f"{len(windows)} of {len(sc.expected_windows)} windows over SASL_SSL"
    assert reader.stats.restarts == 0


async def test_wrong_password_stops_a_service_at_start_with_a_clear_error(
    secure_env: dict[str, str], tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    service = spawn("features", secure_env["KAFKA_BOOTSTRAP"], "unused-", tmp_path,
                    **{**secure_env, "KAFKA_SASL_PASSWORD_FILE": str(wrong)})
    with running(service):
        code = await asyncio.to_thread(service.proc.wait, 30)
    log = service.tail()
    assert code == 2, log
    assert "Kafka access refused" in log and "refused SASL user 'borg'" in log, log
    assert "not-the-password" not in log


async def test_wrong_password_in_process_is_refused_not_retried(secure_env: dict[str, str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_SASL_PASSWORD_FILE")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "not-the-password")
    kafka_client_options.cache_clear()
    started = time.monotonic()
    with pytest.raises(KafkaAccessError, match="KAFKA_SASL_PASSWORD"):
        await check_access(secure_env["KAFKA_BOOTSTRAP"])
    assert time.monotonic() - started < 10


async def test_a_plaintext_client_is_refused(secure_broker: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=secure_broker["KAFKA_BOOTSTRAP"], request_timeout_ms=5000)
    started = time.monotonic()
    try:
        with pytest.raises(KafkaConnectionError):
            await admin.start()
    finally:
        await admin.close()
    assert time.monotonic() - started < 10
