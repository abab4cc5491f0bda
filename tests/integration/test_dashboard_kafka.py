"""The dashboard against the real broker: reader, offsets/lag monitor and HTTP API over replayed traffic.

The traffic is produced directly onto this test's topic namespace (the decision plane is not
needed): node signals for N nodes, cluster state, decisions whose proposals compete, their action
results, raw node states (for rates), a dead letter, and a consumer group with committed offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

from contracts.models import (
    REGIMES,
    ActionResult,
    AnomalyScore,
    ClusterState,
    Decision,
    DeploymentState,
    FailureRiskV2,
    HorizonRisk,
    Proposal,
    RegimeLabelV2,
    TargetRef,
)
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from loadtests.procs import free_port
from services.dashboard.main import Dashboard, body, build
from services.dashboard.reader import topic_partitions
from services.dashboard.settings import DashboardSettings
from services.runtime.deadletter import dead_letter
from services.runtime.health import HealthServer
from services.runtime.producer import Producer
from tests.conftest import wait_until
from tests.kafka_helpers import produce_raw

pytestmark = [pytest.mark.integration]

LAG_GROUP_SUFFIX = "features-test"


def node_name(i: int) -> str:
    return f"node-{i:03d}"


def regime_of(i: int, round_: int) -> str:
    """Deterministic regime per node and round (what the browser test checks in a cell)."""
    return REGIMES[(i + round_) % len(REGIMES)]


@dataclass
class Traffic:
    """What was replayed, for the assertions."""

    nodes: int
    rounds: int
    decisions: dict[str, Decision] = field(default_factory=dict)
    lag_group: str = ""
    nodestate_records: int = 0
    committed: int = 0


def _proposal(agent: str, kind: str, target: TargetRef, score: float, now: int, **payload: Any) -> Proposal:
    return Proposal(
        proposal_id=f"{agent[:3]}-{uuid.uuid4().hex[:12]}", agent=agent, kind=kind, target=target,  # type: ignore[arg-type]
        payload=payload, score=score, ts_ms=now,
    )


def conflicting_decisions(now: int, tag: str = "") -> list[tuple[Decision, ActionResult]]:
    """Decisions where the agents disagree, with every kind of outcome."""
    web = TargetRef(kind="Deployment", name="web", namespace="shop")
    api = TargetRef(kind="Deployment", name="api", namespace="shop")
    node = TargetRef(kind="Node", name=node_name(13))
    ns = TargetRef(kind="Namespace", name="shop")
    plans: list[tuple[str, TargetRef, list[Proposal], int, str, str, str]] = []
    p_web = [
        _proposal("reliability", "scale_out", web, 0.82, now, replicas=5, from_replicas=3),
        _proposal("efficiency", "scale_in", web, 0.41, now, replicas=2, from_replicas=3),
        _proposal("admission", "throttle", web, 0.55, now),
    ]
    plans.append(("web", web, p_web, 0, "dry-run", "dry-run",
                  "safety over efficiency: failure risk 0.71 on 2/3 pods outranks idle capacity"))
    p_api = [
        _proposal("efficiency", "scale_in", api, 0.66, now, replicas=1, from_replicas=2),
        _proposal("reliability", "replicate", api, 0.30, now, replicas=3, from_replicas=2),
    ]
    plans.append(("api", api, p_api, 0, "apply", "applied",
                  "no SLA risk above threshold: efficiency proposal accepted"))
    p_node = [
        _proposal("admission", "taint", node, 0.91, now, key="borg-orchestrator.io/contended", value="true",
                  effect="PreferNoSchedule"),
        _proposal("efficiency", "consolidate", node, 0.50, now),
    ]
    plans.append(("node", node, p_node, 0, "apply", "refused",
                  "anomaly 0.93 on node: admission wins over consolidation"))
    p_ns = [_proposal("admission", "hold_admission", ns, 0.70, now, pending_pods=4)]
    plans.append(("ns", ns, p_ns, 0, "apply", "failed", "queue critical: hold admission"))
    out = []
    for i, (name, target, props, chosen, mode, outcome, reason) in enumerate(plans):
        did = f"d-{name}{tag}"
        d = Decision(
            decision_id=did, ts_ms=now + i, target=target, action=props[chosen].kind,
            chosen_proposal_id=props[chosen].proposal_id, reason=reason, proposals=props, mode=mode,  # type: ignore[arg-type]
            trace_id=uuid.uuid4().hex,
        )
        r = ActionResult(
            decision_id=did, ts_ms=now + i + 40, target=target, action=d.action, outcome=outcome,  # type: ignore[arg-type]
            message={"dry-run": "server-side dry run accepted", "applied": "deployment scaled 2 → 1",
                     "refused": "cooldown: node tainted 40s ago (min 120s)",
                     "failed": "namespaces \"shop\" is forbidden"}[outcome],
            api_status={"dry-run": 200, "applied": 200, "refused": None, "failed": 403}[outcome],
        )
        out.append((d, r))
    return out


def cluster_state(now: int, *, api_desired: int) -> ClusterState:
    deployments = [
        DeploymentState(namespace="shop", name="web", desired_replicas=3, ready_replicas=3, available_replicas=3),
        DeploymentState(namespace="shop", name="api", desired_replicas=api_desired, ready_replicas=api_desired,
                        available_replicas=api_desired),
        DeploymentState(namespace="shop", name="batch", desired_replicas=4, ready_replicas=2, available_replicas=2),
    ]
    return ClusterState(cluster="local", namespace="shop", ts_ms=now, pending_pods=4, running_pods=23,
                        oldest_pending_s=37.5, queue_health="degraded", nodes_total=12, nodes_ready=11,
                        deployments=deployments)


async def replay_node_signals(producer: Producer, nodes: int, round_: int, now: int) -> None:
    for i in range(nodes):
        node = node_name(i)
        label = regime_of(i, round_)
        slowdown = 1.0 if label == "none" else 1.2 + (i % 7) / 10
        await producer.send(REGIMES_TOPIC, node, RegimeLabelV2(
            node=node, ts_ms=now, regime=label, confidence=0.6 + (i % 4) / 10, raw_regime=label,  # type: ignore[arg-type]
            changed=round_ > 0, interference={"cpu_bound": 1.0, "llc_sensitive": slowdown, "memory_bound": 1.1},
            model_version="regime-test", input_ts_ms=now))
        score = ((i * 37 + round_ * 11) % 100) / 100
        await producer.send("anomalies.v1", node, AnomalyScore(
            node=node, ts_ms=now, score=score, is_anomaly=score > 0.9, threshold=0.9, model_version="anomaly-test",
            input_ts_ms=now))
        p = ((i * 13 + round_ * 7) % 90) / 100
        await producer.send(RISK_TOPIC, node, FailureRiskV2(
            target_kind="node", target=node, node=node, ts_ms=now, model_version="risk-test", input_ts_ms=now,
            tasks=3, horizons=[HorizonRisk(horizon_s=60, probability=p / 3),
                               HorizonRisk(horizon_s=300, probability=p / 2),
                               HorizonRisk(horizon_s=1800, probability=p)]))


async def replay_traffic(bootstrap: str, prefix: str, *, nodes: int, rounds: int = 3, round_ms: int = 5000) -> Traffic:
    """Replay a few minutes of pipeline output (event times spaced `round_ms` apart, ending now)."""
    traffic = Traffic(nodes=nodes, rounds=rounds, lag_group=f"{prefix}{LAG_GROUP_SUFFIX}")
    producer = Producer(bootstrap=bootstrap, client_id="dashboard-test-replay", topic_prefix=prefix, linger_ms=20)
    await producer.start()
    try:
        end = int(time.time() * 1000)
        for r in range(rounds):
            now = end - (rounds - 1 - r) * round_ms
            await replay_node_signals(producer, nodes, r, now)
            await producer.send("clusterstate.v1", "local/shop", cluster_state(now, api_desired=2))
            await producer.flush()
        for d, result in conflicting_decisions(end):
            traffic.decisions[d.decision_id] = d
            await producer.send("decisions.v1", d.target.key(), d)
            await producer.send("actions.v1", d.target.key(), result)
        letter = dead_letter(
            service="features", topic=f"{prefix}nodestate.v1", partition=0, offset=7, key=b"node-099",
            value=b'{"node": "node-099", "cpu_util": 7.5}', headers=None,
            error="NodeState: cpu_util: Input should be less than or equal to 1; ts_ms: Field required",
            kind="schema").model_copy(update={"ts_ms": end})
        await producer.send("deadletter.v2", letter.source_topic, letter)
        await producer.flush()
    finally:
        await producer.stop()
    await produce_raw(bootstrap, f"{prefix}nodestate.v1", [(node_name(i).encode(), b"{}") for i in range(40)])
    traffic.nodestate_records = 40
    traffic.committed = await commit_group_offsets(bootstrap, f"{prefix}nodestate.v1", traffic.lag_group)
    return traffic


async def commit_group_offsets(bootstrap: str, topic: str, group: str) -> int:
    """A consumer group that has committed offset 1 on every non-empty partition of `topic` (lag: the rest).

    Returns the sum of the committed offsets.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        partitions = await topic_partitions(admin, [topic])
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        offsets = {tp: min(1, ends[tp]) for tp in partitions}
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
        return sum(offsets.values())
    finally:
        await consumer.stop()


