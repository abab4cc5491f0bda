"""``borgctl serve drift``: run the drift stage until SIGTERM.

Failure model (``DRIFT_FAILURE_MODEL_DIR``, default ``models/failure``): its profile's
probabilities per horizon against risk.v2 task records (prediction drift), and its card's held-out
AUCPR / Brier per horizon against the same predictions labelled by taskevents.v1 (concept drift).

Reference from the regime model's version in use (``DRIFT_REGIME_MODEL_DIR``, default
``models/regime``: ``<version>/reference_profile.json``); a repointed ``CURRENT`` is picked up
within ``MODEL_POLL_S`` seconds and restarts the windows. A version without a profile is
reported as ``insufficient_data`` with the command that adds one. docs/drift.md.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from services.drift.processor import (
    SERVICE,
    DriftProcessor,
    Reference,
    load_failure_reference,
    load_regime_reference,
)
from services.drift.settings import DriftSettings
from services.runtime.health import HealthServer
from services.runtime.model_stage import Stage, run_stage, stage_main, watch_model
from services.runtime.model_watch import ModelRefusedError, ModelWatcher

log = logging.getLogger(__name__)


async def body(settings: DriftSettings, stop: asyncio.Event, health: HealthServer) -> None:
    references = watch_model("drift-regime", settings.regime_model_dir, load_regime_reference, settings.model_poll_s)
    failure: ModelWatcher[Reference] | None = None
    if settings.failure_model_dir is not None and settings.failure_model_dir.exists():
        try:
            failure = watch_model("drift-failure", settings.failure_model_dir, load_failure_reference,
                                  settings.model_poll_s)
        except ModelRefusedError as exc:  # the regime watch does not depend on it
            log.error("drift: not watching the failure model: %s", exc)
    tasks = (references.run, *((failure.run,) if failure is not None else ()))
    await run_stage(SERVICE, settings, stop, health,
                    lambda sink: Stage(DriftProcessor(settings, sink, references, failure).stream, tasks))


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, DriftSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
