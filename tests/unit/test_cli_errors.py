"""borgctl user mistakes: one clear line on stderr, non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.runtime.admin import CONNECT_TIMEOUT_ENV
from tests.conftest import ROOT


def borgctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "borgctl.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["tail", "no-such-topic"], "unknown topic 'no-such-topic'"),
        (["serve", "no-such-service"], "unknown service 'no-such-service'"),
        (["up", "--only", "kafka,zookeeper"], "unknown component(s) zookeeper"),
    ],
)
def test_user_errors_are_one_line(args: list[str], needle: str) -> None:
    done = borgctl(*args)
    assert done.returncode == 2
    assert needle in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_unreachable_kafka_is_reported_not_raised() -> None:
    # retrying the dead address for 2 s instead of the default 30 s tells the same story
    done = borgctl("topics", env={"KAFKA_BOOTSTRAP": "127.0.0.1:1", CONNECT_TIMEOUT_ENV: "2"})
    assert done.returncode == 1
    assert "cannot reach Kafka at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_lists_the_interface() -> None:
    done = borgctl("--help")
    for command in ("up", "down", "status", "serve", "replay", "tail", "trace", "train", "eval", "bench", "topics"):
        assert command in done.stdout
