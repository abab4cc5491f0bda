"""`borgctl bench pipeline`: NodeState/s through features → regime / anomaly / risk, and latency.

Set-up: a fresh topic namespace on the running broker; the features, regime, anomaly and
(when ``models/failure`` exists) risk services as separate processes with the shipped
models; a load generator process playing N simulated nodes at 1 Hz (each node's sample
at its own phase within the second, NodeState ``ts_ms`` = wall time) plus task events.

Per step (offered load = N NodeState/s) the bench consumes ``features.v1`` and
``regimes.v2`` and reports, over the step after a warm-up:

* ``throughput``: NodeState/s that reached a closed window (sum of ``FeatureVector.samples``
  per second) — every sample lands in exactly one window;
* ``latency_p50`` / ``latency_p99``: regime output received by the bench minus the produce
  time of the NodeState that closed the window (``RegimeLabelV2.input_ts_ms``, the Kafka
  record timestamp) — one measurement per window (a window closes every 10 s per node);
* ``features_latency_p50`` / ``_p99``: the same for the features hop alone;
* ``anomaly_latency_p50`` / ``_p99`` and ``risk_latency_…``: the same for anomaly scores and
  failure risk (``input_ts_ms`` of the vector or task event scored), off the regime path and
  served at a higher niceness (``STREAM_NICE``), so they wait when the CPU is short;
* ``seconds_p99_over_target``: how many seconds of the step had a regime p99 over 250 ms
  (a tail made of a few bursts, or slow throughout);
* ``regimes_per_s``, ``sustained`` (1 when throughput ≥ 95 % of offered and p99 stayed
  under 5 s, i.e. the load was carried), ``p99_within_target`` (p99 ≤ 250 ms) and
  ``cpu_percent`` per service, of the broker, the load generator and the bench itself (% of
  one core each), and of the whole machine (% of all cores: 100 = saturated).

``BENCH_PIPELINE_STEPS=500,1000,...`` and ``BENCH_PIPELINE_STEP_S`` (≥ ``MIN_STEP_S``) override the steps;
features runs as ``FEATURES_WORKERS`` (2) processes in one consumer group, as the
Kubernetes deployment runs it (partitions, and with them the window table, are split
between them); ``BENCH_FEATURES_WORKERS=N`` (1–6) runs N instead. ``BENCH_FEATURES_LINGER_S=X`` sets
``STREAM_BATCH_LINGER_S`` for the features processes alone (an A/B of features' fetch linger, whose
default is 0: docs/performance.md, "2026-11-27 evening").

Steps ascend and stop after the first step that is not sustained; the ``ceiling`` rows are
the highest load carried, and the highest carried with p99 ≤ 250 ms. The ``target`` rows
say whether 5,000 nodes at 1 Hz with p99 ≤ 250 ms (the stream issue's target) and, when
offered, 10,000 nodes (the load-test issue's) were met. Steps: 2,000 and 5,000 with
``--quick`` (30 s each); 1,000 to 12,500 otherwise (45 s each).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil

from borgctl.errors import UserError
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC, Topic
from loadtests.procs import delete_topics, free_port
from services.runtime.kafka_security import kafka_client_options

ROOT = Path(__file__).resolve().parent.parent
TARGET_NODES = 5000
"""Issue target: 5,000 nodes at 1 Hz with p99 <= 250 ms (the largest supported Kubernetes cluster)."""
STRETCH_NODES = 10_000
"""Load-test target: 10,000 nodes at 1 Hz with p99 <= 250 ms (twice that)."""
TARGET_P99_MS = 250.0
WARMUP_S = 12.0
FEATURES_WORKERS = 2
"""features processes in one consumer group, as ``deploy/base/features`` runs it (2 replicas)."""
PROGRESS_EVERY_S = 15.0
"""How often a step in progress reports to stderr."""
SIDE_OUTPUTS = {Topic.ANOMALIES: "anomaly", RISK_TOPIC: "risk"}
"""Outputs off the regime path whose latency is reported beside it (their services run at a higher niceness)."""


@dataclass
class _Service:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    ps: psutil.Process


def _spawn(name: str, bootstrap: str, prefix: str, work: Path, env: dict[str, str]) -> _Service:
    """``name`` is ``<service>`` or ``<service>#<n>`` (several workers of one service)."""
    module = name.split("#")[0]
    port = free_port()
    label = name.replace("#", "-")
    log = work / f"{label}.log"
    full = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "BORG_TOPIC_PREFIX": prefix, "HEALTH_PORT": str(port),
            "LOG_FORMAT": "text", "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT), **env}
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", f"services.{module}"], cwd=ROOT, env=full, stdout=out,
                                stderr=subprocess.STDOUT)
    return _Service(name, proc, port, log, psutil.Process(proc.pid))


