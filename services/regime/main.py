"""``borgctl serve regime``: run the regime processor until SIGTERM.

The model comes from ``REGIME_MODEL_DIR`` (default ``models/regime``; its ``CURRENT`` names
the version). A model trained on another feature schema is refused at start-up (exit 2);
repointing ``CURRENT`` swaps the model within ``MODEL_POLL_S`` seconds without a restart. A candidate
named by ``ROLLOUT.json`` in the model root is shadow-scored and rolled out progressively
(``borgctl model promote regime VERSION --progressive``; docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from services.regime.model import RegimeModel, load_regime_model
from services.regime.processor import SERVICE, RegimeProcessor
from services.regime.settings import RegimeSettings
from services.regime.shadow import RegimeShadow, RegimeShadowStats
from services.regime.truth import TruthTail
from services.runtime.batch_stream import run_stream
from services.runtime.health import HealthServer
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from services.runtime.rollout_watch import RolloutWatcher
from services.runtime.service import serve_main
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)


async def body(settings: RegimeSettings, stop: asyncio.Event, health: HealthServer) -> None:
    models: ModelWatcher[RegimeModel] = ModelWatcher("regime", settings.model_dir, load_regime_model,
                                                     poll_s=settings.model_poll_s)
    stats = RegimeShadowStats(coverage_margin=settings.rollout_coverage_margin)
    rollout = RolloutWatcher("regime", settings.model_dir, load_regime_model, stats, settings,
                             serving=lambda: models.version_dir.name, promoted=models.check)
    await asyncio.to_thread(rollout.check)  # a rollout under way is followed from the first batch
    shadow = RegimeShadow(stats, TruthTail(settings.truth_file) if settings.truth_file else None)
    async with Sink(bootstrap=settings.kafka_bootstrap, service=SERVICE, topic_prefix=settings.topic_prefix) as sink:
        processor = RegimeProcessor(settings, sink, models, rollout, shadow)
        await run_stream(processor.stream, stop, health, tasks=(models.run, rollout.run))


def main(argv: list[str]) -> int:
    return serve_main(SERVICE, __doc__, RegimeSettings, body, argv, refused=ModelRefusedError)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
