"""The reference ceilings against the real broker: their rows, and no scratch topic left behind."""

from __future__ import annotations

import asyncio

import pytest

from loadtests.bench_reference import kafka_native, passthrough
from tests.conftest import broker_topics

pytestmark = pytest.mark.integration


async def _scratch_topics(bootstrap: str) -> set[str]:
    return {t for t in await broker_topics(bootstrap) if t.startswith(("bench-native-", "bench-pt-"))}


@pytest.mark.timeout(300)
def test_reference_ceilings_report_rows_and_delete_their_topics(kafka_bootstrap: str) -> None:
    before = asyncio.run(_scratch_topics(kafka_bootstrap))
    rows = kafka_native(kafka_bootstrap, quick=True) + passthrough(kafka_bootstrap, quick=True)
    by_case = {(r.case, r.metric): r for r in rows}
    assert set(by_case) == {("kafka-producer-perf", "throughput"), ("kafka-producer-perf", "latency_p99"),
                            ("kafka-consumer-perf", "throughput"), ("aiokafka-passthrough", "throughput")}
    assert all(r.bench == "reference" and r.value > 0 for r in rows)
    assert by_case[("aiokafka-passthrough", "throughput")].offered == 50_000
    # the ~140 MB of the producer-perf topic and the pass-through's two topics are gone
    assert asyncio.run(_scratch_topics(kafka_bootstrap)) <= before
