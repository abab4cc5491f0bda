"""`borgctl up`'s supervisor with a real service: a SIGKILLed features process comes back on its own.

The features service runs as `borgctl up` runs it (stack.service_up: supervisor + `borgctl serve
features`, detached) in a private state dir against the real broker with a unique topic prefix.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from borgctl import stack
from borgctl.registry import service
from loadtests.procs import free_port
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def _status(state: Path) -> dict[str, Any]:
    path = state / "services" / "features.status.json"
    try:
        value: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value


async def _ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as resp,
        ):
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def test_a_killed_service_is_restarted_and_down_stops_everything(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BORG_STATE", str(tmp_path))
    entry = service("features")
    port = free_port()
    env = {
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "BORG_TOPIC_PREFIX": topic_prefix,
        "HEALTH_PORT": str(port),
        "STREAM_SESSION_TIMEOUT_S": "6",  # the killed member leaves the group sooner
    }
    log = tmp_path / "services" / "features.log"
    started = stack.service_up(entry, extra_env=env)
    supervisor = int((tmp_path / "services" / "features.pid").read_text())
    children: list[int] = []
    try:
        assert "started" in started
        first = await wait_until(lambda: _status(tmp_path).get("pid"), timeout=30, what="the first child pid")
        children.append(first)
        await wait_until(lambda: _ready(port), timeout=90, what="features ready")
        os.kill(first, signal.SIGKILL)
        restarted = await wait_until(
            lambda: (s := _status(tmp_path)).get("restarts") == 1 and s.get("state") == "running" and s,
            timeout=30, what="a restart in the status file",
        )
        assert restarted["pid"] != first and restarted["last_exit"]["signal"] == "SIGKILL"
        children.append(restarted["pid"])
        await wait_until(lambda: _ready(port), timeout=90, what="features ready again after the restart")
        assert psutil.Process(restarted["pid"]).ppid() == supervisor
        line = stack.service_state(entry)
        assert line.startswith(f"running (pid {restarted['pid']}, restarts 1)"), line
    except AssertionError:
        print(log.read_text()[-4000:] if log.exists() else "(no log)")
        raise
    finally:
        assert stack.service_down(entry) == "features: stopped"
    for pid in [supervisor, *children]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    with pytest.raises(ProcessLookupError):
        os.killpg(supervisor, 0)
    assert stack.service_state(entry) == "stopped"
    assert _status(tmp_path)["state"] == "stopped"  # the supervisor stopped on SIGTERM, it was not killed
