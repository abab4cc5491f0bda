"""Workers joining and leaving the features group lose and change no window (real Kafka, real processes).

The features service keeps per-node window state in memory and in the changelog
``<prefix>borg-features-windows-changelog`` (partition = the node's input partition). When
the consumer group rebalances, a worker hands over the state of its revoked partitions
(checkpoint, flush, commit) and the new owner restores it from the changelog before it
consumes them. These tests move partitions between worker processes while NodeStates flow
and check the output against the offline state machine:

* scale out and in: worker A alone, then A + B (the partitions split, B restores what A
  wrote), then B alone after A stops gracefully (SIGTERM; B restores A's partitions);
* a hard kill: A and B share the partitions, A is SIGKILLed mid-stream and B takes its
  partitions over once the group's session timeout expires, re-reading A's uncommitted input;
* both rebalances of the first test while NodeStates stream in, so batches are in flight
  (fetched, being handled, being restored) at every hand-over. This is the sharp one: a
  batch handled before its partitions' state was restored, or fetched for the new
  assignment and then dropped, shows up here as changed or lost windows.

Every offline window must be emitted, no other window, and every emission of a window
(at-least-once: a window may be emitted again) must equal the offline one.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from contracts import FeatureVector, decode
from featurelib.node.samples import sample_from_dict
from featurelib.node.windows import DictStore, NodeWindows
from services.risk.replay import committed_offsets
from services.runtime.admin import describe_topics
from services.runtime.stream_settings import PARTITIONS, app_id
from tests.integration.test_stream_pipeline import (
    ServiceProc,
    collector,
    produce_states,
    scenario,
    spawn,
    stop,
    trace_header,
)

pytestmark = [pytest.mark.integration]

WORKER_ENV = {
    "STREAM_COMMIT_INTERVAL_S": "0.5",
    "STREAM_SESSION_TIMEOUT_S": "6",  # the smallest the settings (and the broker) accept
    "LOG_LEVEL": "INFO",  # rebalance, hand-over and restore lines in the worker logs
}
Emission = tuple[list[float], list[bool], int]
"""values, valid, samples of a FeatureVector."""
Expected = dict[tuple[str, int], Emission]


def offline_windows(states: list[dict[str, Any]]) -> Expected:
    machine = NodeWindows(DictStore())
    expected: Expected = {}
    for state in states:
        for w in machine.observe(sample_from_dict(state)).windows:
            expected[(w.node, w.ts_ms)] = (w.values, w.valid, w.samples)
    return expected


def worker(name: str, bootstrap: str, prefix: str, tmp_path: Path) -> ServiceProc:
    """A features worker logging to its own ``tmp_path/<name>/features.log``."""
    home = tmp_path / name
    home.mkdir()
    return spawn("features", bootstrap, prefix, home, **WORKER_ENV)


@contextmanager
def workers(procs: list[ServiceProc]) -> Iterator[None]:
    """Stop every worker in ``procs`` on exit; on failure print the tail of each worker's log."""
    try:
        yield
    except BaseException:
        for p in procs:
            print(f"\n----- {p.log} (exit {p.proc.poll()}) -----\n{p.tail(80)}")
        raise
    finally:
        for p in procs:
            stop(p)


async def wait_assigned(services: tuple[ServiceProc, ...], timeout: float = 60.0) -> None:
    """Wait until each worker's stream has partitions and their state restored.

    Stricter than ``wait_ready``: /readyz answers 200 while no check is registered yet (the
    features stream registers its check only once its sink is connected), so the stream's
    own check must be in the answer, and true.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = list(services)
    async with aiohttp.ClientSession() as http:
        while pending:
            for s in list(pending):
                if s.proc.poll() is not None:
                    raise AssertionError(f"{s.log.parent.name} exited with {s.proc.returncode}:\n{s.tail()}")
                try:
                    async with http.get(f"http://127.0.0.1:{s.port}/readyz",
                                        timeout=aiohttp.ClientTimeout(1)) as r:
                        body = await r.json()
                    if r.status == 200 and body.get("checks", {}).get("features") is True:
                        pending.remove(s)
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    pass
            if loop.time() > deadline:
                raise AssertionError("not assigned: " + ", ".join(s.log.parent.name for s in pending))
            await asyncio.sleep(0.1)


async def committed_total(bootstrap: str, prefix: str) -> int:
    offsets = await committed_offsets(bootstrap, app_id("features", prefix), prefix + "nodestate.v1")
    return sum(offsets.values())


async def wait_committed(bootstrap: str, prefix: str, want: int, timeout: float, what: str) -> float:
    """Poll the group's committed offsets until they cover ``want`` NodeStates; returns the seconds waited."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while (have := await committed_total(bootstrap, prefix)) < want:
        if loop.time() - started > timeout:
            committed = await committed_offsets(bootstrap, app_id("features", prefix), prefix + "nodestate.v1")
            ends = await end_offsets(bootstrap, prefix + "nodestate.v1")
            raise AssertionError(f"{what}: {have}/{want} NodeStates committed after {timeout:.0f}s; per partition "
                                 f"committed/end: {[(p, committed.get(p, 0), e) for p, e in sorted(ends.items())]}")
        await asyncio.sleep(0.25)
    assert have == want, f"{what}: committed {have} > {want} produced"
    return loop.time() - started


