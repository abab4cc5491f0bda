"""`borgctl bench stages`: each Python stream stage's drain rate against a raw aiokafka pass-through.

The target (one per stage): *each Python stage at ≥ 50 % of the raw aiokafka pass-through
rate*. Everything runs on the local broker, one thing at a time, in a fresh topic namespace
(``bench<hex>-``, every registry topic created, all deleted at the end):

1. **prefill** ``nodestate.v1`` with N real NodeState messages (~2.4 kB JSON each): ``nodes``
   nodes (5,000) × N / nodes seconds of consecutive ``ts_ms`` / ``seq`` (so windows close as
   in live operation), key = node, headers ``build_headers("nodestate.v1")``. The messages come
   from ``loadtests.loadgen``'s pool (simulator output, spliced per node and second) and go out
   through the producer's batch API with no pacing — ~15 s for 500,000.
2. **passthrough** (the ceiling, in this process): a raw aiokafka consumer in a fresh group,
   configured like ``BatchStream``'s (``getmany`` batches of up to 2,000, read_committed, the same
   fetch sizes), produces every record's key, value and headers *unchanged* (no decode) to a
   scratch topic through an idempotent ``acks=all``, ``linger_ms=5`` producer with one
   ``send()`` per record — exactly what ``stream_io.Sink`` does for each output — and, like
   ``BatchStream``, waits for the broker's acks before committing offsets once a second. It is
   the cheapest loop a stage on this runtime could be. Throughput is timed from the first
   fetched batch to the last record acknowledged and committed; CPU is ``time.process_time()``
   over the same span.
3. **features**: the features service (spawned like ``bench_pipeline`` does) drains the N
   records; it writes about N / 10 FeatureVectors to ``features.v1``.
4. **regime**, **anomaly**, **risk**: after features has committed all N and been stopped, each
   service is started alone, one after the other, and drains those FeatureVectors in its own
   consumer group (``<prefix>borg-<svc>``). ``taskevents.v1`` stays empty, so risk exercises its
   node-feature path (decode, newest-vector table, changelog) and scores no tasks. Risk runs
   only when ``models/failure`` loads (``bench_pipeline._models``). **forecast** (``models/forecast``)
   drains the same FeatureVectors last: each goes into its node's 5-minute load history; with N / nodes
   seconds of input few buckets close, so this times the per-vector path, not the (rare) model call.

How a service's drain is timed (start-up — imports, model load, group join, changelog
restore — is excluded): every ``POLL_S`` the bench reads the group's committed offsets on the
input topic (one OffsetFetch) and the child's CPU time (psutil, all threads). The window
starts at the first observed commit (count = records after it) — or, when less than half the
input was left by then (the service commits once a second, so short drains end before or
just after their first commit), at the first poll that found ``/readyz`` up (count = all,
so the first batch's warm-up is inside the window). It ends at the last poll at which the
child had still been busy (≥ ``BUSY_FRACTION`` of a core over the ``BUSY_WINDOW_S`` before
it) up to the final commit, so the idle wait for the next once-a-second commit is not
counted. ``cpu_per_msg`` is the child's CPU over that window per record in it. The
resolution is a poll interval or two at each end, which matters only for drains of about a
second (the regime / anomaly / risk inputs in ``--quick``).

Rows (bench ``stages``; ``offered`` = records on the stage's input): per case
(``passthrough``, ``features``, ``regime``, ``anomaly``, ``risk``) ``throughput`` (msg/s),
``cpu_per_msg`` (µs), ``consumed`` (records the stage committed: all of its input); per stage
``vs_passthrough`` (stage throughput / pass-through throughput, ratio) and ``target_met``
(1 when that ratio ≥ 0.5); features also ``produced`` (FeatureVectors written).

N is 500,000 (60,000 with ``--quick``): regime, anomaly and risk then drain 50,000
FeatureVectors, several seconds each. (With 150,000, regime's drain of 15,000 took about a
second and its first batches weighed in: the same code measured 0.36–0.37 of the pass-through
there and 0.40–0.43 with 500,000.) ``BENCH_STAGES_RECORDS`` and ``BENCH_STAGES_NODES``
override it and the node count (N is rounded to whole seconds of all nodes).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from contracts.topics import Topic
from loadtests.bench_pipeline import _models, _Service, _spawn, _stop
from loadtests.procs import delete_topics
from services.runtime.kafka_security import kafka_client_options

BENCH = "stages"
STAGES: tuple[str, ...] = ("features", "regime", "anomaly", "risk", "forecast")
NODES = 5000
FULL_RECORDS = 500_000
QUICK_RECORDS = 60_000
TARGET_RATIO = 0.5
POLL_S = 0.025
"""How often a draining service's committed offsets and CPU time are read."""
BUSY_WINDOW_S = 0.1
BUSY_FRACTION = 0.4
"""The child still drains at a poll when it used this much of a core over the ``BUSY_WINDOW_S`` before it
(psutil's CPU times tick every 10 ms: a shorter window cannot tell a busy process from a blip)."""
FIRST_COMMIT_MIN_LEFT = 0.5
"""Time from the first commit only when at least this share of the input was still unconsumed then."""
STAGE_LIMIT_S = 300.0
"""Longest a stage may take from spawn to having committed its whole input."""
IDLE_BUSY_PERCENT = 25.0
"""Warn when the machine is busier than this (all CPUs, over a second) before the bench starts."""
PASSTHROUGH_TOPIC = "bench-stages-passthrough"
BATCH_MAX = 2000
"""Records per fetched batch, as the model stages fetch by default (``batch_stream.MODEL_BATCH_MAX``)."""
COMMIT_INTERVAL_S = 1.0
"""As regime, anomaly and risk commit by default (features: every 5 s; a commit a second costs little)."""
STAGE_INPUT = {"features": Topic.NODESTATE, "regime": Topic.FEATURES, "anomaly": Topic.FEATURES, "risk": Topic.FEATURES,
               "forecast": Topic.FEATURES}


