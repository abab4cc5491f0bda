"""A BatchStream processor in its own process that misbehaves on purpose, for the poison-pill test.

    python -m tests.integration.poison_process BOOTSTRAP PREFIX SERVICE LOGFILE

Values on ``nodestate.v1`` (opaque bytes here): ``POISON`` kills the process (``os._exit(3)``, as a
crash in native code would), ``RAISE`` raises from the handler, ``BAD…`` is dead-lettered by the
handler itself; anything else is appended to LOGFILE as ``partition offset value``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from services.runtime.batch_stream import Batch, BatchStream
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import StreamSettings

POISON_EXIT = 3


async def main(bootstrap: str, prefix: str, service: str, logfile: str) -> None:
    out = open(logfile, "a", buffering=1)  # noqa: SIM115 - closed at process exit
    settings = StreamSettings(KAFKA_BOOTSTRAP=bootstrap, BORG_TOPIC_PREFIX=prefix,  # type: ignore[call-arg]
                              STREAM_COMMIT_INTERVAL_S=0.2, STREAM_BATCH_MAX=50)
    sink = Sink(bootstrap=bootstrap, service=service, topic_prefix=prefix)

    async def handle(batch: Batch) -> None:
        for tp, records in batch.items():
            for record in records:
                value = record.value or b""
                if value == b"POISON":
                    os._exit(POISON_EXIT)
                if value == b"RAISE":
                    raise ValueError(f"cannot handle offset {record.offset}")
                if value.startswith(b"BAD"):
                    await sink.dead_letter_record(record, "not a NodeState", "schema")
                    continue
                out.write(f"{tp.partition} {record.offset} {value.decode()}\n")
        out.flush()
        os.fsync(out.fileno())

    stream = BatchStream(service=service, settings=settings, sink=sink, topics=["nodestate.v1"], handle=handle)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await sink.start()
    try:
        await stream.run(stop)
    finally:
        await sink.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
