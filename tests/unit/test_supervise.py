"""The local-stack supervisor's pure parts (backoff, last error line) and its restart loop on stand-in commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from borgctl.supervise import Backoff, describe_exit, exit_text, last_error_line, log_tail
from tests.conftest import ROOT


def test_backoff_doubles_from_one_second_to_the_cap() -> None:
    backoff = Backoff()
    assert [backoff.delay(n, rand=0.0) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff.delay(10_000, rand=0.0) == 30.0  # no overflow on a long crash loop


def test_backoff_jitter_only_shortens_within_its_fraction() -> None:
    backoff = Backoff(jitter=0.2)
    assert backoff.delay(3, rand=0.999) == pytest.approx(4.0 * (1 - 0.2 * 0.999))
    delays = {backoff.delay(3, rand=r / 10) for r in range(10)}
    assert len(delays) == 10 and all(3.2 <= d <= 4.0 for d in delays)


def test_backoff_resets_after_a_long_enough_run() -> None:
    backoff = Backoff(reset_after_s=60.0)
    assert backoff.failures_after(5, uptime_s=59.9) == 6
    assert backoff.failures_after(5, uptime_s=60.0) == 1
    assert backoff.failures_after(0, uptime_s=0.1) == 1


def test_last_error_line_prefers_the_latest_error_record_or_traceback() -> None:
    lines = [
        json.dumps({"level": "error", "logger": "x", "msg": "early failure"}),
        json.dumps({"level": "info", "logger": "x", "msg": "fine"}),
        json.dumps({"level": "error", "logger": "x", "msg": "handler crashed", "exc": "Tb...\n  f()\nKeyError: 'a'"}),
        json.dumps({"level": "warning", "logger": "x", "msg": "not an error"}),
    ]
    assert last_error_line(lines) == "handler crashed: KeyError: 'a'"
    traceback = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "OSError: first",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "RuntimeError: final",
    ]
    assert last_error_line(lines + traceback) == "RuntimeError: final"
    # what ended the process (the uncaught traceback) beats the noise logged while it shut down
    noise = json.dumps({"level": "error", "logger": "asyncio", "msg": "Unclosed AIOKafkaProducer\nproducer: <..>"})
    assert last_error_line([*traceback, noise]) == "RuntimeError: final"
    assert last_error_line([noise]) == "Unclosed AIOKafkaProducer"  # one line
    # the supervisor's own lines and plain output are never taken for the service's error
    own = json.dumps({"level": "error", "logger": "borgctl.supervise", "msg": "gave up"})
    assert last_error_line([*lines, own, "some plain line"]) == "handler crashed: KeyError: 'a'"
    assert last_error_line(["plain", "{not json", json.dumps([1, 2])]) is None


def test_log_tail_reads_from_an_offset_and_drops_a_cut_first_line(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("old\n")
    offset = log.stat().st_size
    log.write_text("old\nnew 1\nnew 2\n")
    assert log_tail(log, offset) == ["new 1", "new 2"]
    assert log_tail(tmp_path / "missing.log", 0) == []


def test_exit_descriptions() -> None:
    assert describe_exit(-signal.SIGKILL) == {"code": None, "signal": "SIGKILL"}
    assert exit_text(describe_exit(3)) == "code 3"
    assert exit_text(describe_exit(-9)) == "signal SIGKILL"
    assert exit_text(None) == "-"


def _supervise(state: Path, code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "borgctl.supervise", "standin", "--", sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "BORG_STATE": str(state)},
        start_new_session=True,
    )


def _status(state: Path) -> dict[str, Any]:
    path = state / "services" / "standin.status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _poll(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_crashing_child_is_restarted_and_sigterm_stops_both(tmp_path: Path) -> None:
    supervisor = _supervise(tmp_path, "import time; time.sleep(0.2); raise ValueError('boom')")
    try:
        status = _poll(lambda: (s := _status(tmp_path)).get("restarts", 0) >= 1 and s, 10, "a restart")
        assert status["supervisor_pid"] == supervisor.pid
        assert status["last_error"] == "ValueError: boom"
        assert status["last_exit"]["code"] == 1
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        assert supervisor.wait(timeout=10) == 0
    assert _status(tmp_path)["state"] == "stopped"
    with pytest.raises(ProcessLookupError):
        os.killpg(supervisor.pid, 0)  # nothing of the group is left


@pytest.mark.parametrize(("code", "state"), [(0, "exited"), (2, "failed")])
def test_clean_exit_and_bad_configuration_are_not_restarted(tmp_path: Path, code: int, state: str) -> None:
    supervisor = _supervise(tmp_path, f"import sys; sys.exit({code})")
    assert supervisor.wait(timeout=10) == code
    status = _status(tmp_path)
    assert status["state"] == state and status["restarts"] == 0
