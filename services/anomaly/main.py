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
from services.runtime.service import run_service
from services.runtime.stream_io import Sink


async def body(settings: AnomalySettings, stop: asyncio.Event, health: HealthServer) -> None:
    models: ModelWatcher[AnomalyModel] = ModelWatcher("anomaly", settings.model_dir, load_anomaly_model,
                                                      poll_s=settings.model_poll_s)
    sink = Sink(bootstrap=settings.kafka_bootstrap, service=SERVICE, topic_prefix=settings.topic_prefix)
    await sink.start()
    try:
        processor = AnomalyProcessor(settings, sink, models)
        await run_stream(processor.stream, stop, health, tasks=(models.run,))
    finally:
        await sink.stop()


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        return run_service(SERVICE, AnomalySettings, body)
    except ModelRefusedError as exc:
        print(f"anomaly: model refused: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
