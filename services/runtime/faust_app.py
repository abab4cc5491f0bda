"""faust-streaming apps for the stream processors: namespaced, web-less, memory store + changelog.

Every name faust derives from the app id — the consumer group, table changelog topics
(``<id>-<table>-changelog``) and its internal assignor topic — starts with
``BORG_TOPIC_PREFIX``, so tests with unique prefixes share one broker safely. Faust's web
server is disabled (it would bind 0.0.0.0:6066): health, readiness and metrics come from
the runtime's ``HealthServer`` on ``HEALTH_HOST:HEALTH_PORT``. RocksDB is not installed, so
tables use the memory store and are rebuilt from their changelog topics on start;
``FAUST_DATADIR`` is where faust keeps its small local files.

The app is started with ``await app.start()`` inside ``run_service`` (no faust Worker, no
CLI): signals, logging and tracing stay the runtime's.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import faust
from pydantic import Field

from services.runtime.health import HealthServer
from services.runtime.settings import RuntimeSettings

log = logging.getLogger(__name__)
PARTITIONS = 6
"""Partitions of every keyed stream topic (contracts/topics.py) and therefore of the tables."""


class StreamSettings(RuntimeSettings):
    """Settings every faust stream processor shares (explicit env names, no service prefix)."""

    faust_datadir: Path | None = Field(default=None, validation_alias="FAUST_DATADIR",
                                       description="faust's local directory (default: a temp dir per process)")
    faust_commit_interval_s: float = Field(default=1.0, gt=0, le=60, validation_alias="FAUST_COMMIT_INTERVAL_S")
    faust_replication_factor: int = Field(default=1, ge=1, le=5, validation_alias="FAUST_REPLICATION_FACTOR")
    faust_session_timeout_s: float = Field(
        default=10.0, ge=6.0, le=300.0, validation_alias="FAUST_SESSION_TIMEOUT_S",
        description="how long a crashed member holds its partitions before the group rebalances without it")
    batch_max: int = Field(default=500, ge=1, le=20_000, validation_alias="STREAM_BATCH_MAX",
                           description="events handled per batch (one producer flush per batch)")
    batch_within_s: float = Field(default=0.02, gt=0, le=5, validation_alias="STREAM_BATCH_WITHIN_S",
                                  description="longest wait to fill a batch")
    flush_each_batch: bool = Field(
        default=False, validation_alias="STREAM_FLUSH_EACH_BATCH",
        description="wait for the broker to acknowledge each batch's outputs (else: before each offset commit)")
    model_poll_s: float = Field(default=5.0, gt=0, le=3600, validation_alias="MODEL_POLL_S",
                                description="how often the model directory's CURRENT is checked")


def app_id(service: str, prefix: str) -> str:
    return f"{prefix}borg-{service}"


def make_app(service: str, settings: StreamSettings) -> faust.App:
    datadir = settings.faust_datadir or Path(tempfile.mkdtemp(prefix=f"borg-faust-{service}-"))
    brokers = ";".join(f"kafka://{h.strip()}" for h in settings.kafka_bootstrap.split(",") if h.strip())
    return faust.App(
        app_id(service, settings.topic_prefix),
        broker=brokers,
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        autodiscover=False,
        topic_partitions=PARTITIONS,
        topic_replication_factor=settings.faust_replication_factor,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=settings.faust_commit_interval_s,
        broker_commit_every=max(1000, settings.batch_max),
        broker_max_poll_records=max(1000, settings.batch_max),
        stream_buffer_maxsize=max(4096, 4 * settings.batch_max),
        processing_guarantee="at_least_once",
        table_standby_replicas=0,
        producer_linger_ms=5,
        stream_wait_empty=False,
        broker_session_timeout=settings.faust_session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.faust_session_timeout_s / 5),
        broker_rebalance_timeout=max(30.0, 3 * settings.faust_session_timeout_s),
    )


def raw_topic(app: faust.App, name: str) -> Any:
    """A source topic whose events carry the original bytes (decoded by ``contracts``, not faust).

    faust would otherwise JSON-decode every value itself and, on a malformed one, fail the
    stream instead of letting the processor dead-letter it.
    """
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
                     partitions=PARTITIONS)


def table_extra_config() -> dict[str, Any]:
    """Changelog topics compact soon, so a restart replays little more than the live state."""
    return {"segment.bytes": str(64 * 1024 * 1024), "segment.ms": str(10 * 60 * 1000),
            "min.cleanable.dirty.ratio": "0.2"}


def is_ready(app: faust.App) -> bool:
    """Partitions assigned, not rebalancing, tables recovered from their changelogs."""
    try:
        if app.rebalancing or not app.consumer.assignment():
            return False
        recovery = app.tables.recovery  # type: ignore[attr-defined]
        return bool(recovery.completed.is_set()) and not recovery.in_recovery
    except Exception:  # consumer not started yet
        return False


async def run_app(
    app: faust.App,
    stop: asyncio.Event,
    health: HealthServer,
    *,
    on_ready: Callable[[], Awaitable[None]] | None = None,
    tasks: tuple[Callable[[asyncio.Event], Coroutine[Any, Any, None]], ...] = (),
) -> None:
    """Start ``app``, run side tasks (model watchers), stop on ``stop`` or when faust crashes."""
    health.add_check("faust", lambda: is_ready(app))
    await app.start()
    side: list[asyncio.Task[None]] = [asyncio.create_task(t(stop), name=getattr(t, "__name__", "side")) for t in tasks]
    crashed = asyncio.create_task(app._crashed.wait())
    stopping = asyncio.create_task(stop.wait())
    try:
        if on_ready is not None:
            await on_ready()
        await asyncio.wait({crashed, stopping, *side}, return_when=asyncio.FIRST_COMPLETED)
        if crashed.done():
            raise RuntimeError(f"faust app {app.conf.id} crashed: {app._crash_reason!r}")
        for task in side:
            error = task.exception() if task.done() else None
            if error is not None:
                raise error
    finally:
        for pending in (crashed, stopping, *side):
            pending.cancel()
        await app.stop()
        log.info("faust app %s stopped", app.conf.id)
