"""Cheap NodeState load generator: N simulated nodes at 1 Hz on ``nodestate.v1``.

The generator shares the machine with the broker and the services it loads, so its cost
per message lowers whatever it measures. Instead of simulating, building dicts and
serialising every message on the hot path (~45 µs each), it precomputes a *pool* of
simulator output before the timed load starts and replays it:

* ``SyntheticCluster(nodes=M, ...)`` (``M = min(N, pool_budget // pool_ticks)`` template
  nodes) runs ``pool_ticks * tick_stride`` ticks and every ``tick_stride``-th tick is
  serialised (default 1,000 × 48 from 96 ticks: ~120 MB, ~2 s). Striding keeps the default
  co-runner epochs (30–120 ticks) but lets most nodes change contention regime within
  one pool cycle; cycling back to the start is a further change.
* Node ``i`` (name ``<prefix><i:04d>``, as ``SyntheticCluster`` names them) replays
  template ``i % M`` starting at its own pool phase, so nodes sharing a template are out
  of step. Each pooled message is stored as its JSON *without* ``node``, ``ts_ms`` and
  ``seq`` (``body``); a node's ``head`` is ``{"node":"<name>","ts_ms":``. A message is
  ``head + b"<ts_ms>,\\"seq\\":<seq>" + body`` — the middle part is the same for every node
  in a second (``seq`` = seconds since the start, ``ts_ms`` = the wall-clock second the
  sample is scheduled for), so the per-message work is two bytes concatenations. No
  placeholder is searched for: the three fields are removed from the dict before
  serialising, so nothing in the body can collide with them.
* Records go out through aiokafka's batch API: per 1/20 s slice and partition one
  ``BatchBuilder`` (``timestamp=None``: the record timestamp is the append wall time,
  which the pipeline bench measures latency from), closed and handed to ``send_batch``.
  The partition is the one ``DefaultPartitioner`` picks for the key (murmur2), computed
  once per node.

Task events (one SUBMIT + SCHEDULE per second on ``taskevents.v1``) stay per-message sends.

``python -m loadtests.loadgen --nodes 10000 --seconds 20`` runs it against a fresh topic
namespace and prints the generator's CPU µs per message and the achieved rate.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from contracts.topics import Topic
from services.runtime.kafka_security import kafka_client_options
from services.runtime.partitioning import default_partition

NODESTATE_TOPIC = Topic.NODESTATE
TASK_TOPIC = Topic.TASKEVENTS
SLICES = 20
"""Sends per second: node ``i`` is sent in slice ``i // ceil(N / SLICES)``."""
SPLICED_FIELDS = ("node", "ts_ms", "seq")
_SEQ_KEY = b',"seq":'


# ------------------------------------------------------------------------------ message splicing


