"""Real Kafka, real processes: simulator NodeState for 50 nodes → features → regime / anomaly / risk.

Each stream processor runs as its own process (``python -m services.<name>``) with the
test's topic prefix; the test waits on outputs (never on sleeps) and checks them against
the simulator's ground truth (kept out of the stream), the offline feature computation,
trace continuity, dead letters and a model hot reload.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from contracts import AnomalyScore, FailureRiskV2, FeatureVector, RegimeLabelV2, TaskEvent, decode, encode
from contracts.headers import build_headers, trace_id_of
from contracts.models import REGIMES, UNKNOWN_REGIME
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from featurelib.node.samples import sample_from_dict
from featurelib.node.windows import DictStore, NodeWindows
from loadtests.procs import free_port
from services.risk.model import load_failure_model
from services.runtime.model_watch import ModelRefusedError, resolve
from simulator import SyntheticCluster
from tests.unit.test_risk_service import train_provisional_failure_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]


@dataclass
class ServiceProc:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""


def spawn(name: str, bootstrap: str, prefix: str, tmp: Path, **env: str) -> ServiceProc:
    port = free_port()
    log = tmp / f"{name}.log"
    full = {
        **os.environ,
        "KAFKA_BOOTSTRAP": bootstrap,
        "BORG_TOPIC_PREFIX": prefix,
        "HEALTH_PORT": str(port),
        "LOG_FORMAT": "text",
        "LOG_LEVEL": "WARNING",
        "MODEL_POLL_S": "0.5",
        "STREAM_BATCH_MAX": "300",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", f"services.{name}"], cwd=ROOT, env=full, stdout=out,
                                stderr=subprocess.STDOUT)
    return ServiceProc(name, proc, port, log)


def stop(service: ServiceProc) -> None:
    if service.proc.poll() is None:
        service.proc.terminate()
        try:
            service.proc.wait(15)
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait(5)


@contextmanager
def running(*services: ServiceProc) -> Iterator[tuple[ServiceProc, ...]]:
    try:
        yield services
    finally:
        for s in services:
            stop(s)


async def wait_ready(services: tuple[ServiceProc, ...], timeout: float = 90.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    pending = {s.name: s for s in services}
    async with aiohttp.ClientSession() as http:
        while pending:
            for name, s in list(pending.items()):
                if s.proc.poll() is not None:
                    raise AssertionError(f"{name} exited with {s.proc.returncode}:\n{s.tail()}")
                try:
                    async with http.get(f"http://127.0.0.1:{s.port}/readyz", timeout=aiohttp.ClientTimeout(1)) as r:
                        if r.status == 200:
                            del pending[name]
                except (aiohttp.ClientError, TimeoutError):
                    pass
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("not ready: " + ", ".join(f"{n}:\n{s.tail()}" for n, s in pending.items()))
            await asyncio.sleep(0.2)


async def wait_metric(service: ServiceProc, line: str, timeout: float) -> None:
    """Poll a service's /metrics until it shows ``line`` (e.g. the model version in use)."""
    deadline = asyncio.get_running_loop().time() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"http://127.0.0.1:{service.port}/metrics") as r:
                if line in await r.text():
                    return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{service.name}: {line!r} not in /metrics after {timeout:.0f}s")
            await asyncio.sleep(0.2)


@dataclass
class Collected:
    records: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def values(self, base: str, model: type[Any]) -> list[Any]:
        return [decode(model, r.value) for r in self.records[base] if r.value is not None]


