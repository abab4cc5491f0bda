"""`borgctl serve dashboard`: the live dashboard (configured by DASHBOARD_* variables, see settings.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from services.dashboard.monitor import PipelineMonitor
from services.dashboard.reader import DashboardReader
from services.dashboard.server import DashboardServer
from services.dashboard.settings import DashboardSettings
from services.dashboard.state import DashboardState
from services.runtime.health import HealthServer
from services.runtime.service import run_service

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dashboard:
    state: DashboardState
    reader: DashboardReader
    monitor: PipelineMonitor
    server: DashboardServer


def build(settings: DashboardSettings) -> Dashboard:
    """The dashboard's parts, wired but not started (tests use this too)."""
    state = DashboardState(settings.state_config())
    reader = DashboardReader(
        bootstrap=settings.kafka_bootstrap,
        state=state,
        topic_prefix=settings.topic_prefix,
        start=settings.start,
        lookback_minutes=settings.lookback_minutes,
        read_features=settings.read_features,
    )
    monitor = PipelineMonitor(
        bootstrap=settings.kafka_bootstrap,
        state=state,
        topic_prefix=settings.topic_prefix,
        interval_s=settings.offsets_interval_s,
    )
    server = DashboardServer(state, host=settings.host, port=settings.port, push_interval_s=settings.push_interval_s,
                             arena_results=settings.arena_results,
                             jaeger_query_url=settings.jaeger_query_url or settings.jaeger_url)
    server.add_check("state_caught_up", reader.caught_up.is_set)
    return Dashboard(state=state, reader=reader, monitor=monitor, server=server)


async def body(settings: DashboardSettings, stop: asyncio.Event, health: HealthServer) -> None:
    parts = build(settings)
    health.add_check("http", lambda: parts.server.running)
    health.add_check("state_caught_up", parts.reader.caught_up.is_set)
    await parts.server.start()
    tasks = [
        asyncio.create_task(parts.reader.run(stop), name="dashboard-reader"),
        asyncio.create_task(parts.monitor.run(stop), name="dashboard-monitor"),
    ]
    try:
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for task in done - {stopper}:
            task.result()  # a crashed reader or monitor crashes the service (its supervisor restarts it)
    finally:
        stop.set()
        await parts.server.stop()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, timeout=5)


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (DASHBOARD_* plus the common KAFKA_BOOTSTRAP, BORG_TOPIC_PREFIX, ...)
    return run_service("dashboard", DashboardSettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