def split_nodestate(state: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """``(head, body)`` of one NodeState-shaped dict: ``head`` is ``{"node":<name>,"ts_ms":``
    and ``body`` the JSON of every other field, starting with ``,`` (or just ``}``).

    ``splice(head, ts_ms, seq, body)`` is then the JSON of ``state`` with ``ts_ms`` and ``seq``
    replaced (``node``, ``ts_ms`` and ``seq`` first).
    """
    rest = {k: v for k, v in state.items() if k not in SPLICED_FIELDS}
    encoded = orjson.dumps(rest)
    body = b"}" if encoded == b"{}" else b"," + encoded[1:]
    return node_head(str(state["node"])), body


def node_head(name: str) -> bytes:
    return b'{"node":' + orjson.dumps(name) + b',"ts_ms":'


def second_middle(ts_ms: int, seq: int) -> bytes:
    """The part between head and body shared by every node in one second."""
    return str(int(ts_ms)).encode() + _SEQ_KEY + str(int(seq)).encode()


def splice(head: bytes, ts_ms: int, seq: int, body: bytes) -> bytes:
    return head + second_middle(ts_ms, seq) + body


# ------------------------------------------------------------------------------ the pool


@dataclass(frozen=True)
class NodeStatePool:
    """Precomputed NodeState messages for ``len(names)`` nodes (see the module docstring)."""

    names: list[str]
    keys: list[bytes]
    heads: list[bytes]
    bodies: list[list[bytes]]
    """``bodies[t][k]``: template node ``t`` at pool tick ``k``."""
    template: list[int]
    phase: list[int]
    ticks: int

    def __len__(self) -> int:
        return len(self.names)

    def body(self, node: int, second: int) -> bytes:
        return self.bodies[self.template[node]][(second + self.phase[node]) % self.ticks]

    def message(self, node: int, second: int, ts_ms: int, seq: int) -> bytes:
        return splice(self.heads[node], ts_ms, seq, self.body(node, second))

    def nbytes(self) -> int:
        return sum(len(b) for bodies in self.bodies for b in bodies) + sum(len(h) for h in self.heads)


def node_names(nodes: int, name_prefix: str) -> list[str]:
    """Node names as ``SyntheticCluster(node_prefix=name_prefix)`` gives them."""
    return [f"{name_prefix}{i:04d}" for i in range(nodes)]


def build_pool(nodes: int, seed: int, name_prefix: str, *, pool_ticks: int = 48, tick_stride: int = 2,
               pool_budget: int = 48_000, **sim_kwargs: Any) -> NodeStatePool:
    """Simulate the template nodes and serialise ``pool_ticks`` of their ticks.

    ``pool_budget`` bounds the pooled messages (templates × ticks, ~2.4 kB each); extra
    ``sim_kwargs`` go to ``SyntheticCluster``.
    """
    import numpy as np

    from simulator import SyntheticCluster

    if nodes < 1 or pool_ticks < 1 or tick_stride < 1:
        raise ValueError("nodes, pool_ticks and tick_stride must be >= 1")
    templates = max(1, min(nodes, pool_budget // pool_ticks))
    names = node_names(nodes, name_prefix)
    sim = SyntheticCluster(nodes=templates, seed=seed, node_prefix=name_prefix, **sim_kwargs)
    bodies: list[list[bytes]] = [[] for _ in range(templates)]
    for k in range(pool_ticks * tick_stride):
        batch = sim.tick()
        if k % tick_stride:
            continue
        for t, state in enumerate(batch.nodestate_dicts(ts_ms=0)):
            bodies[t].append(split_nodestate(state)[1])
    rng = np.random.default_rng(seed + 1)
    # the first `templates` nodes replay their template from its start (node i *is* sim node i);
    # the copies start at their own phase, so nodes sharing a template are out of step
    phase = [0 if i < templates else int(p) for i, p in enumerate(rng.integers(pool_ticks, size=nodes))]
    return NodeStatePool(
        names=names,
        keys=[n.encode() for n in names],
        heads=[node_head(n) for n in names],
        bodies=bodies,
        template=[i % templates for i in range(nodes)],
        phase=phase,
        ticks=pool_ticks,
    )


Member = tuple[bytes, bytes, list[bytes], int]
"""(key, head, the template's bodies, phase) of one node."""


def plan_slices(pool: NodeStatePool, partition_of: Sequence[int],
                slices: int = SLICES) -> list[list[tuple[int, list[Member]]]]:
    """Per slice of the second: ``[(partition, [member, ...]), ...]``, node order kept per partition."""
    n = len(pool)
    per = (n + slices - 1) // slices
    plan: list[list[tuple[int, list[Member]]]] = []
    for k in range(slices):
        by_partition: dict[int, list[Member]] = {}
        for i in range(k * per, min((k + 1) * per, n)):
            member = (pool.keys[i], pool.heads[i], pool.bodies[pool.template[i]], pool.phase[i])
            by_partition.setdefault(partition_of[i], []).append(member)
        plan.append(sorted(by_partition.items()))
    return plan


# ------------------------------------------------------------------------------ sending


@dataclass(frozen=True)
class Progress:
    second: int
    """Seconds of load completed (0: the pool is built and the first second is about to start)."""
    sent: int
    """NodeState records handed to the producer so far."""
    lag_s: float
    """How late the last completed second finished against the 1 Hz schedule (0 when on time)."""


async def _send_members(producer: Any, topic: str, partition: int, members: list[Member], second: int,
                        middle: bytes, ticks: int, headers: list[tuple[str, bytes]]) -> list[Any]:
    futures = []
    batch = producer.create_batch()
    append = batch.append
    for key, head, bodies, phase in members:
        value = head + middle + bodies[(second + phase) % ticks]
        if append(key=key, value=value, timestamp=None, headers=headers) is None:  # batch full
            futures.append(await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
            append = batch.append
            if append(key=key, value=value, timestamp=None, headers=headers) is None:
                raise ValueError(f"NodeState of {key!r} ({len(value)} bytes) does not fit an empty batch")
    if batch.record_count():
        batch.close()  # closed: the sender takes it now instead of lingering
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures


def _check(futures: list[Any]) -> list[Any]:
    """Raise the first delivery error among finished batches; the unfinished ones."""
    pending = []
    for f in futures:
        if f.done():
            f.result()
        else:
            pending.append(f)
    return pending


async def generate_nodestate(bootstrap: str, topic_prefix: str, nodes: int, seconds: float, seed: int,
                             name_prefix: str, *, on_progress: Callable[[Progress], None] | None = None,
                             task_events: bool = True, pool: NodeStatePool | None = None,
                             producer_config: Mapping[str, Any] | None = None) -> int:
    """Play ``nodes`` simulated nodes at 1 Hz for ``seconds``; the NodeState records sent.

    The pool is built first (not timed); the load then starts on the next wall-clock second
    and second ``s`` carries ``ts_ms`` = that second + ``s`` s and ``seq`` = ``s``. The load
    stops after ``seconds`` of schedule time even when behind (as the old generator did).
    """
    from aiokafka import AIOKafkaProducer

    from contracts.headers import build_headers

    if pool is None:
        pool = build_pool(nodes, seed, name_prefix)
    if len(pool) != nodes:
        raise ValueError(f"pool has {len(pool)} nodes, not {nodes}")
    config: dict[str, Any] = {"linger_ms": 5, "max_batch_size": 524_288, "acks": 1, **(producer_config or {})}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_client_options(), **config)
    await producer.start()
    topic = topic_prefix + NODESTATE_TOPIC
    task_topic = topic_prefix + TASK_TOPIC
    headers = build_headers(NODESTATE_TOPIC)
    task_headers = build_headers(TASK_TOPIC)
    sent = 0
    try:
        partitions = await producer.partitions_for(topic)
        plan = plan_slices(pool, [default_partition(k, partitions) for k in pool.keys])
        ticks = pool.ticks
        loop = asyncio.get_running_loop()
        wall = time.time()
        first_second = int(wall) + 1
        start = loop.time() + (first_second - wall)
        await asyncio.sleep(max(0.0, start - loop.time()))
        if on_progress is not None:
            on_progress(Progress(0, 0, 0.0))
        futures: list[Any] = []
        second = 0
        while second < math.ceil(seconds) and loop.time() - start < seconds:
            second_start = start + second
            ts_ms = (first_second + second) * 1000
            middle = second_middle(ts_ms, second)
            for k, slice_plan in enumerate(plan):
                for partition, members in slice_plan:
                    futures += await _send_members(producer, topic, partition, members, second, middle, ticks,
                                                   headers)
                    sent += len(members)
                delay = second_start + (k + 1) / len(plan) - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            if task_events:
                await _send_task_events(producer, task_topic, task_headers, second, ts_ms,
                                        pool.names[second % nodes])
            futures = _check(futures)
            second += 1
            if on_progress is not None:
                on_progress(Progress(second, sent, max(0.0, loop.time() - (second_start + 1.0))))
        await producer.flush()
        for f in futures:
            await f
    finally:
        await producer.stop()
    return sent


async def _send_task_events(producer: Any, topic: str, headers: list[tuple[str, bytes]], second: int, ts_ms: int,
                            machine: str) -> None:
    """A trickle of task events for the risk service: one task scheduled per second."""
    task: dict[str, Any] = {"task_id": f"bench-{second}", "job_id": f"bench-job-{second % 20}",
                            "task_index": second, "ts_ms": ts_ms, "source": "synthetic", "cpu_request": 0.1,
                            "memory_request": 0.1}
    for event, extra in (("SUBMIT", {}), ("SCHEDULE", {"machine": machine})):
        await producer.send(topic, key=task["task_id"].encode(), value=orjson.dumps({**task, "event": event, **extra}),
                            headers=headers)


# ------------------------------------------------------------------------------ measuring a generator


def _run_in_child(bootstrap: str, prefix: str, nodes: int, seconds: float, seed: int, name_prefix: str,
                  done: Any) -> None:
    from services.runtime.tuning import tune_malloc

    tune_malloc()
    done.value = asyncio.run(generate_nodestate(bootstrap, prefix, nodes, seconds, seed, name_prefix))


async def measure_generator(target: Callable[..., None], bootstrap: str, nodes: int, seconds: float, *,
                            seed: int = 1, settle_s: float = 2.0) -> dict[str, float]:
    """Run ``target(bootstrap, prefix, nodes, seconds, seed, name_prefix, done)`` (the bench's
    ``_generate`` signature) in a spawned child against a fresh topic namespace; sample the
    child's CPU time and the topic's end offsets every 0.5 s.

    ``us_per_msg`` is CPU over records produced between ``settle_s`` after the first record
    and the last sample before the child exits (steady state); ``us_per_msg_total`` includes
    start-up (imports, simulator, pool; up to the last sample). ``msgs_per_s`` is the steady-state rate.
    """
    import multiprocessing as mp
    import uuid

    import psutil
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from contracts.topics import TOPICS
    from services.runtime.admin import create_topics

    prefix = f"lg-{uuid.uuid4().hex[:8]}-"
    await create_topics(bootstrap, prefix=prefix)
    topic = prefix + NODESTATE_TOPIC
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=None, enable_auto_commit=False)
    await consumer.start()
    ctx = mp.get_context("spawn")
    done = ctx.Value("q", 0)
    samples: list[tuple[float, float, int]] = []  # (monotonic, child cpu s, records in topic)
    try:
        spec = next(s for s in TOPICS if s.name == NODESTATE_TOPIC)
        tps = [TopicPartition(topic, p) for p in range(spec.partitions)]
        child = ctx.Process(target=target, args=(bootstrap, prefix, nodes, seconds, seed, f"lg{nodes}-", done),
                            daemon=True)
        child.start()
        ps = psutil.Process(child.pid)
        while child.is_alive():
            try:
                cpu = ps.cpu_times()
            except psutil.NoSuchProcess:
                break
            ends = await consumer.end_offsets(tps)
            samples.append((time.monotonic(), cpu.user + cpu.system, sum(ends.values())))
            await asyncio.sleep(0.5)
        child.join(60)
    finally:
        await consumer.stop()
        await _delete_prefix(bootstrap, prefix)
    first = next((s for s in samples if s[2] > 0), None)
    if first is None:
        raise RuntimeError("the generator produced nothing")
    steady = [s for s in samples if s[0] >= first[0] + settle_s]
    if len(steady) < 2:
        raise RuntimeError(f"run too short to measure a steady state ({len(samples)} samples)")
    a, b = steady[0], steady[-2] if len(steady) > 2 else steady[-1]  # the last sample may be flush/stop
    last = samples[-1]
    return {
        "nodes": float(nodes),
        "us_per_msg": 1e6 * (b[1] - a[1]) / max(1, b[2] - a[2]),
        "msgs_per_s": (b[2] - a[2]) / max(1e-9, b[0] - a[0]),
        "us_per_msg_total": 1e6 * last[1] / max(1, last[2]),
        "cpu_total_s": last[1],
        "records": float(last[2]),
        "sent": float(done.value),
    }


async def _delete_prefix(bootstrap: str, prefix: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.loadgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000, 10000])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    args = parser.parse_args(argv)
    for n in args.nodes:
        r = asyncio.run(measure_generator(_run_in_child, args.bootstrap, n, args.seconds))
        print(orjson.dumps(r).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
