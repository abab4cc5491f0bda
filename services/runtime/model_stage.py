"""Start-up shared by the model stages (regime, anomaly, risk, forecast, pod-pressure, drift).

Each stage's ``main.py`` keeps what differs (which models it watches, what it restores before
consuming); this module holds the rest: a hot-swapped model, an optional progressive rollout
followed from the first batch, one Sink, the stream with its side tasks, and ``main(argv)`` where a
model refused at start-up exits 2.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from services.runtime.batch_stream import BatchStream, run_stream
from services.runtime.health import HealthServer
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from services.runtime.rollout import RolloutFields
from services.runtime.rollout_watch import RolloutWatcher, ShadowStats
from services.runtime.service import ServiceBody, serve_main
from services.runtime.settings import RuntimeSettings
from services.runtime.stream_io import Sink

M = TypeVar("M")
S = TypeVar("S", bound=RuntimeSettings)
SideTask = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


class KafkaSettings(Protocol):
    """What the stage's Sink needs of its settings (every service's settings have it)."""

    @property
    def kafka_bootstrap(self) -> str: ...
    @property
    def topic_prefix(self) -> str: ...


class OneModelSettings(KafkaSettings, Protocol):
    """Settings of a stage that serves one model: ``<STAGE>_MODEL_DIR`` and ``MODEL_POLL_S``."""

    @property
    def model_dir(self) -> Path: ...
    @property
    def model_poll_s(self) -> float: ...


class Processor(Protocol):
    """A stage's processor: it owns the stream it runs."""

    @property
    def stream(self) -> BatchStream: ...


P = TypeVar("P", bound=OneModelSettings)


@dataclass(frozen=True)
class Stage:
    """What a stage runs once its Sink is open: the stream and the tasks that live beside it."""

    stream: BatchStream
    tasks: tuple[SideTask, ...] = ()


def watch_model(name: str, root: Path, loader: Callable[[Path], M], poll_s: float) -> ModelWatcher[M]:
    """The model ``root/CURRENT`` names, loaded now (a refusal raises) and re-checked every ``poll_s``."""
    return ModelWatcher(name, root, loader, poll_s=poll_s)


async def follow_rollout(models: ModelWatcher[M], stats: ShadowStats, settings: RolloutFields) -> RolloutWatcher[M]:
    """The rollout of a candidate beside ``models`` (same name, root and loader), read before the first batch."""
    rollout = RolloutWatcher(models.name, models.root, models.loader, stats, settings,
                             serving=lambda: models.version_dir.name, promoted=models.check)
    # read off the event loop: a rollout under way loads its candidate model here
    await asyncio.to_thread(rollout.check)
    return rollout


async def run_stage(service: str, settings: KafkaSettings, stop: asyncio.Event, health: HealthServer,
                    build: Callable[[Sink], Stage]) -> None:
    """Open the stage's Sink, build its processor on it and run the stream until ``stop``."""
    async with Sink(bootstrap=settings.kafka_bootstrap, service=service, topic_prefix=settings.topic_prefix) as sink:
        stage = build(sink)
        await run_stream(stage.stream, stop, health, tasks=stage.tasks)


def stage_main(service: str, doc: str | None, settings_cls: type[S], body: ServiceBody[S], argv: list[str]) -> int:
    """A model stage's ``main(argv)``: a model refused at start-up is one line on stderr and exit 2."""
    return serve_main(service, doc, settings_cls, body, argv, refused=ModelRefusedError)


def one_model_body(service: str, model: str, loader: Callable[[Path], M],
                   processor: Callable[[P, Sink, ModelWatcher[M]], Processor],
                   ) -> Callable[[P, asyncio.Event, HealthServer], Coroutine[Any, Any, None]]:
    """The whole body of a stage that serves one hot-reloaded model and keeps nothing else beside its stream."""

    async def body(settings: P, stop: asyncio.Event, health: HealthServer) -> None:
        models = watch_model(model, settings.model_dir, loader, settings.model_poll_s)
        await run_stage(service, settings, stop, health,
                        lambda sink: Stage(processor(settings, sink, models).stream, (models.run,)))

    return body
