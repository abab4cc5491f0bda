"""``borgctl serve features``: run the features processor until SIGTERM."""

from __future__ import annotations

import asyncio
import sys

from services.features.processor import SERVICE, FeaturesProcessor
from services.features.settings import FeaturesSettings
from services.runtime.batch_stream import run_stream
from services.runtime.health import HealthServer
from services.runtime.service import run_service
from services.runtime.stream_io import Sink


async def body(settings: FeaturesSettings, stop: asyncio.Event, health: HealthServer) -> None:
    sink = Sink(bootstrap=settings.kafka_bootstrap, service=SERVICE, topic_prefix=settings.topic_prefix)
    await sink.start()
    try:
        processor = FeaturesProcessor(settings, sink)
        await run_stream(processor.stream, stop, health)
    finally:
        await sink.stop()


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    return run_service(SERVICE, FeaturesSettings, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