def _stop(service: _Service) -> None:
    if service.proc.poll() is None:
        service.proc.terminate()
        try:
            service.proc.wait(20)
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait(5)


async def _wait_ready(services: list[_Service], limit_s: float = 120.0) -> None:
    import aiohttp

    deadline = time.monotonic() + limit_s
    pending = list(services)
    async with aiohttp.ClientSession() as http:
        while pending:
            for s in list(pending):
                if s.proc.poll() is not None:
                    raise RuntimeError(f"{s.name} exited ({s.proc.returncode}); see {s.log}")
                try:
                    async with http.get(f"http://127.0.0.1:{s.port}/readyz", timeout=aiohttp.ClientTimeout(1)) as r:
                        if r.status == 200:
                            pending.remove(s)
                except (aiohttp.ClientError, TimeoutError):
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("services not ready: " + ", ".join(s.name for s in pending))
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------------------ load generator


def _generate(bootstrap: str, prefix: str, nodes: int, seconds: float, seed: int, name_prefix: str,
              done: Any) -> None:
    """Child process: ``nodes`` simulated nodes at 1 Hz for ``seconds``, sends spread over each second."""
    from services.runtime.tuning import tune_malloc

    tune_malloc()
    asyncio.run(_generate_async(bootstrap, prefix, nodes, seconds, seed, name_prefix, done))


async def _generate_async(bootstrap: str, prefix: str, nodes: int, seconds: float, seed: int, name_prefix: str,
                          done: Any) -> None:
    """The cheap generator of ``loadtests.loadgen``: a precomputed pool of simulator ticks replayed
    through aiokafka's batch API (a few µs of CPU per NodeState instead of ~45), plus task events."""
    from loadtests.loadgen import Progress, generate_nodestate

    def progress(p: Progress) -> None:
        done.value = p.sent

    done.value = await generate_nodestate(bootstrap, prefix, nodes, seconds, seed, name_prefix,
                                          on_progress=progress)


# ------------------------------------------------------------------------------ measurement


@dataclass
class _Step:
    nodes: int
    samples: int = 0
    windows: int = 0
    latencies: list[float] | None = None


