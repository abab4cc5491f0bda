"""The cheap NodeState load generator's pure parts: splicing, the pool, partitioning, slicing."""

from __future__ import annotations

import random

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from contracts.codec import decode
from contracts.models import NodeState
from loadtests.loadgen import (
    SLICES,
    build_pool,
    node_names,
    plan_slices,
    second_middle,
    splice,
    split_nodestate,
)
from services.runtime.partitioning import default_partition
from simulator import SyntheticCluster

TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def pool():  # type: ignore[no-untyped-def]
    # 300 nodes on 40 templates × 12 ticks: copies of templates included
    return build_pool(300, seed=3, name_prefix="lg-", pool_ticks=12, tick_stride=2, pool_budget=480)


def test_splice_equals_the_simulator_dict_with_ts_and_seq_replaced() -> None:
    sim = SyntheticCluster(nodes=40, seed=5, node_prefix="sp-", missing_event_prob=0.5, multiplex_prob=0.5,
                           anomaly_rate=0.05)
    for _ in range(3):
        states = sim.tick().nodestate_dicts(ts_ms=123)
    for state in states:
        head, body = split_nodestate(state)
        for ts_ms, seq in ((TS, 0), (TS + 86_400_000, 9), (TS + 1, 10**9)):
            value = splice(head, ts_ms, seq, body)
            assert orjson.loads(value) == {**state, "ts_ms": ts_ms, "seq": seq}
            decoded = decode(NodeState, value)
            assert (decoded.node, decoded.ts_ms, decoded.seq) == (state["node"], ts_ms, seq)
    # the spliced fields never reach the body: nothing there to collide with
    assert all(b'"ts_ms"' not in split_nodestate(s)[1] and b'"seq"' not in split_nodestate(s)[1] for s in states)


def test_split_of_a_dict_with_only_the_spliced_fields() -> None:
    head, body = split_nodestate({"node": "n", "ts_ms": 1, "seq": 2})
    assert orjson.loads(splice(head, 5, 6, body)) == {"node": "n", "ts_ms": 5, "seq": 6}


def test_node_names_are_json_escaped() -> None:
    head, body = split_nodestate({"node": 'we"ird\\', "ts_ms": 1, "seq": 2, "x": 1})
    assert orjson.loads(splice(head, 5, 6, body))["node"] == 'we"ird\\'


def test_pool_messages_decode_with_the_right_ts_and_seq(pool) -> None:  # type: ignore[no-untyped-def]
    assert len(pool) == 300
    assert len(pool.bodies) == 40 and all(len(b) == 12 for b in pool.bodies)
    assert pool.names == node_names(300, "lg-") and pool.names[7] == "lg-0007"
    rng = random.Random(0)
    for _ in range(400):
        i, second = rng.randrange(300), rng.randrange(100)
        ts_ms = TS + second * 1000
        state = decode(NodeState, pool.message(i, second, ts_ms, second))
        assert (state.node, state.ts_ms, state.seq) == (pool.names[i], ts_ms, second)
        assert state.source == "synthetic" and state.interval_ms == 1000


def test_generated_second_is_what_the_hot_path_builds(pool) -> None:  # type: ignore[no-untyped-def]
    """The hot path builds head + middle + body from plan members; every node once per second, decodable."""
    plan = plan_slices(pool, [default_partition(k, {0, 1, 2, 3, 4, 5}) for k in pool.keys])
    second = 17
    middle = second_middle(TS + second * 1000, second)
    seen = []
    for slice_plan in plan:
        for _partition, members in slice_plan:
            for key, head, bodies, phase in members:
                value = head + middle + bodies[(second + phase) % pool.ticks]
                state = decode(NodeState, value)
                assert state.node.encode() == key
                assert (state.ts_ms, state.seq) == (TS + second * 1000, second)
                seen.append(state.node)
    assert sorted(seen) == sorted(pool.names)


def test_template_copies_replay_out_of_step(pool) -> None:  # type: ignore[no-untyped-def]
    assert pool.template[0] == pool.template[40] == 0
    assert pool.phase[:40] == [0] * 40
    assert len(set(pool.phase)) > 1
    # a node's consecutive seconds walk through its template's ticks and wrap around
    assert [pool.body(0, s) for s in range(13)] == [*pool.bodies[0], pool.bodies[0][0]]


def test_pool_is_simulator_output_with_regime_changes() -> None:
    """The pool is the simulator's ticks (every ``tick_stride``-th), and most template nodes change
    contention regime within one pool cycle: the features service sees regimes move."""
    pool = build_pool(200, seed=1, name_prefix="r-", pool_ticks=48, tick_stride=2)
    sim = SyntheticCluster(nodes=200, seed=1, node_prefix="r-")
    regimes = []
    for k in range(96):
        batch = sim.tick()
        if k % 2 == 0:
            regimes.append(batch.regime.copy())
            if k in (0, 50, 94):
                assert [split_nodestate(s)[1] for s in batch.nodestate_dicts()] == [b[k // 2] for b in pool.bodies]
    changed = sum(len({int(r[i]) for r in regimes}) > 1 for i in range(200))
    assert changed >= 100


def test_pool_size_is_bounded_by_the_budget() -> None:
    pool = build_pool(5000, seed=2, name_prefix="b-", pool_ticks=10, tick_stride=1, pool_budget=1000)
    assert len(pool) == 5000 and len(pool.bodies) == 100 and pool.ticks == 10
    assert pool.template[4321] == 21


@pytest.mark.parametrize("partitions", [6, 1, 3, 12])
def test_partition_matches_aiokafka_default_partitioner(partitions: int) -> None:
    partitioner = DefaultPartitioner()
    ids = set(range(partitions))
    rng = random.Random(partitions)
    keys = [n.encode() for n in node_names(2000, "b10000-")]
    keys += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(2000)]
    for key in keys:
        expected = partitioner(key, list(ids), list(ids))
        assert default_partition(key, ids) == expected


def test_partition_spreads_node_names() -> None:
    counts = [0] * 6
    for key in node_names(6000, "b6000-"):
        counts[default_partition(key.encode(), set(range(6)))] += 1
    assert min(counts) > 800


def test_slices_spread_every_node_once_in_order() -> None:
    pool = build_pool(1003, seed=4, name_prefix="s-", pool_ticks=2, tick_stride=1, pool_budget=100)
    parts = [default_partition(k, set(range(6))) for k in pool.keys]
    plan = plan_slices(pool, parts)
    assert len(plan) == SLICES
    per = -(-1003 // SLICES)
    index = {k: i for i, k in enumerate(pool.keys)}
    for k, slice_plan in enumerate(plan):
        nodes_in_slice = []
        for partition, members in slice_plan:
            idx = [index[m[0]] for m in members]
            assert idx == sorted(idx)  # per-node order within a partition batch
            assert all(parts[i] == partition for i in idx)
            nodes_in_slice += idx
        assert sorted(nodes_in_slice) == list(range(k * per, min((k + 1) * per, 1003)))
