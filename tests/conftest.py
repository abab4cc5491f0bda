"""Shared fixtures: the real local Kafka broker and per-test topic namespaces."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def data_dir() -> Path:
    return Path(os.environ.get("BORG_DATA_DIR", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Real trace data; tests using it carry @pytest.mark.shared_data and skip loudly without it."""
    path = data_dir()
    if not (path / "README.md").exists():
        pytest.skip(f"shared trace data not found at {path} (set BORG_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def quick_anomaly_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`borgctl train anomaly --quick` (version a1), trained once for every test that reads it: its model
    root (CURRENT, a1/). Read-only: a test that changes a model copies it first."""
    from training.anomaly.cli import train_anomaly

    root = tmp_path_factory.mktemp("quick-models") / "anomaly"
    assert train_anomaly(["--quick", "-q", "--out", str(root), "--version", "a1"]) == 0
    return root


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The real broker from infra/kafka/kafka.sh (started here when not running)."""
    script = ROOT / "infra" / "kafka" / "kafka.sh"
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, check=False)
    if status.returncode != 0:
        started = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, check=False)
        if started.returncode != 0:
            pytest.fail(f"could not start Kafka:\n{started.stdout}\n{started.stderr}")
    yield BOOTSTRAP


@pytest.fixture
async def topic_prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    """A unique topic namespace for one test, with every registry topic created in it."""
    from services.runtime.admin import create_topics

    prefix = f"t{uuid.uuid4().hex[:10]}-"
    await create_topics(kafka_bootstrap, prefix=prefix)
    yield prefix
    from loadtests.procs import delete_topics

    await delete_topics(kafka_bootstrap, prefix)


async def broker_topics(bootstrap: str) -> set[str]:
    """Every topic on the broker (for tests that check what a command left behind)."""
    from services.runtime.admin import connect_admin

    admin = await connect_admin(bootstrap, timeout_s=10)
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def wait_until(predicate, *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll until predicate() is truthy; fail with `what` after timeout (never a bare sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


def env_aliases(alias: object) -> list[str]:
    """The environment names a settings field's ``validation_alias`` accepts (a str or ``AliasChoices``)."""
    if alias is None:
        return []
    choices = getattr(alias, "choices", None)
    if choices is None:
        return [str(alias)]
    return [c for c in choices if isinstance(c, str)]