async def _measure(bootstrap: str, prefix: str, nodes: int, seconds: float, services: list[_Service],
                   seed: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(*(prefix + t for t in (Topic.FEATURES, REGIMES_TOPIC, *SIDE_OUTPUTS)),
                                bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=None, auto_offset_reset="latest", enable_auto_commit=False,
                                max_poll_records=5000)
    await consumer.start()
    await consumer.getmany(timeout_ms=500)  # position at the end before the load starts
    ctx = mp.get_context("spawn")
    done = ctx.Value("q", 0)
    gen = ctx.Process(target=_generate, args=(bootstrap, prefix, nodes, seconds, seed, f"b{nodes}-", done),
                      daemon=True)
    t_start = time.time()
    gen.start()
    # everything else that shares the two cores: the broker, the load generator, this process
    others = {"broker": _broker_process(), "loadgen": _process(gen.pid), "bench": psutil.Process()}
    watched = {**{s.name: s.ps for s in services}, **{k: v for k, v in others.items() if v is not None}}
    cpu0 = {name: _cpu(ps) for name, ps in watched.items()}
    machine0 = psutil.cpu_times()
    samples = 0
    windows = 0
    latencies: list[float] = []
    latency_seconds: list[int] = []  # the second each of ``latencies`` was received in
    feature_latencies: list[float] = []
    side_latencies: dict[str, list[float]] = {name: [] for name in SIDE_OUTPUTS.values()}
    measure_from = t_start + WARMUP_S
    measure_to = t_start + seconds
    cpu_mark: dict[str, float | None] = {}
    cpu_end: dict[str, float | None] = {}
    machine1 = machine0
    try:
        next_report = t_start + PROGRESS_EVERY_S
        while time.time() < measure_to + 2.0:
            batch = await consumer.getmany(timeout_ms=200)
            received = time.time()
            if received >= next_report and received < measure_to:
                next_report += PROGRESS_EVERY_S
                print(f"bench pipeline: {nodes} nodes: {received - t_start:.0f}/{seconds:.0f} s, "
                      f"{int(done.value):,} NodeState sent, {_so_far(latencies)}", file=sys.stderr, flush=True)
            if received >= measure_from and not cpu_mark:
                cpu_mark = {name: _cpu(ps) for name, ps in watched.items()}
                machine0 = psutil.cpu_times()
            for tp, records in batch.items():
                in_window = measure_from <= received <= measure_to
                if not in_window:
                    continue
                topic = tp.topic[len(prefix):]
                side = side_latencies.get(SIDE_OUTPUTS.get(topic, ""))
                if side is not None:
                    side += [received * 1000 - orjson.loads(r.value)["input_ts_ms"] for r in records]
                elif topic == Topic.FEATURES:
                    for r in records:
                        doc = orjson.loads(r.value)
                        samples += doc["samples"]
                        feature_latencies.append(received * 1000 - doc["input_ts_ms"])
                else:
                    for r in records:
                        windows += 1
                        latencies.append(received * 1000 - orjson.loads(r.value)["input_ts_ms"])
                        latency_seconds.append(int(received))
            if received > measure_to and not cpu_end:
                cpu_end = {name: _cpu(ps) for name, ps in watched.items()}
                machine1 = psutil.cpu_times()
    except BaseException:
        gen.kill()  # interrupted (Ctrl-C, SIGTERM): no more load
        raise
    finally:
        gen.join(timeout=30)
        if gen.is_alive():
            gen.kill()
        await consumer.stop()
    span = measure_to - measure_from
    cpu = {}
    for name, end in cpu_end.items():
        begin = cpu_mark.get(name, cpu0[name])
        if end is not None and begin is not None:
            cpu[name] = 100.0 * (end - begin) / span
    busy = (sum(machine1) - machine1.idle - machine1.iowait) - (sum(machine0) - machine0.idle - machine0.iowait)
    total = sum(machine1) - sum(machine0)
    cpu["machine"] = 100.0 * busy / total if total > 0 else float("nan")
    lat = np.asarray(latencies) if latencies else np.asarray([np.nan])
    flat = np.asarray(feature_latencies) if feature_latencies else np.asarray([np.nan])
    throughput = samples / span
    return {
        "nodes": nodes,
        "throughput": throughput,
        "regimes_per_s": windows / span,
        "p50": float(np.nanpercentile(lat, 50)),
        "p99": float(np.nanpercentile(lat, 99)),
        "features_p50": float(np.nanpercentile(flat, 50)),
        "features_p99": float(np.nanpercentile(flat, 99)),
        **{f"{name}_{q}": float(np.percentile(values, int(q[1:]))) if values else math.nan
           for name, values in side_latencies.items() for q in ("p50", "p99")},
        "seconds_over": seconds_over(latency_seconds, latencies, TARGET_P99_MS),
        "seconds": len(set(latency_seconds)),
        "sent": int(done.value),
        "cpu": cpu,
        "sustained": throughput >= 0.95 * nodes and bool(np.nanpercentile(lat, 99) < 5000),
        "within_target": bool(np.nanpercentile(lat, 99) <= TARGET_P99_MS),
    }


def _so_far(latencies: list[float]) -> str:
    if not latencies:
        return f"warming up (measured from {WARMUP_S:.0f} s)"
    return f"regime latency so far p50 {np.percentile(latencies, 50):.0f} ms, p99 {np.percentile(latencies, 99):.0f} ms"


def seconds_over(seconds: list[int], latencies: list[float], target_ms: float) -> int:
    """How many of the seconds (one per latency: when it was received) have a p99 over ``target_ms``.

    Tells a step whose tail is a few bursts (the whole p99 taken by a handful of seconds)
    from one that is slow throughout.
    """
    by_second: dict[int, list[float]] = {}
    for second, latency in zip(seconds, latencies, strict=True):
        by_second.setdefault(second, []).append(latency)
    return sum(1 for values in by_second.values() if float(np.percentile(values, 99)) > target_ms)


def _cpu(ps: psutil.Process) -> float | None:
    """user + system CPU seconds of a process (None once it is gone)."""
    try:
        t = ps.cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system)


def _process(pid: int | None) -> psutil.Process | None:
    try:
        return psutil.Process(pid) if pid else None
    except psutil.Error:
        return None


def _broker_process() -> psutil.Process | None:
    """The local Kafka broker (infra/kafka/kafka.sh runs ``kafka.Kafka``), when it runs on this machine."""
    for proc in psutil.process_iter(["cmdline"]):
        if "kafka.Kafka" in (proc.info.get("cmdline") or []):
            return proc
    return None