def _log(message: str) -> None:
    print(f"bench stages: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Drain:
    """One stage's (or the pass-through's) drain of its input."""

    case: str
    offered: int
    """Records on the input topic."""
    consumed: int
    """Records the stage committed (pass-through: moved)."""
    measured: int
    """Records inside the timed window."""
    seconds: float
    cpu_s: float
    method: str
    """How the window started: ``first-batch`` | ``first-commit`` | ``ready``."""

    @property
    def throughput(self) -> float:
        return self.measured / self.seconds

    @property
    def cpu_us_per_msg(self) -> float:
        return 1e6 * self.cpu_s / max(1, self.measured)


# ------------------------------------------------------------------------------ prefill


async def prefill(bootstrap: str, prefix: str, nodes: int, seconds: int, seed: int = 11) -> int:
    """``nodes`` × ``seconds`` NodeState records on ``<prefix>nodestate.v1`` as fast as the broker takes them.

    Second ``s`` carries ``seq`` = ``s`` and ``ts_ms`` = a whole second ``seconds`` + 1 s ago + ``s`` s;
    each batch is one partition's nodes of one loadgen slice (the partition is the key's).
    """
    from aiokafka import AIOKafkaProducer

    from contracts.headers import build_headers
    from loadtests.loadgen import (
        NODESTATE_TOPIC,
        _send_members,
        build_pool,
        plan_slices,
        second_middle,
    )
    from services.runtime.partitioning import default_partition

    started = time.monotonic()
    pool = build_pool(nodes, seed, "bst-", pool_ticks=max(1, min(48, seconds)))
    built = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                linger_ms=5, max_batch_size=524_288, acks="all")
    await producer.start()
    topic = prefix + NODESTATE_TOPIC
    headers = build_headers(NODESTATE_TOPIC)
    sent = 0
    size = 0
    try:
        partitions = await producer.partitions_for(topic)
        plan = plan_slices(pool, [default_partition(k, partitions) for k in pool.keys])
        ts0 = (int(time.time()) - seconds - 1) * 1000
        futures: list[Any] = []
        for second in range(seconds):
            middle = second_middle(ts0 + 1000 * second, second)
            for slice_plan in plan:
                for partition, members in slice_plan:
                    futures += await _send_members(producer, topic, partition, members, second, middle, pool.ticks,
                                                   headers)
                    sent += len(members)
                    if second == 0:
                        size += sum(len(head) + len(middle) + len(bodies[phase % pool.ticks])
                                    for _, head, bodies, phase in members)
        await producer.flush()
        for f in futures:
            await f
    finally:
        await producer.stop()
    _log(f"prefilled {sent:,} NodeState ({nodes} nodes × {seconds} s, ~{size / max(1, nodes):.0f} B each) in "
         f"{time.monotonic() - started:.1f}s (pool {built - started:.1f}s)")
    return sent


