"""`borgctl serve scheduler-extender`: the kube-scheduler HTTP extender (configured by EXTENDER_* variables)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

from services.runtime.health import HealthServer
from services.runtime.pause import pause
from services.runtime.service import run_service
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.reader import StateReader
from services.scheduler_extender.scoring import ScoringConfig
from services.scheduler_extender.server import ExtenderServer
from services.scheduler_extender.settings import ExtenderSettings
from services.scheduler_extender.state import NodeStateStore

log = logging.getLogger(__name__)
SWEEP_S = 1.0


def scoring_config(s: ExtenderSettings) -> ScoringConfig:
    return ScoringConfig(
        max_slowdown=s.max_slowdown,
        min_confidence=s.min_confidence,
        anomaly_threshold=s.anomaly_threshold,
        risk_threshold=s.risk_threshold,
        risk_horizon_s=s.risk_horizon_s,
        staleness_ms=int(s.staleness_s * 1000),
        weight_slowdown=s.weight_slowdown,
        weight_risk=s.weight_risk,
        weight_anomaly=s.weight_anomaly,
        unknown_penalty=s.unknown_penalty,
        weight_forecast=s.weight_forecast,
        forecast_horizon_s=s.forecast_horizon_s,
        forecast_busy=s.forecast_busy,
        forecast_saturated=s.forecast_saturated,
        forecast_staleness_ms=int(s.forecast_staleness_s * 1000),
    )


def build(settings: ExtenderSettings) -> tuple[Extender, ExtenderServer, StateReader]:
    """The extender's parts, wired but not started (tests and the benchmark use this too)."""
    store = NodeStateStore(scoring_config(settings))
    extender = Extender(store, class_key=settings.class_key, default_class=settings.default_class)
    server = ExtenderServer(
        extender,
        host=settings.host,
        port=settings.port,
        prefix=settings.path_prefix,
        span_detail_max_nodes=settings.span_detail_max_nodes,
    )
    reader = StateReader(bootstrap=settings.kafka_bootstrap, store=store, topic_prefix=settings.topic_prefix)
    return extender, server, reader


async def sweep(store: NodeStateStore, stop: asyncio.Event) -> None:
    """Recompute cards whose inputs went stale, off the request path."""
    while not stop.is_set():
        await pause(stop, SWEEP_S)
        store.refresh_expired(int(time.time() * 1000))


async def freeze_after_catch_up(reader: StateReader) -> None:
    """Move what exists once the state is loaded (libraries, settings, server) out of the cyclic GC's sight.

    A full collection then walks only objects made later; the per-node state itself is plain tuples the
    collector untracks (see state.py). Both keep collector pauses off the scheduler's calls.
    """
    await reader.caught_up.wait()
    gc.collect()
    gc.freeze()
    log.info("gc: %d objects frozen after the state catch-up", gc.get_freeze_count())


async def body(settings: ExtenderSettings, stop: asyncio.Event, health: HealthServer) -> None:
    extender, server, reader = build(settings)
    health.add_check("http", lambda: server.running)
    health.add_check("state_caught_up", reader.caught_up.is_set)
    await server.start()
    tasks = [
        asyncio.create_task(reader.run(stop), name="state-reader"),
        asyncio.create_task(sweep(extender.store, stop), name="sweeper"),
    ]
    freezer = asyncio.create_task(freeze_after_catch_up(reader), name="gc-freeze")
    try:
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for task in done - {stopper}:
            task.result()  # a crashed reader/sweeper crashes the service (its supervisor restarts it)
    finally:
        stop.set()
        freezer.cancel()
        await server.stop()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, timeout=5)


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (EXTENDER_* plus the common KAFKA_BOOTSTRAP, BORG_TOPIC_PREFIX, ...)
    return run_service("scheduler-extender", ExtenderSettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