def _models(work: Path) -> dict[str, str]:
    """Run risk only with a failure model that loads now (a copy: training may repoint CURRENT meanwhile)."""
    from services.risk.model import load_failure_model
    from services.runtime.model_watch import ModelRefusedError, resolve

    env: dict[str, str] = {}
    try:
        version = resolve(ROOT / "models" / "failure")
        load_failure_model(version)
        shutil.copytree(version, work / "failure" / version.name)
    except (ModelRefusedError, OSError) as exc:
        print(f"bench pipeline: risk not run ({exc})", file=sys.stderr)
        return env
    (work / "failure" / "CURRENT").write_text(version.name + "\n")
    env["RISK_MODEL_DIR"] = str(work / "failure")
    return env


MIN_STEP_S = WARMUP_S + 5.0
"""A step's first ``WARMUP_S`` are not measured: a shorter step would report nothing."""


def step_plan(environ: Mapping[str, str], quick: bool) -> tuple[list[int], float]:
    """The steps (nodes at 1 Hz) and seconds per step: the defaults, or ``BENCH_PIPELINE_STEPS`` /
    ``BENCH_PIPELINE_STEP_S`` (a bad value is a ``UserError`` naming the variable)."""
    steps = [2000, TARGET_NODES] if quick else [1000, 2500, TARGET_NODES, 7500, STRETCH_NODES, 12_500]
    seconds = 30.0 if quick else 45.0
    raw = environ.get("BENCH_PIPELINE_STEPS")
    if raw:
        try:
            steps = [int(x) for x in raw.split(",")]
        except ValueError:
            steps = []
        if not steps or min(steps) <= 0:
            raise UserError(f"BENCH_PIPELINE_STEPS={raw!r}: expected positive node counts separated by commas, "
                            "e.g. 1000,5000,10000")
    raw = environ.get("BENCH_PIPELINE_STEP_S")
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = math.nan
        if not seconds >= MIN_STEP_S:
            raise UserError(f"BENCH_PIPELINE_STEP_S={raw!r}: a step needs at least {MIN_STEP_S:.0f} seconds "
                            f"(its first {WARMUP_S:.0f} s are not measured)")
    return steps, seconds


def features_workers(environ: Mapping[str, str]) -> int:
    """features processes to run: ``BENCH_FEATURES_WORKERS`` (1–6), else ``FEATURES_WORKERS``."""
    from services.runtime.stream_settings import PARTITIONS  # more workers than partitions would idle

    raw = environ.get("BENCH_FEATURES_WORKERS")
    if not raw:
        return FEATURES_WORKERS
    try:
        workers = int(raw)
    except ValueError:
        workers = 0
    if not 1 <= workers <= PARTITIONS:
        raise UserError(f"BENCH_FEATURES_WORKERS={raw!r}: expected a number of features processes from 1 to "
                        f"{PARTITIONS} (nodestate.v1 has {PARTITIONS} partitions)")
    return workers


