"""`borgctl bench tracing`: pipeline throughput with tracing on (default sampling) vs off.

One run, same input: two topic namespaces are pre-filled with the same N seeded synthetic
NodeState (with `traceparent` headers, as the node agents send them); the features service —
the pipeline's slowest stage — drains one exporting every span to the local Jaeger over OTLP
(`OTEL_SAMPLE_RATIO=1.0`, the default) and the other without an exporter.
Throughput = N / time until the service's committed offsets reach the end offsets.
Target: tracing costs at most 10 % of throughput (ratio ≥ 0.9).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from loadtests.bench_format import ROOT, Result
from services.runtime.admin import create_topics
from services.runtime.kafka_security import kafka_client_options

START_MS = 1_764_000_000_000  # fixed, so both namespaces get byte-identical input
JAEGER_OTLP = os.environ.get("BENCH_OTLP_ENDPOINT", "http://127.0.0.1:4317")


def _fill(bootstrap: str, prefix: str, count: int, nodes: int) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "borgctl.main",
            "replay",
            "--source",
            "synthetic",
            "--nodes",
            str(nodes),
            "--count",
            str(count),
            "--seed",
            "11",
            "--topic-prefix",
            prefix,
            "--bootstrap",
            bootstrap,
            "--quiet",
            "--start-ms",
            str(START_MS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": JAEGER_OTLP},
    )
    if done.returncode != 0:
        raise RuntimeError(f"replay failed: {done.stderr.strip()[-400:]}")


async def _committed_total(admin: AIOKafkaAdminClient, group: str, topic: str) -> int:
    offsets = await admin.list_consumer_group_offsets(group)
    return sum(
        m.offset for tp, m in offsets.items() if isinstance(tp, TopicPartition) and tp.topic == topic and m.offset > 0
    )


async def _drain_time(bootstrap: str, prefix: str, count: int, tracing: bool, timeout_s: float) -> float:
    run_prefix = f"{prefix}{'on' if tracing else 'off'}-"
    group = f"{run_prefix}borg-features"
    topic = f"{run_prefix}nodestate.v1"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BORG_TOPIC_PREFIX": run_prefix,
        "HEALTH_PORT": "0",
        "LOG_LEVEL": "WARNING",
        "OTEL_SAMPLE_RATIO": "1.0",
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if tracing:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = JAEGER_OTLP
    await create_topics(bootstrap, prefix=run_prefix)
    _fill(bootstrap, run_prefix, count, nodes=200)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    started = time.monotonic()
    proc = subprocess.Popen(  # noqa: ASYNC220 - one child per run, before timing starts
        [sys.executable, "-m", "borgctl.main", "serve", "features"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            if await _committed_total(admin, group, topic) >= count:
                return time.monotonic() - started
            if proc.poll() is not None:
                raise RuntimeError(f"features exited with {proc.returncode}")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"features did not drain {count} messages within {timeout_s:.0f}s")
            await asyncio.sleep(0.25)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        await admin.close()


async def _run(quick: bool, bootstrap: str) -> list[Result]:
    count = 20_000 if quick else 100_000
    prefix = f"bt{uuid.uuid4().hex[:6]}-"
    off = await _drain_time(bootstrap, prefix, count, tracing=False, timeout_s=600)
    on = await _drain_time(bootstrap, prefix, count, tracing=True, timeout_s=600)
    ratio = off / on  # throughput(on) / throughput(off)
    return [
        Result("tracing", "features tracing=off", "throughput", count / off, "msg/s", offered=count),
        Result("tracing", "features tracing=on", "throughput", count / on, "msg/s", offered=count),
        Result("tracing", "features on/off", "throughput_ratio", ratio, "ratio", offered=count),
    ]


def run_tracing_bench(quick: bool, bootstrap: str) -> list[Result]:
    return asyncio.run(_run(quick, bootstrap))