async def metric(service: ServiceProc, name: str, label: str = "") -> float:
    """Sum of the samples of metric ``name`` (lines containing ``label``) on a worker's /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{service.port}/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and label in line)


async def consumed(service: ServiceProc, prefix: str) -> int:
    return int(await metric(service, "borg_messages_in_total", f'topic="{prefix}nodestate.v1"'))


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of each partition of ``topic``."""
    partitions = (await describe_topics(bootstrap, [topic]))[topic].partitions
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def sample_outcomes(service: ServiceProc) -> dict[str, int]:
    return {o: int(await metric(service, "borg_features_samples_total", f'outcome="{o}"'))
            for o in ("accepted", "duplicate", "late", "replayed")}


async def paced(bootstrap: str, prefix: str, states: list[dict[str, Any]], start: int, end: int,
                chunk: int = 200, pause_s: float = 0.05) -> None:
    """Produce ``states[start:end]`` as a stream: ``chunk`` states, flushed, then ``pause_s`` of quiet."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, enable_idempotence=True)
    await producer.start()
    try:
        for i in range(start, end):
            state = states[i]
            await producer.send(prefix + "nodestate.v1", key=state["node"].encode(), value=orjson.dumps(state),
                                headers=trace_header(i))
            if (i + 1 - start) % chunk == 0:
                await producer.flush()
                await asyncio.sleep(pause_s)
        await producer.flush()
    finally:
        await producer.stop()


async def wait_progress(bootstrap: str, prefix: str, at_least: int, timeout: float, what: str) -> None:
    """Wait until the group has committed ``at_least`` NodeStates (a point in a running stream)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (have := await committed_total(bootstrap, prefix)) < at_least:
        assert loop.time() < deadline, f"{what}: {have}/{at_least} NodeStates committed after {timeout:.0f}s"
        await asyncio.sleep(0.05)


def input_partition(node: str) -> int:
    """The nodestate.v1 partition of ``node`` (the producer's default partitioner), for failure reports."""
    return int(DefaultPartitioner()(node.encode(), list(range(PARTITIONS)), list(range(PARTITIONS))))


def same_window(got: Emission, want: Emission) -> bool:
    return got[1:] == want[1:] and got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)


async def check_windows(bootstrap: str, prefix: str, expected: Expected, what: str) -> None:
    """Read all of features.v1 (every worker stopped) and compare it with the offline windows."""
    total = sum((await end_offsets(bootstrap, prefix + "features.v1")).values())
    async with collector(bootstrap, prefix, ["features.v1"]) as (got, poll_until):
        await poll_until(lambda g: len(g.records["features.v1"]) >= total, 60, f"all {total} features.v1 records")
    emitted: dict[tuple[str, int], list[Emission]] = defaultdict(list)
    for r in got.records["features.v1"]:
        v = decode(FeatureVector, r.value)
        emitted[(v.node, v.ts_ms)].append((v.values, v.valid, v.samples))
    missing = sorted(set(expected) - set(emitted))
    extra = sorted(set(emitted) - set(expected))
    conflicting = sorted(k for k, vs in emitted.items() if any(v != vs[0] for v in vs))
    changed = sorted(k for k, want in expected.items() if k in emitted
                     and not all(same_window(e, want) for e in emitted[k]))
    problems = {"lost": missing, "not offline": extra, "re-emitted differently": conflicting,
                "differ from offline": changed}
    if any(problems.values()):
        report = []
        for name, keys in problems.items():
            if keys:
                partitions = sorted({input_partition(node) for node, _ in keys})
                report.append(f"{len(keys)} windows {name} (input partitions {partitions}), e.g. {keys[:3]}")
        raise AssertionError(f"{what}: of {len(expected)} offline windows and {total} emissions: " + "; ".join(report))
    again = sum(1 for vs in emitted.values() if len(vs) > 1)
    print(f"\n{what}: {len(expected)} windows, all emitted and equal to offline; {again} windows re-emitted "
          f"({total - len(expected)} extra emissions)")


