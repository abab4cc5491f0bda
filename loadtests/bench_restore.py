"""`borgctl bench restore`: how long a stateful stage takes to restore N nodes of state, and what it weighs.

For the sizing guide (docs/deploy.md, "Sizing"). Everything runs on the local broker in a fresh
topic namespace (``bench<hex>-``, every registry topic created, all deleted at the end):

1. **idle**: each stage (features, regime, anomaly, risk) is started alone on the empty topics
   and stopped once ``/readyz`` is up: its RSS (psutil) and time to ready with no state — the
   baseline the state's memory is measured against.
2. **state**: ``nodestate.v1`` is prefilled with N nodes × ``SECONDS`` seconds of NodeState
   (``bench_stages.prefill``: real simulator records, consecutive ``ts_ms``), so each node
   closes ``SECONDS // 10`` windows. features drains it in its own group and is stopped (SIGTERM:
   the graceful hand-over); then regime, anomaly and risk drain the FeatureVectors it wrote
   (together, nothing is timed here) and are stopped. Every changelog now holds the state each
   stage wrote itself, for N nodes.
3. **changelog size**: every record of each stage's changelog topics
   (``<prefix>borg-<stage>-*-changelog``) is read back: records and key + value bytes.
4. **restore**: each stage is started again, alone, in the same consumer group, so it is
   assigned all six partitions and restores them before it consumes. ``restore_s`` is the sum
   of its ``restored N keys from M changelog records of … in S s`` log lines (the tables are
   restored one after the other); ``ready_s`` is spawn → ``/readyz`` (imports, model load,
   group join and restore); ``rss_mib`` is the process's RSS a second after it is ready. ``ready_idle_s``
   (step 1) is not a baseline for ``ready_s``: that start also created the changelog topics and a new group.

Rows (bench ``restore``): per stage ``nodes``, ``restore_s``, ``ready_s``, ``ready_idle_s``,
``rss_mib``, ``rss_idle_mib``, ``state_mib_per_1k_nodes`` (RSS after the restore above idle, per 1,000
nodes), ``rss_drained_mib`` and ``live_mib_per_1k_nodes`` (the same for the process that built the state, when
it had committed all of its input),
``restored_keys``, ``changelog_records``, ``changelog_mib``; case ``machine``: ``load_avg_1m``
before and after. anomaly is stateless (no changelog): its rows show the process alone. Risk runs
only when ``models/failure`` loads.

N is 10,000 (2,000 with ``--quick``), ``SECONDS`` 21 (two closed windows per node; features keeps
up to 300 s of panes per node, so its state here is that of a node ~20 s after it appeared, not
the steady state — see docs/deploy.md). ``BENCH_RESTORE_NODES``, ``BENCH_RESTORE_SECONDS`` and
``BENCH_RESTORE_STAGES`` (comma-separated) override them.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadtests.bench_pipeline import _models, _Service, _spawn, _stop
from loadtests.bench_stages import STAGE_INPUT, _input_records, _ready, _tail, _watch, prefill
from loadtests.procs import delete_topics

BENCH = "restore"
STAGES: tuple[str, ...] = ("features", "regime", "anomaly", "risk")
NODES = 10_000
QUICK_NODES = 2_000
SECONDS = 21
"""Seconds of NodeState per node: with the 10 s hop, two windows close per node."""
READY_LIMIT_S = 300.0
DRAIN_LIMIT_S = 600.0
SETTLE_S = 1.0
"""Wait after ``/readyz`` before reading RSS: the first fetch's buffers are part of a running stage."""
MIB = 1024 * 1024
RESTORED = re.compile(r"restored (\d+) keys from (\d+) changelog records of (\S+) \[[^\]]*\] in ([0-9.]+)s")
ENV = {"LOG_LEVEL": "INFO"}
"""The restore line is logged at INFO; ``_spawn`` defaults to WARNING."""


