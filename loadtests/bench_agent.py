"""`borgctl bench agent`: what one sampling cycle costs, and how fast one process can publish NodeState.

Cases (rows ``{"bench": "agent", "case", "offered", "metric", "value", "unit"}``):

* ``sample_cycle_<pmu>`` — one full agent cycle on this node (perf_event reads, /proc,
  NodeState build + pydantic validation + span + spool append), no broker: mean and p99
  wall µs, CPU µs, and the CPU share that cycle costs at 1 Hz.
* ``agent_process_1hz`` — the real ``serve node-agent`` process sampling at 1 Hz and
  publishing to the local broker: CPU % of one core over a measured window, and RSS.
* ``agent_spool_drain`` — the agent's delivery path (spool → record batches → broker, zstd,
  idempotent, acks=all) draining a pre-filled spool: NodeState/s and CPU µs per message.
* ``replay_synthetic`` — one ``borgctl replay --source synthetic`` run (simulate + encode +
  publish, 1000 nodes): NodeState/s acknowledged and CPU µs per message.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from contracts.topics import Topic
from loadtests.arena_live.kube import stop_process
from loadtests.procs import delete_topics

BENCH = "agent"
ROOT = Path(__file__).resolve().parents[1]


def _row(case: str, metric: str, value: float, unit: str, offered: float | None = None) -> dict[str, Any]:
    return {"bench": BENCH, "case": case, "offered": offered, "metric": metric, "value": float(value), "unit": unit}


def _say(message: str) -> None:
    print(f"bench agent: {message}", file=sys.stderr, flush=True)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def sampling_cycle(cycles: int) -> list[dict[str, Any]]:
    from services.node_agent.agent import LiveSource, NodeAgent
    from services.node_agent.live import LiveSampler
    from services.node_agent.shipper import Shipper
    from services.node_agent.spool import Spool

    with tempfile.TemporaryDirectory() as tmp:
        spool = Spool(tmp, max_bytes=256 * 1024 * 1024)
        sampler = LiveSampler()
        shipper = Shipper(spool, lambda: None, Topic.NODESTATE)  # type: ignore[arg-type,return-value]
        agent = NodeAgent(source=LiveSource("bench-node", sampler), spool=spool, shipper=shipper, interval_s=1.0)
        sampler.open()
        try:
            walls, cpus = [], []
            tick = int(time.time()) * 1000
            for i in range(cycles + 10):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                agent.sample_once(tick + i * 1000)
                if i >= 10:  # warm-up
                    walls.append(time.perf_counter() - wall0)
                    cpus.append(time.process_time() - cpu0)
        finally:
            sampler.close()
            spool.close()
    case = f"sample_cycle_{sampler.pmu}"
    cpu_us = sum(cpus) / len(cpus) * 1e6
    return [
        _row(case, "cycle_us_mean", sum(walls) / len(walls) * 1e6, "us"),
        _row(case, "cycle_us_p99", _pct(walls, 99) * 1e6, "us"),
        _row(case, "cycle_cpu_us", cpu_us, "us"),
        _row(case, "cpu_pct_at_1hz", cpu_us / 1e6 * 100, "% of one core", offered=1.0),
    ]


def agent_process(bootstrap: str, prefix: str, seconds: float) -> list[dict[str, Any]]:
    """The real service process at 1 Hz; CPU measured after start-up (imports, first connect)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            KAFKA_BOOTSTRAP=bootstrap,
            BORG_TOPIC_PREFIX=prefix,
            NODE_AGENT_NODE="bench-node",
            NODE_AGENT_INTERVAL_S="1",
            NODE_AGENT_SPOOL_DIR=tmp,
            LOG_LEVEL="WARNING",
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.node_agent"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ps = psutil.Process(proc.pid)
            time.sleep(4.0)  # benchmark warm-up: imports, first connect, first samples
            t0, c0 = time.monotonic(), ps.cpu_times()
            time.sleep(seconds)
            t1, c1 = time.monotonic(), ps.cpu_times()
            rss_mb = ps.memory_info().rss / 2**20
        finally:
            stop_process(proc, 20)
    used = (c1.user + c1.system) - (c0.user + c0.system)
    return [
        _row("agent_process_1hz", "cpu_pct", used / (t1 - t0) * 100, "% of one core", offered=1.0),
        _row("agent_process_1hz", "rss_mb", rss_mb, "MiB", offered=1.0),
    ]


