"""``borgctl serve features``: run the features processor until SIGTERM."""

from __future__ import annotations

import asyncio
import sys

from services.features.processor import SERVICE, FeaturesProcessor
from services.features.settings import FeaturesSettings
from services.runtime.batch_stream import run_stream
from services.runtime.health import HealthServer
from services.runtime.service import serve_main
from services.runtime.stream_io import Sink


async def body(settings: FeaturesSettings, stop: asyncio.Event, health: HealthServer) -> None:
    async with Sink(bootstrap=settings.kafka_bootstrap, service=SERVICE, topic_prefix=settings.topic_prefix) as sink:
        processor = FeaturesProcessor(settings, sink)
        await run_stream(processor.stream, stop, health)


def main(argv: list[str]) -> int:
    return serve_main(SERVICE, __doc__, FeaturesSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