def _log(message: str) -> None:
    print(f"bench restore: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Start:
    """One start of a stage until ready: what it took and weighed."""

    ready_s: float
    rss_mib: float
    restore_s: float
    restored_keys: int
    restored_records: int


@dataclass(frozen=True)
class Changelog:
    records: int
    bytes: int


def restored_lines(text: str) -> list[tuple[int, int, str, float]]:
    """``(keys, records, topic, seconds)`` of every changelog restore a service logged."""
    return [(int(m[1]), int(m[2]), m[3], float(m[4])) for m in RESTORED.finditer(text)]


async def start_until_ready(name: str, bootstrap: str, prefix: str, work: Path, env: dict[str, str]) -> Start:
    """Spawn ``name`` alone, wait for ``/readyz``, read its RSS ``SETTLE_S`` later, stop it."""
    import aiohttp

    started = time.monotonic()
    service = _spawn(name, bootstrap, prefix, work, {**env, **ENV})
    try:
        async with aiohttp.ClientSession() as http:
            while not await _ready(http, service.port):
                if service.proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({service.proc.returncode}); see {service.log}:\n"
                                       + _tail(service.log))
                if time.monotonic() - started > READY_LIMIT_S:
                    raise RuntimeError(f"{name} not ready within {READY_LIMIT_S:.0f}s:\n" + _tail(service.log))
                await asyncio.sleep(0.025)
        ready_s = time.monotonic() - started
        await asyncio.sleep(SETTLE_S)
        rss = _rss(service)
    finally:
        _stop(service)
    lines = restored_lines(service.log.read_text(errors="replace"))
    return Start(ready_s, rss / MIB, sum(s for *_, s in lines), sum(k for k, *_ in lines),
                 sum(r for _, r, *_ in lines))


def _rss(service: _Service) -> int:
    """RSS of the service and any children it started (the stages run as one process today)."""
    import psutil

    total = service.ps.memory_info().rss
    for child in service.ps.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return int(total)


async def drain(names: list[str], bootstrap: str, prefix: str, work: Path, env: dict[str, str]) -> dict[str, float]:
    """Run ``names`` together until each committed its whole input, then stop them (state written).

    Returns each one's RSS (MiB) when it had committed everything: the state as the running stage holds it
    (decoded; after a restore features holds the changelog bytes until a node's next sample)."""
    from services.runtime.stream_settings import app_id

    services: list[_Service] = []
    rss: dict[str, float] = {}

    async def watch(service: _Service, topic: str, expected: int) -> None:
        await _watch(service, bootstrap, app_id(service.name, prefix), topic, expected, DRAIN_LIMIT_S)
        rss[service.name] = _rss(service) / MIB

    try:
        jobs = []
        for name in names:
            topic = prefix + STAGE_INPUT[name]
            expected = await _input_records(bootstrap, topic)
            service = _spawn(name, bootstrap, prefix, work, env)
            services.append(service)
            jobs.append(watch(service, topic, expected))
        await asyncio.gather(*jobs)
    finally:
        for service in services:
            _stop(service)
    return rss


async def changelog_size(bootstrap: str, stem: str) -> Changelog:
    """Records and key + value bytes of every ``<stem>-*-changelog`` topic, read to its end."""
    from aiokafka import TopicPartition

    from services.runtime.admin import connect_admin
    from services.runtime.changelog import read_to_end
    from services.runtime.stream_settings import PARTITIONS

    admin = await connect_admin(bootstrap)
    try:
        topics = sorted(t for t in await admin.list_topics() if t.startswith(stem + "-") and t.endswith("-changelog"))
    finally:
        await admin.close()
    if not topics:
        return Changelog(0, 0)
    records = size = 0
    # a changelog has one partition per input partition (ensure_changelog refuses anything else)
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    async for _tp, msgs in read_to_end(bootstrap, tps):
        records += len(msgs)
        size += sum(max(0, m.serialized_key_size) + max(0, m.serialized_value_size) for m in msgs)
    return Changelog(records, size)


def rows_of(nodes: int, idle: dict[str, Start], drained: dict[str, float], restored: dict[str, Start],
            logs: dict[str, Changelog], load: tuple[float, float]) -> list[dict[str, Any]]:
    def row(case: str, metric: str, value: float, unit: str) -> dict[str, Any]:
        return {"bench": BENCH, "case": case, "offered": nodes, "metric": metric, "value": value, "unit": unit}

    rows = [row("machine", "load_avg_1m_before", round(load[0], 2), "load"),
            row("machine", "load_avg_1m_after", round(load[1], 2), "load")]
    for stage, r in restored.items():
        i, c = idle[stage], logs[stage]
        rows += [
            row(stage, "nodes", float(nodes), "nodes"),
            row(stage, "restore_s", round(r.restore_s, 3), "s"),
            row(stage, "ready_s", round(r.ready_s, 3), "s"),
            row(stage, "ready_idle_s", round(i.ready_s, 3), "s"),
            row(stage, "rss_mib", round(r.rss_mib, 1), "MiB"),
            row(stage, "rss_idle_mib", round(i.rss_mib, 1), "MiB"),
            row(stage, "state_mib_per_1k_nodes", round((r.rss_mib - i.rss_mib) * 1000 / nodes, 2), "MiB"),
            row(stage, "rss_drained_mib", round(drained[stage], 1), "MiB"),
            row(stage, "live_mib_per_1k_nodes", round((drained[stage] - i.rss_mib) * 1000 / nodes, 2), "MiB"),
            row(stage, "restored_keys", float(r.restored_keys), "keys"),
            row(stage, "changelog_records", float(c.records), "records"),
            row(stage, "changelog_mib", round(c.bytes / MIB, 2), "MiB"),
        ]
    return rows


