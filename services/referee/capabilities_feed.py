"""Publishes what the cluster's API can carry out to capabilities.v1, for the agents.

The actuator already reads API discovery to refuse unsupported actions; this loop puts the same
answer on a compacted topic at start and every ``REFEREE_CAPABILITIES_REFRESH_S``, so the agents
stop proposing what would only be refused (docs/decision_plane.md, "Capabilities").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from contracts.topics import CAPABILITIES_TOPIC
from services.referee.capabilities import Capabilities
from services.runtime.pause import pause
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)
RETRY_UNKNOWN_S = 10.0
"""How soon to ask again while discovery has not answered (the actuator keeps its own back-off)."""


class Discovers(Protocol):
    async def capabilities(self) -> Capabilities | None: ...


async def publish_capabilities(actuator: Discovers, sink: Sink, *, cluster: str, reporter: str, refresh_s: float,
                               stop: asyncio.Event) -> None:
    """Until ``stop``: read the capabilities (the actuator re-reads discovery once they are ``refresh_s`` old)
    and write them, keyed by the cluster; a failure to write is logged and retried, never fatal."""
    while not stop.is_set():
        wait_s = refresh_s
        try:
            caps = await actuator.capabilities()
            if caps is None:
                wait_s = RETRY_UNKNOWN_S
            else:
                record = caps.report(cluster, int(time.time() * 1000), reporter)
                await sink.send(CAPABILITIES_TOPIC, cluster, record, None)
                await sink.flush()
        except Exception as exc:  # the referee's decisions must not depend on this side channel
            log.warning("capabilities.v1 not written (%s: %s); again in %.0f s", type(exc).__name__, exc,
                        RETRY_UNKNOWN_S)
            wait_s = RETRY_UNKNOWN_S
        await pause(stop, wait_s)
