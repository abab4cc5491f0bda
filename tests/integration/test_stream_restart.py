"""A crash between processing and commit loses nothing (features service, real Kafka, real processes).

The first features process is told to exit hard (``os._exit``) right after it has produced
and flushed the outputs and changelog records of the batch that takes it past 2,500
NodeStates, before it can commit that batch's offsets; offsets of
earlier batches are committed every 0.5 s, and the input after the first 1,000 NodeStates is
produced only once a commit was seen, so the crash lands mid-stream on any machine. The second process
recovers the window table from its changelog, re-reads the uncommitted input and must
produce exactly the offline feature windows: no window missing, and every re-emitted
window byte-identical to the first emission (idempotent on the key (node, ts_ms)).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

from contracts import FeatureVector, decode
from featurelib.node.samples import sample_from_dict
from featurelib.node.windows import DictStore, NodeWindows
from services.risk.replay import committed_offsets
from services.runtime.stream_settings import app_id
from tests.integration.test_stream_pipeline import collector, produce_states, running, scenario, spawn, stop, wait_ready

pytestmark = [pytest.mark.integration]


async def test_crash_between_processing_and_commit_loses_nothing(kafka_bootstrap: str, topic_prefix: str,
                                                                 tmp_path: Path) -> None:
    sc = scenario(nodes=30, ticks=200, seed=5)
    offline = NodeWindows(DictStore())
    expected = {}
    for state in sc.states:
        for w in offline.observe(sample_from_dict(state)).windows:
            expected[(w.node, w.ts_ms)] = (w.values, w.valid, w.samples)
    crash_after = 2500
    batch = 200
    # the crashed member's session (the smallest the settings accept) is what the second process waits out
    first = spawn("features", kafka_bootstrap, topic_prefix, tmp_path, FEATURES_FAULT_EXIT_AFTER=str(crash_after),
                  STREAM_COMMIT_INTERVAL_S="0.5", STREAM_BATCH_MAX=str(batch), STREAM_SESSION_TIMEOUT_S="6")
    with running(first):
        await wait_ready((first,))
        # a commit before the crash, whatever the machine's speed: 2,500 NodeStates can be
        # handled within one 0.5 s commit interval, so the rest follows the first commit
        head = 1000
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[:head])
        group = app_id("features", topic_prefix)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not sum((await committed_offsets(kafka_bootstrap, group, topic_prefix + "nodestate.v1")).values()):
            assert loop.time() < deadline, "no offsets committed within 60 s"
            await asyncio.sleep(0.2)
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[head:], offset=head)
        deadline = loop.time() + 90
        while first.proc.poll() is None:
            assert loop.time() < deadline, "the fault-injected process did not exit"
            await asyncio.sleep(0.1)
        assert first.proc.returncode == 70, first.tail()
    committed = await committed_offsets(kafka_bootstrap, group, topic_prefix + "nodestate.v1")
    committed_total = sum(committed.values())
    assert 0 < committed_total < crash_after + batch, (
        f"committed {committed_total}: the crash must fall after some commits and before the last ones")

    second = spawn("features", kafka_bootstrap, topic_prefix, tmp_path)
    async with collector(kafka_bootstrap, topic_prefix, ["features.v1"]) as (got, poll_until):
        with running(second):
            await wait_ready((second,))
            await poll_until(lambda g: len({(v.node, v.ts_ms) for v in g.values("features.v1", FeatureVector)})
                             >= len(expected), 120, f"{len(expected)} windows after the restart")
            stop(second)
    emitted: dict[tuple[str, int], list[tuple[list[float], list[bool], int]]] = defaultdict(list)
    for r in got.records["features.v1"]:
        v = decode(FeatureVector, r.value)
        emitted[(v.node, v.ts_ms)].append((v.values, v.valid, v.samples))
    missing = set(expected) - set(emitted)
    assert not missing, f"{len(missing)} windows lost across the crash, e.g. {sorted(missing)[:3]}"
    assert set(emitted) == set(expected)
    conflicting = [k for k, vs in emitted.items() if any(v != vs[0] for v in vs)]
    assert not conflicting, f"re-emitted windows differ from the first emission: {conflicting[:3]}"
    for key, (values, valid, samples) in expected.items():
        got_values, got_valid, got_samples = emitted[key][0]
        assert (got_valid, got_samples) == (valid, samples), key
        assert got_values == pytest.approx(values, rel=1e-12, abs=1e-12), key
    replayed = sum(1 for vs in emitted.values() if len(vs) > 1)
    print(f"\ncrash after {crash_after} NodeStates with {committed_total} committed: "
          f"{len(expected)} windows, {replayed} re-emitted identically, none lost")
    assert replayed > 0, "no window was re-emitted: the crash did not fall between processing and commit"
