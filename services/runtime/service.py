"""Running one service process: logging, tracing, health endpoint, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from services.runtime.health import HealthServer
from services.runtime.kafka_security import KafkaAccessError, check_access
from services.runtime.kube_client import KubeConfigError
from services.runtime.logs import setup_logging
from services.runtime.settings import RuntimeSettings, load_settings
from services.runtime.telemetry import setup_tracing, shutdown_tracing

log = logging.getLogger(__name__)
S = TypeVar("S", bound=RuntimeSettings)
ServiceBody = Callable[[S, asyncio.Event, HealthServer], Coroutine[Any, Any, None]]


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def _supervise(name: str, settings: S, body: ServiceBody[S]) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    await check_access(settings.kafka_bootstrap)
    health = HealthServer(settings.health_host, settings.health_port)
    await health.start()
    task: asyncio.Task[None] = asyncio.create_task(body(settings, stop, health), name=name)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        stopper.cancel()
        await health.stop()
        task.result()  # re-raise a crash
        return
    log.info("stop requested; finishing in-flight work (grace %.0fs)", settings.shutdown_grace_s)
    try:
        await asyncio.wait_for(task, timeout=settings.shutdown_grace_s)
    except TimeoutError:
        log.warning("grace period exceeded; cancelling")
        task.cancel()
    finally:
        await health.stop()


def run_service(name: str, settings_cls: type[S], body: ServiceBody[S]) -> int:
    """Entry point for `borgctl serve <name>`: returns the process exit code."""
    settings = load_settings(settings_cls)
    setup_logging(name, settings.log_level, settings.log_format)
    setup_tracing(name, None if settings.otel_sdk_disabled else settings.otel_endpoint, settings.otel_sample_ratio,
                  sampler=settings.otel_traces_sampler, sampler_arg=settings.otel_traces_sampler_arg,
                  protocol=settings.otel_exporter_otlp_protocol, insecure=settings.otel_exporter_otlp_insecure)
    try:
        asyncio.run(_supervise(name, settings, body))
    except KafkaAccessError as exc:
        # Bad credentials or trust: one line naming what to fix, not a traceback or a retry loop.
        print(f"{name}: Kafka access refused: {exc}", file=sys.stderr)
        return 2
    except KubeConfigError as exc:
        print(f"{name}: no Kubernetes access: {exc}", file=sys.stderr)
        return 2
    finally:
        shutdown_tracing()
    log.info("stopped")
    return 0


def serve_main(name: str, doc: str | None, settings_cls: type[S], body: ServiceBody[S], argv: list[str],
               refused: type[Exception] | None = None) -> int:
    """A service's ``main(argv)``: ``-h`` prints its doc; a ``refused`` error at start-up exits 2 with its message."""
    if argv and argv[0] in ("-h", "--help"):
        print(doc)
        return 0
    if refused is None:
        return run_service(name, settings_cls, body)
    try:
        return run_service(name, settings_cls, body)
    except refused as exc:
        print(f"{name}: model refused: {exc}", file=sys.stderr)
        return 2