# ------------------------------------------------------------------------------ the pass-through ceiling


async def passthrough(bootstrap: str, prefix: str, expected: int, limit_s: float = STAGE_LIMIT_S) -> Drain:
    """Consume ``<prefix>nodestate.v1`` in a fresh group and produce every record unchanged (see the docstring)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    src = prefix + STAGE_INPUT["features"]
    dst = prefix + PASSTHROUGH_TOPIC
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                client_id="bench-stages-passthrough",
                                enable_idempotence=True, acks="all", linger_ms=5, max_batch_size=262_144)
    consumer = AIOKafkaConsumer(src, bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=f"{prefix}bench-passthrough",
                                client_id="bench-stages-passthrough", enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                max_poll_records=BATCH_MAX, max_partition_fetch_bytes=8 * 1024 * 1024,
                                fetch_max_bytes=64 * 1024 * 1024)
    await producer.start()
    await consumer.start()
    moved = 0
    positions: dict[TopicPartition, int] = {}
    pending: list[asyncio.Future[Any]] = []
    t0 = cpu0 = 0.0
    deadline = time.monotonic() + limit_s
    try:
        last_commit = time.monotonic()
        while moved < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"passthrough moved {moved}/{expected} records in {limit_s:.0f}s")
            batch = await consumer.getmany(timeout_ms=100, max_records=BATCH_MAX)
            if not batch:
                continue
            if not moved:
                t0, cpu0 = time.perf_counter(), time.process_time()
            for tp, records in batch.items():
                for record in records:
                    pending.append(await producer.send(dst, value=record.value, key=record.key,
                                                       headers=list(record.headers)))
                positions[tp] = records[-1].offset + 1
                moved += len(records)
            if moved >= expected or time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                flushing, pending = pending, []
                await asyncio.gather(*flushing)
                await consumer.commit(positions)
                last_commit = time.monotonic()
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        await consumer.stop()
        await producer.stop()
    return Drain("passthrough", expected, moved, moved, seconds, cpu, "first-batch")


# ------------------------------------------------------------------------------ a service's drain


@dataclass
class _Sample:
    t: float
    committed: int
    cpu_s: float


async def _ready(http: Any, port: int) -> bool:
    import aiohttp

    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=0.5)) as r:
            return bool(r.status == 200)
    except (aiohttp.ClientError, TimeoutError):
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def _watch(service: _Service, bootstrap: str, group: str, topic: str, expected: int,
                 limit_s: float) -> tuple[list[_Sample], int | None]:
    """Poll until ``group`` committed ``expected`` records of ``topic``: the samples, and the first ready one."""
    import aiohttp
    import psutil
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    samples: list[_Sample] = []
    ready_at: int | None = None
    coordinator: int | None = None
    deadline = time.monotonic() + limit_s
    try:
        async with aiohttp.ClientSession() as http:
            while True:
                if service.proc.poll() is not None:
                    raise RuntimeError(f"{service.name} exited ({service.proc.returncode}); see {service.log}:\n"
                                       + _tail(service.log))
                # time and CPU first: what the requests below see happened at or after them
                t = time.monotonic()
                try:
                    times = service.ps.cpu_times()
                except psutil.NoSuchProcess:
                    continue  # exited: reported above
                try:
                    if coordinator is None:
                        coordinator = await admin.find_coordinator(group)
                    offsets = await admin.list_consumer_group_offsets(group, group_coordinator_id=coordinator)
                except KafkaError:
                    offsets, coordinator = {}, None
                committed = sum(o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset > 0)
                up = ready_at is None and await _ready(http, service.port)
                samples.append(_Sample(t, committed, times.user + times.system))
                if up:
                    ready_at = len(samples) - 1
                if committed >= expected:
                    return samples, ready_at
                if samples[-1].t > deadline:
                    raise RuntimeError(f"{service.name} committed {committed}/{expected} records of {topic} "
                                       f"within {limit_s:.0f}s")
                await asyncio.sleep(POLL_S)
    finally:
        await admin.close()


def drain_window(samples: list[_Sample], ready_at: int | None, expected: int) -> tuple[int, int, str]:
    """``(start, end, method)`` sample indices of the timed window of a drain (see the module docstring)."""
    final = next(i for i, s in enumerate(samples) if s.committed >= expected)
    first = next(i for i, s in enumerate(samples) if s.committed > 0)
    if expected - samples[first].committed >= FIRST_COMMIT_MIN_LEFT * expected:
        start, method = first, "first-commit"
    else:
        start, method = (ready_at if ready_at is not None and ready_at < final else max(0, final - 1)), "ready"
    end = min(final, start + 1)
    for i in range(final, start, -1):
        j = i
        while j > start and samples[i].t - samples[j].t < BUSY_WINDOW_S:
            j -= 1
        a, b = samples[j], samples[i]
        if b.t > a.t and b.cpu_s - a.cpu_s >= BUSY_FRACTION * (b.t - a.t):
            end = i
            break
    while end > start + 1 and samples[end].cpu_s <= samples[end - 1].cpu_s:
        end -= 1  # the busy stretch ended before the last poll of its window
    return start, end, method


async def drain_service(name: str, bootstrap: str, prefix: str, work: Path, env: dict[str, str],
                        limit_s: float = STAGE_LIMIT_S) -> Drain:
    """Spawn ``name`` alone, time its drain of its input topic, stop it."""
    from services.runtime.stream_settings import app_id

    topic = prefix + STAGE_INPUT[name]
    expected = await _input_records(bootstrap, topic)
    if expected <= 0:
        raise RuntimeError(f"{name}: nothing to drain on {topic}")
    service = _spawn(name, bootstrap, prefix, work, env)
    try:
        samples, ready_at = await _watch(service, bootstrap, app_id(name, prefix), topic, expected, limit_s)
    finally:
        _stop(service)
    start, end, method = drain_window(samples, ready_at, expected)
    a, b = samples[start], samples[end]
    measured = expected - (a.committed if method == "first-commit" else 0)
    seconds = max(b.t - a.t, POLL_S)
    return Drain(name, expected, samples[-1].committed, measured, seconds, b.cpu_s - a.cpu_s, method)


async def _input_records(bootstrap: str, topic: str) -> int:
    """Records on ``topic`` (sum of end offsets; the registry topics start empty and nothing is deleted)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from contracts.topics import topic_spec

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(topic_spec(topic).partitions)]
        return int(sum((await consumer.end_offsets(tps)).values()))
    finally:
        await consumer.stop()


