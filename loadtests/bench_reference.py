"""Reference ceilings measured in the same run as every benchmark.

- kafka: Kafka's own ProducerPerformance / ConsumerPerformance (the broker's ceiling here);
- passthrough: raw aiokafka consume → produce with no processing (a Python stage's ceiling).

Both work on scratch topics (``bench-native-<hex>``, ``bench-pt-<hex>-in``/``-out``) that are
deleted when they end, failed or not.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from loadtests.bench_format import ROOT, Result
from loadtests.procs import delete_topics
from services.runtime.kafka_security import kafka_client_options

RECORD_BYTES = 700  # about one NodeState in JSON


def _kafka_classpath() -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "infra" / "kafka" / "kafka.sh"), "classpath"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def kafka_native(bootstrap: str, quick: bool) -> list[Result]:
    """Kafka's own tools on a scratch topic, deleted afterwards (it holds ~700 MB in a full run)."""
    topic = f"bench-native-{uuid.uuid4().hex[:8]}"
    try:
        return _kafka_native(bootstrap, quick, topic)
    finally:
        asyncio.run(delete_topics(bootstrap, topic))


def _kafka_native(bootstrap: str, quick: bool, topic: str) -> list[Result]:
    records = 200_000 if quick else 1_000_000
    cp = _kafka_classpath()
    produce = subprocess.run(
        [
            "java",
            "-Xmx512m",
            "-cp",
            cp,
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(RECORD_BYTES),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "acks=all",
            "linger.ms=5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    last = [line for line in produce.splitlines() if "records sent" in line][-1]
    rate = float(re.search(r"([\d.]+) records/sec", last).group(1))  # type: ignore[union-attr]
    p99 = float(re.search(r"([\d.]+) ms 99th", last).group(1))  # type: ignore[union-attr]
    consume = subprocess.run(
        [
            "java",
            "-Xmx512m",
            "-cp",
            cp,
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--messages",
            str(records),
            "--timeout",
            "60000",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    header, data = [line for line in consume.splitlines() if line.strip()][-2:]
    row = dict(zip([h.strip() for h in header.split(",")], [d.strip() for d in data.split(",")], strict=False))
    return [
        Result("reference", "kafka-producer-perf", "throughput", rate, "msg/s", offered=records),
        Result("reference", "kafka-producer-perf", "latency_p99", p99, "ms", offered=records),
        Result("reference", "kafka-consumer-perf", "throughput", float(row["nMsg.sec"]), "msg/s", offered=records),
    ]


async def _passthrough(bootstrap: str, quick: bool) -> list[Result]:
    namespace = f"bench-pt-{uuid.uuid4().hex[:8]}-"
    try:
        return await _passthrough_in(bootstrap, quick, namespace)
    finally:
        await delete_topics(bootstrap, namespace)


async def _passthrough_in(bootstrap: str, quick: bool, namespace: str) -> list[Result]:
    count = 50_000 if quick else 200_000
    src, dst = f"{namespace}in", f"{namespace}out"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    await admin.create_topics([NewTopic(src, 6, 1), NewTopic(dst, 6, 1)])
    await admin.close()
    payload = b"x" * RECORD_BYTES
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                linger_ms=5, max_batch_size=262_144)
    await producer.start()
    for i in range(count):
        await producer.send(src, key=f"node-{i % 5000}".encode(), value=payload)
    await producer.flush()
    consumer = AIOKafkaConsumer(
        src,
        bootstrap_servers=bootstrap, **kafka_client_options(),
        group_id=f"pt-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=2000,
    )
    await consumer.start()
    moved = 0
    started = time.perf_counter()
    try:
        while moved < count:
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            for records in batch.values():
                for record in records:
                    await producer.send(dst, key=record.key, value=record.value, headers=record.headers)
                moved += len(records)
            await consumer.commit()
        await producer.flush()
    finally:
        elapsed = time.perf_counter() - started
        await consumer.stop()
        await producer.stop()
    return [Result("reference", "aiokafka-passthrough", "throughput", moved / elapsed, "msg/s", offered=count)]


def passthrough(bootstrap: str, quick: bool) -> list[Result]:
    return asyncio.run(_passthrough(bootstrap, quick))