def features_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Environment only the features processes get: ``BENCH_FEATURES_LINGER_S`` as their ``STREAM_BATCH_LINGER_S``."""
    raw = environ.get("BENCH_FEATURES_LINGER_S")
    if not raw:
        return {}
    try:
        linger = float(raw)
    except ValueError:
        linger = math.nan
    if not 0.0 <= linger <= 5.0:
        raise UserError(f"BENCH_FEATURES_LINGER_S={raw!r}: expected seconds from 0 to 5 (features' fetch linger)")
    return {"STREAM_BATCH_LINGER_S": raw}


async def _run(quick: bool, bootstrap: str) -> list[dict[str, Any]]:
    from services.runtime.admin import create_topics

    steps, seconds = step_plan(os.environ, quick)
    prefix = f"bench{uuid.uuid4().hex[:8]}-"
    await create_topics(bootstrap, prefix=prefix)
    work = Path(tempfile.mkdtemp(prefix="borg-bench-pipeline-"))
    env = _models(work)
    workers = features_workers(os.environ)
    features = ["features"] if workers == 1 else [f"features#{i}" for i in range(workers)]
    names = [*features, "regime", "anomaly"] + (["risk"] if "RISK_MODEL_DIR" in env else [])
    own = features_env(os.environ)
    services = [_spawn(n, bootstrap, prefix, work, {**env, **own} if n.startswith("features") else env)
                for n in names]
    rows: list[dict[str, Any]] = []
    try:
        await _wait_ready(services)
        ceiling = 0
        ceiling_latency = 0
        results = []
        for i, nodes in enumerate(steps):
            print(f"bench pipeline: {nodes} nodes at 1 Hz for {seconds:.0f}s", file=sys.stderr, flush=True)
            r = await _measure(bootstrap, prefix, nodes, seconds, services, seed=100 + i)
            results.append(r)
            print(f"bench pipeline: {nodes} offered → {r['throughput']:.0f} NodeState/s, regime latency "
                  f"p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms ({r['seconds_over']} of {r['seconds']} s over "
                  f"{TARGET_P99_MS:.0f} ms; features hop p50 {r['features_p50']:.0f}, "
                  f"p99 {r['features_p99']:.0f}; anomaly p99 {r['anomaly_p99']:.0f}, risk p99 {r['risk_p99']:.0f}); "
                  "cpu % " + ", ".join(f"{k} {v:.0f}" for k, v in r["cpu"].items()),
                  file=sys.stderr, flush=True)
            case = f"{nodes} nodes @1Hz"
            rows += [
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "throughput",
                 "value": round(r["throughput"], 1), "unit": "NodeState/s"},
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "latency_p50",
                 "value": round(r["p50"], 1), "unit": "ms"},
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "latency_p99",
                 "value": round(r["p99"], 1), "unit": "ms"},
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "seconds_p99_over_target",
                 "value": float(r["seconds_over"]), "unit": "s"},
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "features_latency_p50",
                 "value": round(r["features_p50"], 1), "unit": "ms"},
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "features_latency_p99",
                 "value": round(r["features_p99"], 1), "unit": "ms"},
                *({"bench": "pipeline", "case": case, "offered": nodes, "metric": f"{name}_latency_{q}",
                   "value": round(r[f"{name}_{q}"], 1), "unit": "ms"}
                  for name in SIDE_OUTPUTS.values() for q in ("p50", "p99") if not math.isnan(r[f"{name}_{q}"])),
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "regimes_per_s",
                 "value": round(r["regimes_per_s"], 1), "unit": "RegimeLabelV2/s"},
                {"bench": "pipeline", "case": case, "offered": nodes, "metric": "sustained",
                 "value": 1.0 if r["sustained"] else 0.0, "unit": "bool"},
            ]
            rows += [{"bench": "pipeline", "case": f"{case} {svc}", "offered": nodes, "metric": "cpu_percent",
                      "value": round(pct, 1), "unit": "% of the machine" if svc == "machine" else "% of one core"}
                     for svc, pct in r["cpu"].items()]
            rows.append({"bench": "pipeline", "case": case, "offered": nodes, "metric": "p99_within_target",
                         "value": 1.0 if r["within_target"] else 0.0, "unit": "bool"})
            if r["sustained"] and r["within_target"]:
                ceiling_latency = nodes
            if r["sustained"]:
                ceiling = nodes
            else:
                break
            await _drain(bootstrap, prefix)
        rows.append({"bench": "pipeline", "case": "ceiling (highest step carried)", "metric": "throughput",
                     "value": float(ceiling), "unit": "NodeState/s"})
        rows.append({"bench": "pipeline", "case": f"ceiling (carried with p99<={TARGET_P99_MS:.0f}ms)",
                     "metric": "throughput", "value": float(ceiling_latency), "unit": "NodeState/s"})
        for target in (TARGET_NODES, STRETCH_NODES):
            at_target = next((r for r in results if r["nodes"] == target), None)
            if target not in steps:
                continue  # not offered in this run (--quick or BENCH_PIPELINE_STEPS); a step the
                # bench never reached because a lower one was not carried still counts as missed
            met = at_target is not None and at_target["sustained"] and at_target["p99"] <= TARGET_P99_MS
            rows.append({"bench": "pipeline", "case": f"target {target} nodes @1Hz p99<={TARGET_P99_MS:.0f}ms",
                         "offered": target, "metric": "met", "value": 1.0 if met else 0.0, "unit": "bool"})
    finally:
        for s in services:
            _stop(s)
        await delete_topics(bootstrap, prefix)
        shutil.rmtree(work, ignore_errors=True)
    return rows


async def _drain(bootstrap: str, prefix: str, limit_s: float = 60.0) -> None:
    """Wait (bounded) until the features consumer group has no lag left from the previous step."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    group = f"{prefix}borg-features"
    topic = prefix + Topic.NODESTATE
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_client_options(),
                                group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(6)]
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            ends = await consumer.end_offsets(tps)
            committed = [await consumer.committed(tp) or 0 for tp in tps]
            if sum(ends[tp] - c for tp, c in zip(tps, committed, strict=True)) <= 50:
                return
            await asyncio.sleep(1.0)
    finally:
        await consumer.stop()


def run_pipeline_bench(quick: bool, bootstrap: str) -> list[dict[str, Any]]:
    """Entry point used by ``borgctl bench pipeline`` (see loadtests/bench.py)."""
    return asyncio.run(_run(quick, bootstrap))


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for row in run_pipeline_bench(quick, os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")):
        print(orjson.dumps(row).decode())