async def run_restore(bootstrap: str, *, nodes: int, seconds: int = SECONDS,
                      stages: tuple[str, ...] = STAGES) -> list[dict[str, Any]]:
    """Idle starts, build the state by draining, measure the changelogs, restore starts (module docstring)."""
    from contracts.topics import TOPICS
    from services.runtime.admin import create_topics
    from services.runtime.stream_settings import app_id

    unknown = set(stages) - set(STAGES)
    if unknown or "features" not in stages:
        raise ValueError(f"stages must include features and be among {STAGES}, got {stages}")
    load_before = os.getloadavg()[0]
    _log(f"{nodes:,} nodes × {seconds} s; load average {load_before:.2f} ({os.cpu_count()} CPUs)")
    prefix = f"bench{uuid.uuid4().hex[:8]}-"
    await create_topics(bootstrap, prefix=prefix, specs=TOPICS)
    work = Path(tempfile.mkdtemp(prefix="borg-bench-restore-"))
    for phase in ("idle", "drain", "restore"):
        (work / phase).mkdir()
    try:
        env = _models(work)
        if "risk" in stages and "RISK_MODEL_DIR" not in env:
            stages = tuple(s for s in stages if s != "risk")
        idle: dict[str, Start] = {}
        for name in stages:
            idle[name] = await start_until_ready(name, bootstrap, prefix, work / "idle", env)
            _log(f"{name} idle: ready in {idle[name].ready_s:.2f}s, RSS {idle[name].rss_mib:.0f} MiB")
        await prefill(bootstrap, prefix, nodes, seconds)
        t0 = time.monotonic()
        drained = await drain(["features"], bootstrap, prefix, work / "drain", env)
        vectors = await _input_records(bootstrap, prefix + STAGE_INPUT["regime"])
        _log(f"features drained in {time.monotonic() - t0:.0f}s, wrote {vectors:,} FeatureVectors")
        rest = [s for s in stages if s != "features"]
        if rest:
            t0 = time.monotonic()
            drained.update(await drain(rest, bootstrap, prefix, work / "drain", env))
            _log(f"{', '.join(rest)} drained in {time.monotonic() - t0:.0f}s")
        logs: dict[str, Changelog] = {}
        restored: dict[str, Start] = {}
        for name in stages:
            logs[name] = await changelog_size(bootstrap, app_id(name, prefix))
            restored[name] = r = await start_until_ready(name, bootstrap, prefix, work / "restore", env)
            _log(f"{name}: changelog {logs[name].records:,} records, {logs[name].bytes / MIB:.1f} MiB; restored "
                 f"{r.restored_keys:,} keys from {r.restored_records:,} records in {r.restore_s:.2f}s, ready in "
                 f"{r.ready_s:.2f}s, RSS {r.rss_mib:.0f} MiB (idle {idle[name].rss_mib:.0f})")
    finally:
        await delete_topics(bootstrap, prefix)
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    _log(f"load average {load_after:.2f} at the end")
    return rows_of(nodes, idle, drained, restored, logs, (load_before, load_after))


def run_restore_bench(quick: bool, bootstrap: str) -> list[dict[str, Any]]:
    """Entry point used by ``borgctl bench restore`` (see loadtests/bench.py)."""
    nodes = int(os.environ.get("BENCH_RESTORE_NODES", QUICK_NODES if quick else NODES))
    seconds = int(os.environ.get("BENCH_RESTORE_SECONDS", SECONDS))
    raw = os.environ.get("BENCH_RESTORE_STAGES")
    stages = tuple(s.strip() for s in raw.split(",") if s.strip()) if raw else STAGES
    return asyncio.run(run_restore(bootstrap, nodes=nodes, seconds=seconds, stages=stages))


if __name__ == "__main__":
    for result in run_restore_bench("--quick" in sys.argv, os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")):
        print(orjson.dumps(result).decode())
