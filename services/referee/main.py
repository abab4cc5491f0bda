"""`borgctl serve referee`: proposals.v1 → decisions.v1 + actions.v1, applied to Kubernetes per REFEREE_MODE."""

from __future__ import annotations

import asyncio
import logging

from services.referee.loop import Referee
from services.referee.settings import RefereeSettings
from services.runtime.health import HealthServer
from services.runtime.service import run_service
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)


async def body(settings: RefereeSettings, stop: asyncio.Event, health: HealthServer) -> None:
    sink = Sink(bootstrap=settings.kafka_bootstrap, service="referee", topic_prefix=settings.topic_prefix)
    await sink.start()
    actuator = None
    try:
        if settings.mode != "shadow":
            from services.referee.actuator import KubeActuator

            actuator = await KubeActuator.connect(settings)
        referee = Referee(settings, sink, actuator)
        health.add_check("kafka", referee.is_ready)
        health.add_liveness("kafka", referee.stream().progress.check)
        log.info("referee in %s mode (window %d ms)", settings.mode, settings.window_ms)
        await referee.run(stop)
    finally:
        await sink.stop()
        if actuator is not None:
            await actuator.close()


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (REFEREE_*)
    return run_service("referee", RefereeSettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
