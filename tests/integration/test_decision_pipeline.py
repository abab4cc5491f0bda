"""End to end on the real broker and API server: inputs → three agents → proposals → referee → cluster."""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from contracts.headers import trace_id_of
from contracts.models import ActionResult, ClusterState, DeploymentState, Proposal, RegimeLabelV2, TaskEvent
from contracts.topics import REGIMES_TOPIC
from services.agents import admission, efficiency, reliability
from services.agents.admission_policy import evaluate as admission_policy
from services.agents.efficiency_policy import evaluate as efficiency_policy
from services.agents.reliability_policy import evaluate as reliability_policy
from services.agents.settings import AdmissionSettings, EfficiencySettings, ReliabilitySettings
from services.agents.wiring import Agent, run_agent
from services.runtime.producer import Producer
from tests.integration.test_referee_helpers import (  # noqa: F401 (fixtures)
    Nodes,
    apply,
    collect,
    deployment,
    kube_admin,
    kube_ns,
    kubectl,
    kubectl_json,
    nodes,
    referee_kubeconfig,
)
from tests.integration.test_referee_kube import Running, settings

pytestmark = [pytest.mark.integration, pytest.mark.kube]


def traced(trace_id: int) -> Any:
    ctx = SpanContext(trace_id, random.getrandbits(64), is_remote=False, trace_flags=TraceFlags(1))
    return trace.set_span_in_context(NonRecordingSpan(ctx))


async def test_agents_propose_and_the_referee_applies(
    kafka_bootstrap: str, topic_prefix: str, referee_kubeconfig: Path, kube_ns: str, nodes: Nodes
) -> None:
    ns = kube_ns
    worker, hot = nodes.make(), nodes.make()
    apply([deployment("web", 2, worker)], namespace=ns)
    now = int(time.time() * 1000)
    state_trace, regime_trace = random.getrandbits(128), random.getrandbits(128)
    producer = Producer(bootstrap=kafka_bootstrap, client_id="it-inputs", topic_prefix=topic_prefix)
    await producer.start()
    try:
        web = DeploymentState(namespace=ns, name="web", desired_replicas=2, ready_replicas=0, available_replicas=0)
        state = ClusterState(
            cluster="it",
            namespace=ns,
            ts_ms=now,
            pending_pods=0,
            running_pods=2,
            queue_health="healthy",
            nodes_total=2,
            nodes_ready=2,
            deployments=[web],
        )
        await producer.send("clusterstate.v1", f"it/{ns}", state, ctx=traced(state_trace))
        label = RegimeLabelV2(
            node=hot,
            ts_ms=now,
            regime="membw",
            confidence=0.9,
            raw_regime="membw",
            changed=True,
            interference={"memory_bound": 3.2, "cpu_bound": 1.1},
            model_version="it",
            input_ts_ms=now - 40,
        )
        await producer.send(REGIMES_TOPIC, hot, label, ctx=traced(regime_trace))
        task = TaskEvent(
            task_id=f"{ns}/web-1",
            job_id="web",
            task_index=0,
            ts_ms=now,
            event="SCHEDULE",
            source="kubernetes",
            machine=worker,
            namespace=ns,
        )
        await producer.send("taskevents.v1", task.task_id, task)
    finally:
        await producer.stop()

    common: dict[str, Any] = {"KAFKA_BOOTSTRAP": kafka_bootstrap, "BORG_TOPIC_PREFIX": topic_prefix}
    group = uuid.uuid4().hex[:8]
    agents: list[tuple[Agent[Any], tuple[str, ...]]] = [
        (
            Agent("reliability", ReliabilitySettings(**common, group_id=f"rel-{group}"), reliability_policy),
            reliability.INPUT_TOPICS,
        ),
        (
            Agent("efficiency", EfficiencySettings(**common, group_id=f"eff-{group}"), efficiency_policy),
            efficiency.INPUT_TOPICS,
        ),
        (
            Agent("admission", AdmissionSettings(**common, group_id=f"adm-{group}"), admission_policy),
            admission.INPUT_TOPICS,
        ),
    ]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(run_agent(agent, topics, stop)) for agent, topics in agents]
    try:
        async with Running(settings(kafka_bootstrap, topic_prefix, referee_kubeconfig)):
            got = await collect(
                kafka_bootstrap,
                f"{topic_prefix}actions.v1",
                ActionResult,
                lambda g: {r.action for r, _ in g} >= {"scale_out", "taint"},
            )
            proposals = await collect(kafka_bootstrap, f"{topic_prefix}proposals.v1", Proposal, lambda g: len(g) >= 2)
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    outcomes = {(r.action, r.target.key()): r.outcome for r, _ in got}
    assert outcomes[("scale_out", f"Deployment/{ns}/web")] == "applied"
    assert outcomes[("taint", f"Node/_/{hot}")] == "applied"
    assert kubectl("get", "deploy", "web", "-n", ns, "-o", "jsonpath={.spec.replicas}").stdout == "4"
    taints = kubectl_json("get", "node", hot)["spec"]["taints"]
    assert {"key": "borg-orchestrator.io/contended", "value": "membw", "effect": "NoSchedule"} in taints

    by_kind = {p.kind: (p, headers) for p, headers in proposals}
    scale, scale_headers = by_kind["scale_out"]
    assert scale.agent == "reliability"
    assert {(e.topic, e.field, e.value) for e in scale.evidence} == {
        ("clusterstate.v1", "ready_replicas", 0),
        ("clusterstate.v1", "desired_replicas", 2),
    }
    assert scale.input_ts_ms == now
    taint, taint_headers = by_kind["taint"]
    assert taint.agent == "admission"
    assert taint.input_ts_ms == now - 40
    # Each proposal continues the trace of the input that triggered it, and so does the decision.
    assert trace_id_of(scale_headers) == f"{state_trace:032x}"
    assert trace_id_of(taint_headers) == f"{regime_trace:032x}"
    trace_ids = {r.action: r.trace_id for r, _ in got}
    assert trace_ids["scale_out"] == f"{state_trace:032x}"
    assert trace_ids["taint"] == f"{regime_trace:032x}"
    web_annotations = kubectl_json("get", "deploy", "web", "-n", ns)["metadata"]["annotations"]
    assert web_annotations["borg-orchestrator.io/trace-id"] == f"{state_trace:032x}"