@asynccontextmanager
async def collector(bootstrap: str, prefix: str, bases: list[str]) -> AsyncIterator[tuple[Collected, Any]]:
    consumer = AIOKafkaConsumer(*[prefix + b for b in bases], bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got = Collected()

    async def poll_until(predicate: Any, timeout: float, what: str) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate(got):
            if asyncio.get_running_loop().time() > deadline:
                counts = {k: len(v) for k, v in got.records.items()}
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; got {counts}")
            batch = await consumer.getmany(timeout_ms=200)
            for tp, recs in batch.items():
                got.records[tp.topic[len(prefix):]].extend(recs)

    try:
        yield got, poll_until
    finally:
        await consumer.stop()


@dataclass
class Scenario:
    states: list[dict[str, Any]]
    truth: dict[tuple[str, int], list[str]]
    """(node, pane) → ground-truth regime of each tick in the pane."""
    expected_windows: set[tuple[str, int]]
    machine: NodeWindows
    tasks: list[TaskEvent]


def scenario(nodes: int, ticks: int, seed: int) -> Scenario:
    sim = SyntheticCluster(nodes=nodes, seed=seed)
    machine = NodeWindows(DictStore())
    offline = NodeWindows(DictStore())
    states: list[dict[str, Any]] = []
    truth: dict[tuple[str, int], list[str]] = defaultdict(list)
    expected: set[tuple[str, int]] = set()
    for batch in sim.run(ticks):
        regimes = batch.regimes()
        for i, state in enumerate(batch.nodestate_dicts()):
            states.append(state)
            truth[(state["node"], machine.pane_of(state["node"], state["ts_ms"]))].append(regimes[i])
            for w in offline.observe(sample_from_dict(state)).windows:
                expected.add((w.node, w.ts_ms))
    names = [s.name for s in sim.specs]
    rng = np.random.default_rng(seed)
    tasks: list[TaskEvent] = []
    t0 = sim.start_ms
    for k in range(40):
        base: dict[str, Any] = {"task_id": f"job{k % 8}-{k}", "job_id": f"job{k % 8}", "task_index": k,
                                "source": "synthetic", "user": f"u{k % 3}", "priority": int(rng.integers(0, 9)),
                                "cpu_request": 0.2, "memory_request": 0.1}
        node = names[int(rng.integers(len(names)))]
        tasks.append(TaskEvent(ts_ms=t0 + 1000 * k, event="SUBMIT", **base))
        tasks.append(TaskEvent(ts_ms=t0 + 1000 * k + 500, event="SCHEDULE", machine=node, **base))
        if k % 4 == 0:
            tasks.append(TaskEvent(ts_ms=t0 + 1000 * k + 90_000, event="FAIL", machine=node, **base))
    tasks.sort(key=lambda e: e.ts_ms)
    return Scenario(states, truth, expected, machine, tasks)


def trace_header(i: int) -> list[tuple[str, bytes]]:
    return [("content-type", b"application/json"), ("schema", b"nodestate.v1"),
            ("traceparent", f"00-{i + 1:032x}-{i + 1:016x}-01".encode())]


async def produce_states(bootstrap: str, prefix: str, states: list[dict[str, Any]], offset: int = 0) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, enable_idempotence=True)
    await producer.start()
    try:
        for i, state in enumerate(states):
            await producer.send(prefix + "nodestate.v1", key=state["node"].encode(), value=orjson.dumps(state),
                                headers=trace_header(offset + i))
        await producer.flush()
    finally:
        await producer.stop()


def majority(ticks: list[str]) -> str:
    return Counter(ticks).most_common(1)[0][0]