async def spool_drain(bootstrap: str, prefix: str, count: int) -> list[dict[str, Any]]:
    from contracts.headers import build_headers
    from services.node_agent.publish import BatchingProducer
    from services.node_agent.shipper import Shipper
    from services.node_agent.spool import Spool
    from services.node_agent.synthetic import SyntheticEncoder
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=100, seed=1)
    encoder = SyntheticEncoder(sim)
    headers = build_headers(Topic.NODESTATE)
    with tempfile.TemporaryDirectory() as tmp:
        spool = Spool(tmp, max_bytes=1024 * 1024 * 1024)
        tick = 0
        while len(spool) < count:
            for key, value in zip(
                encoder.keys, encoder.encode(sim.tick(), ts_ms=1_700_000_000_000 + tick, seq=tick), strict=True
            ):
                spool.append(key, value, headers)
            tick += 1

        def producer() -> BatchingProducer:
            return BatchingProducer(
                bootstrap=bootstrap,
                client_id="bench-agent-drain",
                topic_prefix=prefix,
                compression="zstd",
                max_batch_size=1_048_576,
            )

        shipper = Shipper(spool, producer, Topic.NODESTATE, batch_records=5000, attempt_timeout_s=60)
        await shipper.ship_once()  # connect + warm up
        sent = shipper.delivered
        t0, c0 = time.monotonic(), time.process_time()
        while len(spool):
            await shipper.ship_once()
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        delivered = shipper.delivered - sent
        await shipper._disconnect()
        spool.close()
    return [
        _row("agent_spool_drain", "nodestate_per_s", delivered / wall, "msg/s"),
        _row("agent_spool_drain", "cpu_us_per_msg", cpu / delivered * 1e6, "us"),
    ]


async def replay_synthetic(bootstrap: str, prefix: str, count: int) -> list[dict[str, Any]]:
    from loadtests.replay import Progress, build_parser, make_source, run

    args = build_parser().parse_args(
        [
            "--source",
            "synthetic",
            "--nodes",
            "1000",
            "--count",
            str(count),
            "--bootstrap",
            bootstrap,
            "--topic-prefix",
            prefix,
            "--quiet",
        ]
    )
    source = make_source(args)
    summary = await run(args, source, Progress("bench replay", sys.stderr, quiet=True))
    return [
        _row("replay_synthetic", "nodestate_per_s", summary.rate, "msg/s"),
        _row("replay_synthetic", "cpu_us_per_msg", summary.cpu_seconds / max(summary.sent, 1) * 1e6, "us"),
    ]


async def _topics(bootstrap: str, prefix: str) -> None:
    from contracts.topics import topic_spec
    from services.runtime.admin import create_topics

    await asyncio.wait_for(create_topics(bootstrap, prefix=prefix, specs=(topic_spec(Topic.NODESTATE),)), timeout=20)


def run_agent_bench(quick: bool) -> list[dict[str, Any]]:
    import gc

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    prefix = f"bench-agent-{uuid.uuid4().hex[:8]}-"
    rows = sampling_cycle(300 if quick else 3000)
    _say(f"sampling cycle: {rows[0]['value']:.0f} µs wall, {rows[2]['value']:.0f} µs CPU")
    try:
        asyncio.run(_topics(bootstrap, prefix))
        broker = True
    except Exception as exc:  # still measure what needs no broker
        _say(f"Kafka at {bootstrap} unreachable ({type(exc).__name__}: {exc}); publish cases skipped")
        broker = False
    rows += agent_process(bootstrap, prefix, 10.0 if quick else 60.0)
    _say(f"agent process at 1 Hz: {rows[-2]['value']:.2f} % of one core")
    if broker:
        gc.freeze()
        try:
            rows += asyncio.run(spool_drain(bootstrap, prefix, 20_000 if quick else 100_000))
            _say(f"spool drain: {rows[-2]['value']:,.0f} NodeState/s")
            rows += asyncio.run(replay_synthetic(bootstrap, prefix, 100_000 if quick else 500_000))
            _say(f"replay: {rows[-2]['value']:,.0f} NodeState/s")
        finally:
            gc.unfreeze()
            try:
                asyncio.run(delete_topics(bootstrap, prefix))
            except Exception as exc:
                _say(f"could not delete bench topics {prefix}*: {exc}")
    return rows