# ------------------------------------------------------------------------------ the bench


def _describe(d: Drain) -> str:
    return (f"{d.case}: {d.consumed:,}/{d.offered:,} consumed; {d.throughput:,.0f} msg/s, "
            f"{d.cpu_us_per_msg:.1f} µs CPU/msg ({d.measured:,} msgs in {d.seconds:.2f}s from {d.method})")


def rows_of(pt: Drain, stages: list[Drain], produced: int | None) -> list[dict[str, Any]]:
    """The result rows; ratios are computed from the rounded throughputs the rows report."""

    def row(d: Drain, metric: str, value: float, unit: str) -> dict[str, Any]:
        return {"bench": BENCH, "case": d.case, "offered": d.offered, "metric": metric, "value": value,
                "unit": unit}

    def basic(d: Drain) -> list[dict[str, Any]]:
        return [row(d, "throughput", round(d.throughput, 1), "msg/s"),
                row(d, "cpu_per_msg", round(d.cpu_us_per_msg, 2), "µs"),
                row(d, "consumed", float(d.consumed), "msg")]

    rows = basic(pt)
    ceiling = round(pt.throughput, 1)
    for d in stages:
        rows += basic(d)
        if d.case == "features" and produced is not None:
            rows.append(row(d, "produced", float(produced), "FeatureVector"))
        ratio = round(round(d.throughput, 1) / ceiling, 4) if ceiling > 0 else 0.0
        rows.append(row(d, "vs_passthrough", ratio, "ratio"))
        rows.append(row(d, "target_met", 1.0 if ratio >= TARGET_RATIO else 0.0, "bool"))
    return rows


