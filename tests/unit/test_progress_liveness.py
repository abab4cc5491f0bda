"""Liveness from progress: Progress with a fake clock, and /healthz answering 503 when a check fails."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.runtime.health import HealthServer
from services.runtime.progress import Progress
from services.runtime.settings import RuntimeSettings


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_lag_without_a_commit_for_the_stall_timeout_is_a_stall() -> None:
    clock = FakeClock()
    progress = Progress(stall_after_s=120, clock=clock)
    progress.note_lag(500)
    clock.now += 119.9
    assert progress.check() is None
    clock.now += 0.1
    reason = progress.check()
    assert reason is not None and "input lag 500" in reason and "120s" in reason


def test_commits_keep_a_lagging_stage_alive() -> None:
    clock = FakeClock()
    progress = Progress(stall_after_s=120, clock=clock)
    for _ in range(10):  # behind all along, but committing: slow, not stalled
        progress.note_lag(10_000)
        clock.now += 100
        progress.note_commit()
    assert progress.check() is None
    clock.now += 120
    assert progress.check() is not None


def test_recommitting_the_same_offsets_is_not_progress() -> None:
    clock = FakeClock()
    progress = Progress(stall_after_s=120, clock=clock)
    progress.note_lag(50)
    progress.note_commit({("t", 0): 10, ("t", 1): 4})
    for _ in range(13):  # a timer commits the same positions every 10 s while nothing is handled
        clock.now += 10
        progress.note_commit({("t", 0): 10, ("t", 1): 4})
    assert progress.check() is not None
    progress.note_commit({("t", 0): 10, ("t", 1): 5})  # one partition moved: progress
    assert progress.check() is None
    clock.now += 100
    progress.note_commit({("t", 2): 0})  # a newly assigned partition's first commit counts too
    clock.now += 100
    assert progress.check() is None


def test_an_idle_stage_is_alive_and_new_input_starts_the_clock() -> None:
    clock = FakeClock()
    progress = Progress(stall_after_s=60, clock=clock)
    progress.note_lag(0)
    clock.now += 3600  # an hour without input or commits
    assert progress.check() is None
    progress.note_lag(5)  # input arrives: the hour of idleness does not count
    assert progress.check() is None
    clock.now += 59
    progress.note_lag(7)  # still lagging: the clock keeps running from when input started waiting
    assert progress.check() is None
    clock.now += 1
    assert progress.stalled(clock.now) is not None
    progress.note_lag(0)  # caught up (e.g. partitions revoked or drained): alive again
    assert progress.check() is None


def test_stall_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stall_after_s"):
        Progress(stall_after_s=0)


def test_stall_setting_default_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RuntimeSettings().health_stall_after_s == 120.0
    monkeypatch.setenv("HEALTH_STALL_AFTER_S", "45")
    assert RuntimeSettings().health_stall_after_s == 45.0
    monkeypatch.setenv("HEALTH_STALL_AFTER_S", "0")
    with pytest.raises(ValueError, match="HEALTH_STALL_AFTER_S"):
        RuntimeSettings()


async def test_healthz_answers_503_with_the_reasons_of_failing_checks() -> None:
    clock = FakeClock()
    progress = Progress(stall_after_s=30, clock=clock)
    health = HealthServer("127.0.0.1", 0)
    health.add_liveness("stream", progress.check)
    health.add_liveness("other", lambda: None)
    client: TestClient[Any, Any] = TestClient(TestServer(health.app))
    await client.start_server()
    try:
        resp = await client.get("/healthz")
        assert resp.status == 200 and await resp.json() == {"status": "ok"}
        progress.note_lag(3)
        clock.now += 31
        resp = await client.get("/healthz")
        body = await resp.json()
        assert resp.status == 503 and body["status"] == "unhealthy"
        assert set(body["checks"]) == {"stream"} and "input lag 3" in body["checks"]["stream"]
        progress.note_commit()
        assert (await client.get("/healthz")).status == 200

        def broken() -> str | None:
            raise RuntimeError("bug in a check")

        health.add_liveness("broken", broken)
        resp = await client.get("/healthz")
        assert resp.status == 503 and "bug in a check" in (await resp.json())["checks"]["broken"]
    finally:
        await client.close()
