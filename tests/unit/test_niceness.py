"""STREAM_NICE: a stream processor raises every thread of its process to its niceness, never lowers it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.runtime.batch_stream import BatchStream
from services.runtime.settings import load_settings
from services.runtime.stream_settings import StreamSettings

ROOT = Path(__file__).resolve().parents[2]

# In a child process: niceness is per thread on Linux and cannot be lowered again unprivileged.
CHILD = textwrap.dedent("""
    import os, threading
    from services.runtime.tuning import run_at_niceness

    base = os.getpriority(os.PRIO_PROCESS, 0)
    started = threading.Event()
    stop = threading.Event()
    ids = {}

    def early():
        ids["early"] = threading.get_native_id()
        started.set()
        stop.wait()

    t = threading.Thread(target=early)
    t.start()
    started.wait()
    target = base + 3
    got = run_at_niceness(target)
    late = {}
    u = threading.Thread(target=lambda: late.setdefault("late", os.getpriority(os.PRIO_PROCESS, 0)))
    u.start(); u.join()
    lower = run_at_niceness(base)
    print(target, got, os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, ids["early"]),
          late["late"], lower, os.getpriority(os.PRIO_PROCESS, 0))
    stop.set(); t.join()
""")


def test_every_thread_is_raised_and_never_lowered() -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) > 16:
        pytest.fail("the test process already runs at niceness > 16: no room to raise it by 3")
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
    target, got, main_thread, early_thread, late_thread, after_lower, main_after = map(int, out)
    assert got == target
    assert main_thread == early_thread == late_thread == target  # running threads too, and new ones inherit
    assert after_lower == main_after == target  # asking for less keeps what is in effect


def test_setting_overrides_the_service_default(monkeypatch: pytest.MonkeyPatch) -> None:
    async def handle(batch: object) -> None:
        return None

    def stream(default: int) -> BatchStream:
        return BatchStream(service="s", settings=load_settings(StreamSettings), sink=None,  # type: ignore[arg-type]
                           topics=[], handle=handle, nice=default)

    assert stream(10).nice == 10
    monkeypatch.setenv("STREAM_NICE", "0")
    assert stream(10).nice == 0
    monkeypatch.setenv("STREAM_NICE", "19")
    assert stream(0).nice == 19