async def test_scale_out_and_in_loses_and_changes_no_window(kafka_bootstrap: str, topic_prefix: str,
                                                              tmp_path: Path) -> None:
    sc = scenario(nodes=40, ticks=240, seed=17)
    expected = offline_windows(sc.states)
    n = len(sc.states)
    cut1, cut2 = n // 3, 2 * n // 3
    procs: list[ServiceProc] = []
    started = time.monotonic()
    with workers(procs):
        a = worker("a", kafka_bootstrap, topic_prefix, tmp_path)
        procs.append(a)
        await wait_assigned((a,))
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[:cut1])
        t1 = await wait_committed(kafka_bootstrap, topic_prefix, cut1, 30, "A alone")

        # scale out: B joins the group, the partitions split, B restores its share from the changelog
        b = worker("b", kafka_bootstrap, topic_prefix, tmp_path)
        procs.append(b)
        t = time.monotonic()
        await wait_assigned((b,))
        join_s = time.monotonic() - t
        a_before, b_before = await consumed(a, topic_prefix), await consumed(b, topic_prefix)
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[cut1:cut2], offset=cut1)
        t2 = await wait_committed(kafka_bootstrap, topic_prefix, cut2, 40, "A + B")
        a_share = await consumed(a, topic_prefix) - a_before
        b_share = await consumed(b, topic_prefix) - b_before
        assert a_share > 0 and b_share > 0, f"partitions not split: A consumed {a_share}, B {b_share} of the 2nd third"

        # scale in: A stops gracefully (final commit, leaves the group), B restores A's partitions
        t = time.monotonic()
        stop(a)
        leave_s = time.monotonic() - t
        assert a.proc.returncode == 0, f"A did not stop cleanly (exit {a.proc.returncode}):\n{a.tail()}"
        b_before = await consumed(b, topic_prefix)
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[cut2:], offset=cut2)
        t3 = await wait_committed(kafka_bootstrap, topic_prefix, n, 40, "B alone")
        b_last = await consumed(b, topic_prefix) - b_before
        outcomes = await sample_outcomes(b)
        stop(b)
        assert b.proc.returncode == 0, f"B did not stop cleanly (exit {b.proc.returncode}):\n{b.tail()}"
        print(f"\n{n} NodeStates: A alone committed a third in {t1:.1f}s; B ready {join_s:.1f}s after it started; "
              f"2nd third split A {a_share} / B {b_share}, committed in {t2:.1f}s; A stopped in {leave_s:.1f}s; "
              f"last third ({n - cut2}) consumed by B: {b_last}, committed in {t3:.1f}s; B's samples {outcomes}")
        await check_windows(kafka_bootstrap, topic_prefix, expected, "scale out and in")
        assert b_last >= n - cut2, f"B consumed only {b_last} of the last third ({n - cut2}): input skipped"
    print(f"test took {time.monotonic() - started:.1f}s")


