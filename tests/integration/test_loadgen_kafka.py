"""The cheap load generator against the real broker: keyed partitions, 1 Hz ts/seq, produce-time timestamps."""

from __future__ import annotations

from collections import defaultdict

import pytest

from contracts import NodeState, TaskEvent, decode
from contracts.headers import build_headers
from loadtests.loadgen import Progress, build_pool, generate_nodestate
from services.runtime.partitioning import default_partition
from tests.kafka_helpers import consume

pytestmark = pytest.mark.integration


async def test_generator_sends_every_node_each_second_on_its_key_partition(kafka_bootstrap: str,
                                                                           topic_prefix: str) -> None:
    nodes, seconds = 500, 3
    pool = build_pool(nodes, seed=7, name_prefix="lgt-", pool_ticks=4, tick_stride=1, pool_budget=400)
    progress: list[Progress] = []
    sent = await generate_nodestate(kafka_bootstrap, topic_prefix, nodes, seconds, 7, "lgt-", pool=pool,
                                    on_progress=progress.append)
    assert sent == nodes * seconds
    assert [p.second for p in progress] == [0, 1, 2, 3] and progress[-1].sent == sent

    records = await consume(kafka_bootstrap, f"{topic_prefix}nodestate.v1", sent)
    assert len(records) == sent
    expected_headers = build_headers("nodestate.v1")
    by_node: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for r in records:
        state = decode(NodeState, r.value)
        assert r.key == state.node.encode()
        assert r.partition == default_partition(r.key, set(range(6)))
        assert list(r.headers) == expected_headers
        # the record timestamp is the produce time, within the second the sample is for
        assert state.ts_ms - 50 <= r.timestamp < state.ts_ms + 1000 + 500
        by_node[state.node].append((r.offset, state.seq, state.ts_ms))
    assert sorted(by_node) == pool.names
    first = min(ts for samples in by_node.values() for _, _, ts in samples)
    assert first % 1000 == 0
    for samples in by_node.values():
        samples.sort()  # offset order within the node's partition
        assert [(seq, ts) for _, seq, ts in samples] == [(s, first + 1000 * s) for s in range(seconds)]

    tasks = await consume(kafka_bootstrap, f"{topic_prefix}taskevents.v1", 2 * seconds)
    events = [decode(TaskEvent, r.value) for r in tasks]
    assert sorted(e.event for e in events) == ["SCHEDULE"] * seconds + ["SUBMIT"] * seconds