def settings_for(prefix: str, port: int = 0, **extra: Any) -> DashboardSettings:
    values: dict[str, Any] = {
        "kafka_bootstrap": "127.0.0.1:9092", "topic_prefix": prefix, "host": "127.0.0.1", "port": port,
        "start": "earliest", "offsets_interval_s": 0.5, "push_interval_s": 0.3, "stale_s": 60, "history_minutes": 2,
        "jaeger_url": "http://127.0.0.1:16686",
    }
    return DashboardSettings(**(values | extra))


@contextlib.asynccontextmanager
async def running_dashboard(settings: DashboardSettings) -> AsyncIterator[str]:
    """`body()` exactly as `borgctl serve dashboard` runs it; yields the page URL."""
    stop = asyncio.Event()
    health = HealthServer("127.0.0.1", 0)
    await health.start()
    task = asyncio.create_task(body(settings, stop, health))
    base = f"http://127.0.0.1:{settings.port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def ready() -> bool:
                if task.done():
                    task.result()
                try:
                    async with http.get(f"{base}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False
            await wait_until(ready, timeout=30, interval=0.1, what="dashboard /readyz")
        yield base
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
        await health.stop()


async def test_dashboard_aggregates_replayed_traffic(kafka_bootstrap: str, topic_prefix: str) -> None:
    traffic = await replay_traffic(kafka_bootstrap, topic_prefix, nodes=20)
    settings = settings_for(topic_prefix, port=free_port())
    async with running_dashboard(settings) as base, aiohttp.ClientSession() as http:
        async def state() -> Any:
            async with http.get(f"{base}/api/state") as r:
                return await r.json()

        async def complete() -> Any:
            s = await state()
            groups = {g["group"]: g for g in s["pipeline"]["groups"]}
            done = (
                len(s["decisions"]) == 4
                and all(d["result"] for d in s["decisions"])
                and len(s["nodes"]) == 20
                and s["pipeline"]["deadletter_total"] == 1
                and traffic.lag_group in groups
            )
            return s if done else None

        snap = await wait_until(complete, timeout=30, interval=0.2, what="decisions, nodes, dead letter and lag")
        by_id = {d["id"]: d for d in snap["decisions"]}
        web = by_id["d-web"]
        assert [(p["agent"], p["kind"], p["chosen"]) for p in web["proposals"]] == [
            ("reliability", "scale_out", True), ("efficiency", "scale_in", False), ("admission", "throttle", False)]
        assert web["result"]["outcome"] == "dry-run"
        assert web["trace_id"] == traffic.decisions["d-web"].trace_id
        assert {d["result"]["outcome"] for d in snap["decisions"]} == {"dry-run", "applied", "refused", "failed"}
        nodes = {n["node"]: n for n in snap["nodes"]}
        assert nodes["node-007"]["regime"]["label"] == regime_of(7, traffic.rounds - 1)
        regimes = [v for v in nodes["node-007"]["series"]["regime"]["v"] if v is not None]
        assert len(regimes) >= 2  # history across the replayed rounds
        assert not nodes["node-007"]["stale"]
        deployments = {d["name"]: d for d in snap["cluster"]["clusters"][0]["deployments"]}
        assert deployments["web"]["status"] == "not-applied"  # dry-run: Kubernetes keeps 3, orchestrator said 5
        assert deployments["api"]["intent"]["replicas"] == 1
        assert deployments["batch"]["status"] == "no-intent"
        (letter,) = snap["pipeline"]["deadletters"]["last"]
        assert letter["source_topic"] == "nodestate.v1"
        assert "cpu_util" in letter["error"]
        lag = {g["group"]: g for g in snap["pipeline"]["groups"]}[traffic.lag_group]
        assert lag["topics"] == {"nodestate.v1": traffic.nodestate_records - traffic.committed}

        # rates: the slope of end offsets, seen as more node states arrive
        await produce_raw(kafka_bootstrap, f"{topic_prefix}nodestate.v1", [(b"n", b"{}")] * 200)

        async def rate() -> float:
            topics = {t["topic"]: t for t in (await state())["pipeline"]["topics"]}
            ns = topics.get("nodestate.v1")
            return float(ns["rate"]) if ns and ns["total"] == 240 else 0.0

        assert await wait_until(rate, timeout=20, interval=0.2, what="nodestate.v1 messages/s") > 0

        # the cluster watcher now reports api at 2 replicas after the applied scale-in to 1: visible disagreement
        producer = Producer(bootstrap=kafka_bootstrap, client_id="dashboard-test", topic_prefix=topic_prefix)
        await producer.start()
        try:
            await producer.send("clusterstate.v1", "local/shop", cluster_state(int(time.time() * 1000) + 1000,
                                                                                api_desired=2))
        finally:
            await producer.stop()

        async def differs() -> bool:
            deps = {d["name"]: d for d in (await state())["cluster"]["clusters"][0]["deployments"]}
            return bool(deps["api"]["status"] == "differs")

        await wait_until(differs, timeout=20, interval=0.2, what="api deployment marked as differing")


async def test_reader_start_latest_skips_history_but_keeps_cluster_state(kafka_bootstrap: str,
                                                                         topic_prefix: str) -> None:
    await replay_traffic(kafka_bootstrap, topic_prefix, nodes=3, rounds=1)
    parts: Dashboard = build(settings_for(topic_prefix, start="latest"))
    stop = asyncio.Event()
    task = asyncio.create_task(parts.reader.run(stop))
    try:
        await wait_until(parts.reader.caught_up.is_set, timeout=30, what="reader caught up")
        assert len(parts.state.clusters) == 1  # clusterstate.v1 is always read from the beginning
        assert len(parts.state.decisions) == 0
        producer = Producer(bootstrap=kafka_bootstrap, client_id="dashboard-test", topic_prefix=topic_prefix)
        await producer.start()
        try:
            for d, r in conflicting_decisions(int(time.time() * 1000), tag="-live"):
                await producer.send("decisions.v1", d.target.key(), d)
                await producer.send("actions.v1", d.target.key(), r)
        finally:
            await producer.stop()
        await wait_until(lambda: len(parts.state.decisions) == 4, timeout=20, what="live decisions")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def test_borgctl_serve_dashboard_serves_page_and_health_on_one_port(kafka_bootstrap: str,
                                                                          topic_prefix: str) -> None:
    """The real entry point, configured like a container: only the common HEALTH_HOST / HEALTH_PORT."""
    import os
    import signal
    import sys

    from tests.conftest import ROOT

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHBOARD_")}
    env |= {"KAFKA_BOOTSTRAP": kafka_bootstrap, "BORG_TOPIC_PREFIX": topic_prefix, "HEALTH_HOST": "127.0.0.1",
            "HEALTH_PORT": str(port), "LOG_FORMAT": "text", "DASHBOARD_START": "earliest"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "borgctl.main", "serve", "dashboard", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as http:
            async def ready() -> bool:
                assert proc.returncode is None, "dashboard exited"
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(ready, timeout=45, interval=0.2, what="borgctl serve dashboard ready")
            async with http.get(f"http://127.0.0.1:{port}/") as r:
                assert r.status == 200
                assert "Decisions" in await r.text()
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert "borg_dashboard_records_total" in await r.text()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
