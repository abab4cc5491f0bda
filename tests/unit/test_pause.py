"""pause(): the loops' timed wait that a stop request cuts short."""

from __future__ import annotations

import asyncio
import time

from services.runtime.pause import pause


async def test_it_waits_the_time_when_nobody_stops() -> None:
    started = time.monotonic()
    assert await pause(asyncio.Event(), 0.05) is False
    assert time.monotonic() - started >= 0.045


async def test_a_stop_cuts_it_short_and_says_so() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, stop.set)
    started = time.monotonic()
    assert await pause(stop, 30) is True
    assert time.monotonic() - started < 5
    assert await pause(stop, 30) is True  # already set: at once
