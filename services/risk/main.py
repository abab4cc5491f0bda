"""``borgctl serve risk``: run the risk processor until SIGTERM (one replica).

Model from ``RISK_MODEL_DIR`` (default ``models/failure``, written by ``borgctl train
failure``); refused at start-up (exit 2) when its task (or node) feature schema differs;
a repointed ``CURRENT`` is picked up within ``MODEL_POLL_S`` seconds. Before consuming,
the task history is rebuilt from taskevents.v1 up to the committed offsets. A candidate named by
``ROLLOUT.json`` in the model root is shadow-scored and rolled out progressively (docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import functools
import sys

from services.risk.model import load_failure_model
from services.risk.processor import SERVICE, TASK_TOPIC, RiskProcessor
from services.risk.replay import rebuild_history
from services.risk.settings import RiskSettings
from services.risk.shadow import RiskShadowStats
from services.risk.state import RiskState
from services.runtime.health import HealthServer
from services.runtime.model_stage import Stage, follow_rollout, run_stage, stage_main, watch_model
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import app_id


async def body(settings: RiskSettings, stop: asyncio.Event, health: HealthServer) -> None:
    loader = functools.partial(load_failure_model, xgb_min_batch=settings.xgb_min_batch)
    models = watch_model("failure", settings.model_dir, loader, settings.model_poll_s)
    stats = RiskShadowStats()
    rollout = await follow_rollout(models, stats, settings)
    state = RiskState(largest=settings.largest_node())
    if settings.rebuild_history:
        await rebuild_history(settings.kafka_bootstrap, app_id(SERVICE, settings.topic_prefix),
                              settings.topic(TASK_TOPIC), state)

    def build(sink: Sink) -> Stage:
        processor = RiskProcessor(settings, sink, models, state, rollout, stats)
        return Stage(processor.stream, (models.run, processor.rescore_loop, rollout.run))

    await run_stage(SERVICE, settings, stop, health, build)


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, RiskSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