async def test_pipeline_50_nodes_regimes_anomalies_risk(kafka_bootstrap: str, topic_prefix: str,
                                                        tmp_path: Path) -> None:
    nodes, ticks = 50, 150
    sc = scenario(nodes, ticks, seed=21)
    models = tmp_path / "models"
    shutil.copytree(resolve(ROOT / "models" / "regime"), models / "regime" / "v1")
    (models / "regime" / "CURRENT").write_text("v1\n")
    try:  # the shipped failure model when there is a loadable one
        shipped = resolve(ROOT / "models" / "failure")
        load_failure_model(shipped)
        shutil.copytree(shipped, models / "failure" / "shipped")
        (models / "failure" / "CURRENT").write_text("shipped\n")
    except (ModelRefusedError, OSError):  # else a small one trained here on synthetic events
        train_provisional_failure_model(models / "failure")
    services = (
        spawn("features", kafka_bootstrap, topic_prefix, tmp_path),
        spawn("regime", kafka_bootstrap, topic_prefix, tmp_path, REGIME_MODEL_DIR=str(models / "regime")),
        spawn("anomaly", kafka_bootstrap, topic_prefix, tmp_path),
        spawn("risk", kafka_bootstrap, topic_prefix, tmp_path, RISK_MODEL_DIR=str(models / "failure"),
              RISK_RESCORE_S="0"),
    )
    with running(*services):
        await wait_ready(services)
        # anomaly and risk yield the CPU to the latency-critical path (STREAM_NICE defaults)
        base = os.getpriority(os.PRIO_PROCESS, 0)
        niceness = {s.name: os.getpriority(os.PRIO_PROCESS, s.proc.pid) for s in services}
        assert niceness == {"features": base, "regime": base, "anomaly": max(base, 10), "risk": max(base, 10)}
        bases = ["features.v1", REGIMES_TOPIC, "anomalies.v1", RISK_TOPIC, "deadletter.v2"]
        async with collector(kafka_bootstrap, topic_prefix, bases) as (got, poll_until):
            half = len(sc.states) // 2
            await produce_states(kafka_bootstrap, topic_prefix, sc.states[:half])
            producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True)
            await producer.start()
            try:
                bad = [(b"n-bad", b"{not json"), (b"n-bad", orjson.dumps({**sc.states[0], "cpu_util": 7.0}))]
                for key, value in bad:
                    await producer.send(topic_prefix + "nodestate.v1", key=key, value=value)
                for ev in sc.tasks:
                    await producer.send(topic_prefix + "taskevents.v1", key=ev.task_id.encode(), value=encode(ev),
                                        headers=build_headers("taskevents.v1"))
                await producer.flush()
            finally:
                await producer.stop()
            # hot reload: a new regime version while the stream runs
            shutil.copytree(models / "regime" / "v1", models / "regime" / "v2")
            card = orjson.loads((models / "regime" / "v2" / "model_card.json").read_bytes())
            card["version"] = "reloaded-v2"
            (models / "regime" / "v2" / "model_card.json").write_bytes(orjson.dumps(card))
            await poll_until(lambda g: len(g.records[REGIMES_TOPIC]) >= len(sc.expected_windows) // 3, 90,
                             "first regimes")
            (models / "regime" / "CURRENT").write_text("v2\n")
            await wait_metric(services[1], 'borg_model_loaded{model="regime",version="v2"} 1.0', 30)
            await produce_states(kafka_bootstrap, topic_prefix, sc.states[half:], offset=half)
            want = len(sc.expected_windows)
            await poll_until(lambda g: len({(v.node, v.ts_ms) for v in g.values(REGIMES_TOPIC, RegimeLabelV2)}) >= want
                             and len(g.records["anomalies.v1"]) >= want and len(g.records["deadletter.v2"]) >= 2
                             and sum(1 for r in g.records[RISK_TOPIC] if r.key.startswith(b"node:")) >= 10,
                             150, f"{want} windows through regime and anomaly, dead letters and risk")
    # ---- features: exactly the offline windows
    vectors = got.values("features.v1", FeatureVector)
    assert {(v.node, v.ts_ms) for v in vectors} == sc.expected_windows
    # ---- regime vs ground truth
    labels = {(v.node, v.ts_ms): v for v in got.values(REGIMES_TOPIC, RegimeLabelV2)}
    assert set(labels) == sc.expected_windows
    # accuracy on the windows the model answered (an ``unknown`` is an abstention, not a wrong label)
    answered = {k: lab for k, lab in labels.items() if lab.raw_regime != UNKNOWN_REGIME}
    coverage = len(answered) / len(labels)
    raw_hits = reported_hits = 0
    for (node, ts), lab in answered.items():
        pane = sc.machine.pane_of(node, ts - 1)
        truth = majority(sc.truth[(node, pane)])
        raw_hits += lab.raw_regime == truth
        reported_hits += lab.regime == truth
    raw_acc, rep_acc = raw_hits / max(1, len(answered)), reported_hits / max(1, len(answered))
    print(f"\nregime accuracy vs simulator ground truth over {len(answered)} answered of {len(labels)} windows "
          f"(coverage {coverage:.3f}): raw {raw_acc:.3f}, reported (hysteresis) {rep_acc:.3f}; "
          f"chance ~{1 / len(REGIMES):.2f}")
    # the shipped model's confidence floor is calibrated for 0.90 selective accuracy on its training kinds:
    # offline on this scenario it answers 22.4 % of windows, 89 % of them right (training/README.md, regime)
    assert coverage >= 0.15, f"the model answered only {coverage:.1%} of the simulator's (training-kind) windows"
    assert raw_acc > 0.8, f"raw regime matched ground truth in only {raw_acc:.1%} of answered windows"
    versions = Counter(lab.model_version for lab in labels.values())
    assert "reloaded-v2" in versions, f"hot reload not observed: {versions}"
    # trace continuity: every regime label continues the trace of one of its node's NodeStates
    node_traces: dict[str, set[str]] = defaultdict(set)
    for i, s in enumerate(sc.states):
        node_traces[s["node"]].add(f"{i + 1:032x}")
    for r in got.records[REGIMES_TOPIC][:200]:
        node = r.key.decode()
        assert trace_id_of(r.headers) in node_traces[node], "regime output started a new trace"
    # ---- anomalies and risk
    scores = got.values("anomalies.v1", AnomalyScore)
    assert {(s.node, s.ts_ms) for s in scores} == sc.expected_windows
    assert all(0.0 <= s.score <= 1.0 for s in scores)
    risks = got.values(RISK_TOPIC, FailureRiskV2)
    task_risks = [r for r in risks if r.target_kind == "task"]
    node_risks = [r for r in risks if r.target_kind == "node"]
    assert {r.target for r in task_risks} >= {e.task_id for e in sc.tasks if e.event == "SCHEDULE"}
    assert [h.horizon_s for h in task_risks[0].horizons] == [300, 900, 3600]
    failed = {e.task_id for e in sc.tasks if e.event == "FAIL"}
    finals = {r.target for r in task_risks if r.target in failed and all(h.probability == 0.0 for h in r.horizons)}
    assert finals == failed
    assert node_risks and all(r.tasks >= 0 for r in node_risks)
    # ---- dead letters name the source and offsets; the services kept running
    letters = [orjson.loads(r.value) for r in got.records["deadletter.v2"]]
    assert {(d["error_kind"], d["source_topic"]) for d in letters} >= {
        ("malformed", topic_prefix + "nodestate.v1"), ("schema", topic_prefix + "nodestate.v1")}
