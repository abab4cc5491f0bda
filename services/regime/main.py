"""``borgctl serve regime``: run the regime processor until SIGTERM.

The model comes from ``REGIME_MODEL_DIR`` (default ``models/regime``; its ``CURRENT`` names
the version). A model trained on another feature schema is refused at start-up (exit 2);
repointing ``CURRENT`` swaps the model within ``MODEL_POLL_S`` seconds without a restart. A candidate
named by ``ROLLOUT.json`` in the model root is shadow-scored and rolled out progressively
(``borgctl model promote regime VERSION --progressive``; docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import sys

from services.regime.model import load_regime_model
from services.regime.processor import SERVICE, RegimeProcessor
from services.regime.settings import RegimeSettings
from services.regime.shadow import RegimeShadow, RegimeShadowStats
from services.regime.truth import TruthTail
from services.runtime.health import HealthServer
from services.runtime.model_stage import Stage, follow_rollout, run_stage, stage_main, watch_model


async def body(settings: RegimeSettings, stop: asyncio.Event, health: HealthServer) -> None:
    models = watch_model("regime", settings.model_dir, load_regime_model, settings.model_poll_s)
    stats = RegimeShadowStats(coverage_margin=settings.rollout_coverage_margin)
    rollout = await follow_rollout(models, stats, settings)
    shadow = RegimeShadow(stats, TruthTail(settings.truth_file) if settings.truth_file else None)
    await run_stage(SERVICE, settings, stop, health, lambda sink: Stage(
        RegimeProcessor(settings, sink, models, rollout, shadow).stream, (models.run, rollout.run)))


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, RegimeSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
