"""The one way a loop waits between rounds: a timed sleep that a stop request cuts short."""

from __future__ import annotations

import asyncio


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``, or less when ``stop`` is set meanwhile; True when it is set (the caller ends its loop)."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return stop.is_set()
    return True
