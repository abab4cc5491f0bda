"""``borgctl serve forecast``: run the forecast processor until SIGTERM.

Model from ``FORECAST_MODEL_DIR`` (default ``models/forecast``, written by ``borgctl train forecast``);
refused at start-up (exit 2) when trained on another load-feature schema; a repointed ``CURRENT`` is
picked up within ``MODEL_POLL_S`` seconds. Node histories are restored from the stage's changelog.
"""

from __future__ import annotations

import asyncio
import sys

from services.forecast.model import ForecastModel, load_forecast_model
from services.forecast.processor import SERVICE, ForecastProcessor
from services.forecast.settings import ForecastSettings
from services.runtime.batch_stream import run_stream
from services.runtime.health import HealthServer
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from services.runtime.service import serve_main
from services.runtime.stream_io import Sink


async def body(settings: ForecastSettings, stop: asyncio.Event, health: HealthServer) -> None:
    models: ModelWatcher[ForecastModel] = ModelWatcher("forecast", settings.model_dir, load_forecast_model,
                                                       poll_s=settings.model_poll_s)
    async with Sink(bootstrap=settings.kafka_bootstrap, service=SERVICE, topic_prefix=settings.topic_prefix) as sink:
        processor = ForecastProcessor(settings, sink, models)
        await run_stream(processor.stream, stop, health, tasks=(models.run,))


def main(argv: list[str]) -> int:
    return serve_main(SERVICE, __doc__, ForecastSettings, body, argv, refused=ModelRefusedError)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