async def run_stages(bootstrap: str, *, records: int, nodes: int = NODES,
                     stages: tuple[str, ...] = STAGES) -> list[dict[str, Any]]:
    """Prefill, pass-through, then each stage alone (see the module docstring); the result rows."""
    import psutil

    from contracts.models import NodeState
    from contracts.topics import TOPICS, TopicSpec
    from services.runtime.admin import create_topics

    unknown = set(stages) - set(STAGES)
    if unknown or "features" not in stages:
        raise ValueError(f"stages must include features and be among {STAGES}, got {stages}")
    nodes = max(1, min(nodes, records))
    seconds = max(1, round(records / nodes))
    busy = await asyncio.to_thread(psutil.cpu_percent, 1.0)
    if busy > IDLE_BUSY_PERCENT:
        _log(f"warning: the machine is {busy:.0f} % busy before the bench ({os.cpu_count()} CPUs): the figures "
             "will be low")
    prefix = f"bench{uuid.uuid4().hex[:8]}-"
    scratch = TopicSpec(name=PASSTHROUGH_TOPIC, key="node", model=NodeState, partitions=6)
    await create_topics(bootstrap, prefix=prefix, specs=(*TOPICS, scratch))
    work = Path(tempfile.mkdtemp(prefix="borg-bench-stages-"))
    try:
        env = _models(work)
        if "risk" in stages and "RISK_MODEL_DIR" not in env:
            stages = tuple(s for s in stages if s != "risk")
        n = await prefill(bootstrap, prefix, nodes, seconds)
        pt = await passthrough(bootstrap, prefix, n)
        _log(_describe(pt))
        drains: list[Drain] = []
        produced: int | None = None
        for name in stages:
            d = await drain_service(name, bootstrap, prefix, work, env)
            drains.append(d)
            if name == "features":
                produced = await _input_records(bootstrap, prefix + STAGE_INPUT["regime"])
            _log(_describe(d) + (f"; wrote {produced:,} FeatureVectors" if name == "features" else "")
                 + f"; {d.throughput / pt.throughput:.2f}× pass-through")
    finally:
        await delete_topics(bootstrap, prefix)
        shutil.rmtree(work, ignore_errors=True)
    return rows_of(pt, drains, produced)


def run_stages_bench(quick: bool, bootstrap: str) -> list[dict[str, Any]]:
    """Entry point used by ``borgctl bench stages`` (see loadtests/bench.py)."""
    records = int(os.environ.get("BENCH_STAGES_RECORDS", QUICK_RECORDS if quick else FULL_RECORDS))
    nodes = int(os.environ.get("BENCH_STAGES_NODES", NODES))
    return asyncio.run(run_stages(bootstrap, records=records, nodes=nodes))


if __name__ == "__main__":
    for result in run_stages_bench("--quick" in sys.argv, os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")):
        print(orjson.dumps(result).decode())