async def test_hard_kill_survivor_takes_over_without_losing_windows(kafka_bootstrap: str, topic_prefix: str,
                                                                    tmp_path: Path) -> None:
    sc = scenario(nodes=40, ticks=240, seed=29)
    expected = offline_windows(sc.states)
    n = len(sc.states)
    half, rest = n // 2, 3 * n // 4
    procs: list[ServiceProc] = []
    started = time.monotonic()
    with workers(procs):
        a = worker("a", kafka_bootstrap, topic_prefix, tmp_path)
        b = worker("b", kafka_bootstrap, topic_prefix, tmp_path)
        procs += [a, b]
        await wait_assigned((a, b))
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[:half])
        await wait_committed(kafka_bootstrap, topic_prefix, half, 40, "A + B")
        assert await consumed(a, topic_prefix) > 0 and await consumed(b, topic_prefix) > 0, "partitions not split"

        # SIGKILL A mid-stream: the next quarter streams in paced, A dies once the group committed part of it
        producing = asyncio.create_task(paced(kafka_bootstrap, topic_prefix, sc.states, half, rest))
        await wait_progress(kafka_bootstrap, topic_prefix, half + 600, 30, "3rd quarter")
        a_consumed = await consumed(a, topic_prefix)
        a.proc.kill()
        a.proc.wait(5)
        killed = time.monotonic()
        at_kill = await committed_total(kafka_bootstrap, topic_prefix)
        produced_at_kill = sum((await end_offsets(kafka_bootstrap, topic_prefix + "nodestate.v1")).values())
        await producing
        await produce_states(kafka_bootstrap, topic_prefix, sc.states[rest:], offset=rest)
        await wait_committed(kafka_bootstrap, topic_prefix, n, 40, "B after A was killed")
        takeover_s = time.monotonic() - killed
        b_log = b.log.read_text(errors="replace")
        assert "revoked: state handed over" in b_log and "state restored" in b_log, b.tail()
        outcomes = await sample_outcomes(b)
        stop(b)
        assert b.proc.returncode == 0, f"B did not stop cleanly (exit {b.proc.returncode}):\n{b.tail()}"
        print(f"\n{n} NodeStates: A SIGKILLed having consumed {a_consumed} (its count shortly before the kill), "
              f"group committed {at_kill} of {produced_at_kill} produced; B committed all {n} "
              f"{takeover_s:.1f}s after the kill (session timeout 6 s); B's samples {outcomes}")
        await check_windows(kafka_bootstrap, topic_prefix, expected, "hard kill")
    print(f"test took {time.monotonic() - started:.1f}s")


async def test_rebalances_while_streaming_lose_and_change_no_window(kafka_bootstrap: str, topic_prefix: str,
                                                                    tmp_path: Path) -> None:
    """B joins and A leaves (SIGTERM) while NodeStates stream in: hand-overs with batches in flight."""
    sc = scenario(nodes=40, ticks=240, seed=41)
    expected = offline_windows(sc.states)
    n = len(sc.states)
    procs: list[ServiceProc] = []
    started = time.monotonic()
    with workers(procs):
        a = worker("a", kafka_bootstrap, topic_prefix, tmp_path)
        procs.append(a)
        await wait_assigned((a,))
        producing = asyncio.create_task(paced(kafka_bootstrap, topic_prefix, sc.states, 0, n, chunk=100,
                                              pause_s=0.08))
        try:
            await wait_progress(kafka_bootstrap, topic_prefix, n // 6, 30, "A alone")
            b = worker("b", kafka_bootstrap, topic_prefix, tmp_path)
            procs.append(b)
            await wait_assigned((b,))
            joined_at = await committed_total(kafka_bootstrap, topic_prefix)
            await wait_progress(kafka_bootstrap, topic_prefix, joined_at + n // 6, 30, "A + B")
            a_share = await consumed(a, topic_prefix)
            stop(a)
            assert a.proc.returncode == 0, f"A did not stop cleanly (exit {a.proc.returncode}):\n{a.tail()}"
            left_at = await committed_total(kafka_bootstrap, topic_prefix)
            streaming = not producing.done()
        finally:
            await producing
        await wait_committed(kafka_bootstrap, topic_prefix, n, 40, "B alone")
        b_share = await consumed(b, topic_prefix)
        outcomes = await sample_outcomes(b)
        stop(b)
        assert b.proc.returncode == 0, f"B did not stop cleanly (exit {b.proc.returncode}):\n{b.tail()}"
        print(f"\n{n} NodeStates streamed: B joined at {joined_at} committed, A left at {left_at} "
              f"(stream still running: {streaming}); A consumed {a_share} (before its SIGTERM), B {b_share}; "
              f"B's samples {outcomes}")
        await check_windows(kafka_bootstrap, topic_prefix, expected, "rebalances while streaming")
        assert streaming, "the stream ended before A left: lengthen it (pause_s) so both hand-overs happen under load"
        assert a_share > 0 and b_share > 0, f"A consumed {a_share}, B {b_share}: the partitions never moved"
    print(f"test took {time.monotonic() - started:.1f}s")
