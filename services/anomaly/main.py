"""``borgctl serve anomaly``: run the anomaly processor until SIGTERM.

Model from ``ANOMALY_MODEL_DIR`` (default ``models/anomaly``); refused at start-up (exit 2)
when trained on another feature schema; a repointed ``CURRENT`` is picked up within
``MODEL_POLL_S`` seconds.
"""

from __future__ import annotations

import asyncio
import sys

from services.anomaly.model import AnomalyModel, load_anomaly_model
from services.anomaly.processor import SERVICE, AnomalyProcessor
from services.anomaly.settings import AnomalySettings
from services.runtime.batch_stream import run_stream
from services.runtime.health import HealthServer
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from services.runtime.service import serve_main
from services.runtime.stream_io import Sink


async def body(settings: AnomalySettings, stop: asyncio.Event, health: HealthServer) -> None:
    models: ModelWatcher[AnomalyModel] = ModelWatcher("anomaly", settings.model_dir, load_anomaly_model,
                                                      poll_s=settings.model_poll_s)
    async with Sink(bootstrap=settings.kafka_bootstrap, service=SERVICE, topic_prefix=settings.topic_prefix) as sink:
        processor = AnomalyProcessor(settings, sink, models)
        await run_stream(processor.stream, stop, health, tasks=(models.run,))


def main(argv: list[str]) -> int:
    return serve_main(SERVICE, __doc__, AnomalySettings, body, argv, refused=ModelRefusedError)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
