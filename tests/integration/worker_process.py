"""A StreamWorker in its own process, for kill/restart tests.

    python -m tests.integration.worker_process BOOTSTRAP PREFIX GROUP LOGFILE

Handles nodestate.v1 and appends "partition offset node seq" per handled message to
LOGFILE (flushed before the handler returns), emitting one AnomalyScore per input.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from contracts import AnomalyScore, NodeState
from services.runtime.worker import Incoming, Outgoing, StreamWorker


async def main(bootstrap: str, prefix: str, group: str, logfile: str) -> None:
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from services.runtime.telemetry import setup_tracing

        setup_tracing("test-worker", os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    out = open(logfile, "a", buffering=1)  # noqa: SIM115 - closed at process exit

    async def handle(msg: Incoming) -> list[Outgoing]:
        state = msg.value
        assert isinstance(state, NodeState)
        out.write(f"{msg.partition} {msg.offset} {state.node} {state.seq}\n")
        out.flush()
        os.fsync(out.fileno())
        score = AnomalyScore(
            node=state.node,
            ts_ms=state.ts_ms,
            score=0.1,
            is_anomaly=False,
            threshold=0.5,
            model_version="test",
            input_ts_ms=state.ts_ms,
        )
        return [Outgoing("anomalies.v1", state.node, score)]

    worker = StreamWorker(
        service="test-worker",
        bootstrap=bootstrap,
        group_id=group,
        input_topics=["nodestate.v1"],
        handler=handle,
        topic_prefix=prefix,
        max_records=20,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await worker.run(stop)
    finally:
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            from services.runtime.telemetry import shutdown_tracing

            shutdown_tracing()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
