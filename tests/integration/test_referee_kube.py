"""The referee against the real kube-apiserver, fed through Kafka, running with the RBAC from deploy/.

What is real here: Kafka, the kube-apiserver with etcd, RBAC, admission, the deployment and
disruption controllers and the scheduler (all from infra/kube/kube.sh). What is not: kubelets
(pods never run; nodes are hand-made API objects).
"""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from contracts.models import ActionResult, Decision, Proposal, TargetRef
from services.referee.actuator import KubeActuator
from services.referee.loop import Referee
from services.referee.settings import RefereeSettings
from services.runtime.producer import Producer
from services.runtime.stream_io import Sink
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import (  # noqa: F401 (fixtures)
    DEPLOY,
    Nodes,
    apply,
    collect,
    deployment,
    granted_rules,
    kube_admin,
    kube_ns,
    kubectl,
    kubectl_json,
    mark_running,
    nodes,
    pdb,
    pod,
    referee_kubeconfig,
    span_recorder,
    token_kubeconfig,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube]
AGENT = {
    "scale_out": "reliability",
    "replicate": "reliability",
    "scale_in": "efficiency",
    "memory_balloon": "efficiency",
    "consolidate": "efficiency",
    "throttle": "admission",
    "deprioritize": "admission",
    "taint": "admission",
    "cordon": "admission",
    "evict": "admission",
    "hold_admission": "admission",
}


def proposal(kind: str, target: TargetRef, score: float, **payload: Any) -> Proposal:
    return Proposal(
        proposal_id=f"it-{uuid.uuid4().hex[:12]}",
        agent=AGENT[kind],  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        target=target,
        payload=payload,
        score=score,
        ts_ms=int(time.time() * 1000),
    )


def dep_ref(ns: str, name: str) -> TargetRef:
    return TargetRef(kind="Deployment", name=name, namespace=ns)


def pod_ref(ns: str, name: str) -> TargetRef:
    return TargetRef(kind="Pod", name=name, namespace=ns)


def node_ref(name: str) -> TargetRef:
    return TargetRef(kind="Node", name=name)


async def send(bootstrap: str, prefix: str, proposals: list[Proposal]) -> dict[str, str]:
    """Produce proposals, each in its own (known) trace; returns proposal id → trace id."""
    producer = Producer(bootstrap=bootstrap, client_id="it-agents", topic_prefix=prefix)
    await producer.start()
    traces: dict[str, str] = {}
    try:
        for p in proposals:
            ctx = SpanContext(
                random.getrandbits(128), random.getrandbits(64), is_remote=False, trace_flags=TraceFlags(1)
            )
            await producer.send("proposals.v1", p.target.key(), p, ctx=trace.set_span_in_context(NonRecordingSpan(ctx)))
            traces[p.proposal_id] = f"{ctx.trace_id:032x}"
    finally:
        await producer.stop()
    return traces


def settings(bootstrap: str, prefix: str, kubeconfig: Path | None, **kw: Any) -> RefereeSettings:
    base: dict[str, Any] = {
        "KAFKA_BOOTSTRAP": bootstrap,
        "BORG_TOPIC_PREFIX": prefix,
        "mode": "apply",
        "window_ms": 300,
        "group_id": f"referee-{uuid.uuid4().hex[:8]}",
        "rate_limit_per_min": 1000,
        "max_disruptions": 100,
        "kubeconfig": str(kubeconfig) if kubeconfig else None,
    }
    return RefereeSettings(**{**base, **kw})


class Running:
    """A Referee running in this process until `stop()`."""

    def __init__(self, s: RefereeSettings) -> None:
        self.s = s
        self.stop_event = asyncio.Event()

    async def __aenter__(self) -> Running:
        self.sink = Sink(bootstrap=self.s.kafka_bootstrap, service="it-referee", topic_prefix=self.s.topic_prefix)
        await self.sink.start()
        self.actuator = await KubeActuator.connect(self.s) if self.s.mode != "shadow" else None
        self.referee = Referee(self.s, self.sink, self.actuator)
        self.task = asyncio.create_task(self.referee.run(self.stop_event))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop_event.set()
        await asyncio.wait_for(self.task, 30)
        await self.sink.stop()
        if self.actuator is not None:
            await self.actuator.close()


def results_for(targets: set[str]) -> Any:
    return lambda got: {r.target.key() for r, _ in got} >= targets


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


async def wait_pdb_observed(ns: str, name: str, healthy: int | None = None) -> None:
    """Until kube-controller-manager's disruption controller has computed the PDB's status."""

    def observed() -> bool:
        status = kubectl_json("get", "pdb", name, "-n", ns).get("status") or {}
        seen = int(status.get("observedGeneration") or 0) >= 1
        return seen and (healthy is None or status.get("currentHealthy") == healthy)

    await wait_until(observed, timeout=30, interval=0.3, what=f"the disruption controller to observe PDB {name}")


async def test_decisions_reach_the_cluster_with_the_referee_rbac_and_replays_change_nothing(
    kafka_bootstrap: str, topic_prefix: str, referee_kubeconfig: Path, kube_ns: str, nodes: Nodes
) -> None:
    ns = kube_ns
    worker, tainted, cordoned = nodes.make(), nodes.make(), nodes.make()
    apply(
        [
            deployment("web", 1, worker),
            deployment("batch", 2, worker),
            deployment("api", 4, worker),
            deployment("low", 1, worker),
            pdb("api", {"app": "api"}, 4),
            pod("victim", worker),
            pod("fat", worker, memory="256Mi"),
            pod("old-kubelet", worker, memory="256Mi"),
            pod("guarded", worker, labels={"app": "guarded"}),
            pdb("guarded", {"app": "guarded"}, 1),
        ],
        namespace=ns,
    )
    mark_running(ns, "guarded")
    # running as a kubelet without in-place resize reports it: container status without resources
    old_kubelet = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-27T00:00:00Z"}},
                }
            ],
        }
    }
    kubectl("patch", "pod", "old-kubelet", "-n", ns, "--subresource=status", "-p", json.dumps(old_kubelet))
    await wait_pdb_observed(ns, "guarded", healthy=1)
    await wait_pdb_observed(ns, "api")
    web_generation = kubectl_json("get", "deploy", "web", "-n", ns)["metadata"]["generation"]
    batch_up = proposal("scale_out", dep_ref(ns, "batch"), 0.6, replicas=3)
    batch_down = proposal("scale_in", dep_ref(ns, "batch"), 0.9, replicas=1)
    plan = [
        proposal("scale_out", dep_ref(ns, "web"), 0.8, replicas=3),
        proposal(
            "taint", node_ref(tainted), 0.7, key="borg-orchestrator.io/contended", value="llc", effect="NoSchedule"
        ),
        proposal("cordon", node_ref(cordoned), 0.96),
        proposal("evict", pod_ref(ns, "victim"), 0.9),
        proposal("evict", pod_ref(ns, "guarded"), 0.9),
        proposal("memory_balloon", pod_ref(ns, "fat"), 0.8, memory_request_mib=128),
        proposal("memory_balloon", pod_ref(ns, "old-kubelet"), 0.8, memory_request_mib=128),
        batch_up,
        batch_down,
        proposal("scale_in", dep_ref(ns, "api"), 0.9, replicas=3),
        proposal("deprioritize", dep_ref(ns, "low"), 0.7, tier="deprioritized"),
        proposal("hold_admission", TargetRef(kind="Namespace", name=ns), 0.8),
    ]
    traces = await send(kafka_bootstrap, topic_prefix, plan)
    spans = span_recorder()
    targets = {p.target.key() for p in plan}

    s = settings(kafka_bootstrap, topic_prefix, referee_kubeconfig)
    async with Running(s) as run:
        got = await collect(kafka_bootstrap, f"{topic_prefix}actions.v1", ActionResult, results_for(targets))
        calls = set(run.actuator.calls) if run.actuator else set()
    results = {r.target.key(): r for r, _ in got}
    decisions = {
        d.target.key(): d
        for d, _ in await collect(
            kafka_bootstrap, f"{topic_prefix}decisions.v1", Decision, lambda g: len(g) >= len(targets)
        )
    }
    outcome = {k: (r.action, r.outcome) for k, r in results.items()}
    assert outcome == {
        dep_ref(ns, "web").key(): ("scale_out", "applied"),
        node_ref(tainted).key(): ("taint", "applied"),
        node_ref(cordoned).key(): ("cordon", "applied"),
        pod_ref(ns, "victim").key(): ("evict", "applied"),
        pod_ref(ns, "guarded").key(): ("evict", "refused"),
        pod_ref(ns, "fat").key(): ("memory_balloon", "applied"),
        pod_ref(ns, "old-kubelet").key(): ("memory_balloon", "refused"),
        dep_ref(ns, "batch").key(): ("scale_out", "applied"),
        dep_ref(ns, "api").key(): ("scale_in", "refused"),
        dep_ref(ns, "low").key(): ("deprioritize", "applied"),
        f"Namespace/_/{ns}": ("hold_admission", "applied"),
    }, {k: r.message for k, r in results.items()}

    # Scale subresource: visible through the API and kubectl, annotated with the decision and its trace.
    web = kubectl_json("get", "deploy", "web", "-n", ns)
    assert kubectl("get", "deploy", "web", "-n", ns, "-o", "jsonpath={.spec.replicas}").stdout == "3"
    d_web = decisions[dep_ref(ns, "web").key()]
    assert (
        annotations_of(web)["borg-orchestrator.io/decision-id"]
        == d_web.decision_id
        == results[d_web.target.key()].decision_id
    )
    assert (
        annotations_of(web)["borg-orchestrator.io/trace-id"] == d_web.trace_id == results[d_web.target.key()].trace_id
    )
    assert d_web.trace_id == traces[plan[0].proposal_id], "the decision continues the chosen proposal's trace"

    # Node taint and cordon.
    node_t = kubectl_json("get", "node", tainted)
    assert {"key": "borg-orchestrator.io/contended", "value": "llc", "effect": "NoSchedule"} in node_t["spec"]["taints"]
    assert "borg-orchestrator.io/contended=llc:NoSchedule" in kubectl("describe", "node", tainted).stdout
    assert kubectl_json("get", "node", cordoned)["spec"]["unschedulable"] is True

    # Eviction API: the pod is terminating with the eviction's DisruptionTarget condition.
    victim = kubectl_json("get", "pod", "victim", "-n", ns)
    assert victim["metadata"].get("deletionTimestamp")
    conditions = {c["type"]: c.get("reason") for c in victim["status"].get("conditions", [])}
    assert conditions.get("DisruptionTarget") == "EvictionByEvictionAPI"
    assert (
        annotations_of(victim)["borg-orchestrator.io/decision-id"] == results[pod_ref(ns, "victim").key()].decision_id
    )
    # The referee's own PDB check refused the guarded pod before asking the API.
    guarded = results[pod_ref(ns, "guarded").key()]
    assert "PodDisruptionBudget guarded allows 0 disruptions (healthy 1, desired 1)" in guarded.message
    assert guarded.api_status is None
    assert not kubectl_json("get", "pod", "guarded", "-n", ns)["metadata"].get("deletionTimestamp")

    # In-place resize through pods/resize.
    fat = kubectl_json("get", "pod", "fat", "-n", ns)
    assert fat["spec"]["containers"][0]["resources"]["requests"]["memory"] == "128Mi"
    # ... refused before asking the API (which answers 422) when the pod's node cannot resize in place
    old = results[pod_ref(ns, "old-kubelet").key()]
    assert old.message.startswith(f"in-place resize not possible: node {worker} does not support in-place resize")
    assert old.api_status is None
    old_pod = kubectl_json("get", "pod", "old-kubelet", "-n", ns)
    assert old_pod["spec"]["containers"][0]["resources"]["requests"]["memory"] == "256Mi"

    # Conflict: SLA (scale_out 0.6) beat efficiency (scale_in 0.9); both proposals are in the decision.
    d_batch = decisions[dep_ref(ns, "batch").key()]
    assert d_batch.chosen_proposal_id == batch_up.proposal_id
    assert {p.proposal_id for p in d_batch.proposals} == {batch_up.proposal_id, batch_down.proposal_id}
    assert "safety outranks SLA outranks efficiency" in d_batch.reason
    assert kubectl_json("get", "deploy", "batch", "-n", ns)["spec"]["replicas"] == 3
    # The decide span links both proposals' span contexts.
    decide = [
        sp
        for sp in spans.get_finished_spans()
        if sp.name == "referee decide" and sp.attributes.get("borg.decision.id") == d_batch.decision_id
    ]
    assert decide, "referee decide span for the batch decision"
    linked = {f"{link.context.trace_id:032x}" for link in decide[0].links}
    assert linked == {traces[batch_up.proposal_id], traces[batch_down.proposal_id]}

    # Budgets: a scale-in below the PDB's minAvailable is refused; replicas untouched.
    assert "PodDisruptionBudget api needs minAvailable 4" in results[dep_ref(ns, "api").key()].message
    assert kubectl_json("get", "deploy", "api", "-n", ns)["spec"]["replicas"] == 4

    assert (
        kubectl_json("get", "deploy", "low", "-n", ns)["metadata"]["labels"]["borg-orchestrator.io/tier"]
        == "deprioritized"
    )
    assert kubectl_json("get", "namespace", ns)["metadata"]["labels"]["borg-orchestrator.io/admission"] == "hold"

    # The hold bites: the ValidatingAdmissionPolicy from deploy/ refuses new pods in the namespace.
    # (The API server's policy cache may need a moment after the policy is first created.)
    def held() -> str:
        attempt = kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(pod("late", worker)), check=False)
        if attempt.returncode == 0:
            kubectl("delete", "pod", "late", "-n", ns, "--force", "--grace-period=0", check=False)
            return ""
        return attempt.stderr

    assert "is on hold by the borg-orchestrator referee" in await wait_until(
        held, timeout=20, interval=0.5, what="the admission hold to bite"
    )

    # Kubernetes Events on the targets carry the decision and trace ids.
    events = kubectl_json("get", "events", "-n", ns)["items"]
    web_events = [e for e in events if e["involvedObject"]["name"] == "web" and e["reason"] == "BorgDecisionApplied"]
    assert len(web_events) == 1
    assert annotations_of(web_events[0])["borg-orchestrator.io/trace-id"] == d_web.trace_id
    assert d_web.decision_id in web_events[0]["message"]
    for cluster_scoped in (tainted, ns):  # Events on Nodes and Namespaces live in "default"
        found = kubectl_json(
            "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={cluster_scoped}"
        )
        assert [e["reason"] for e in found["items"]] == ["BorgDecisionApplied"], cluster_scoped
    refused = [e for e in events if e["involvedObject"] == {**e["involvedObject"], "kind": "Pod", "name": "guarded"}]
    assert [(e["reason"], e["type"]) for e in refused] == [("BorgDecisionRefused", "Warning")]

    # RBAC from deploy/ granted exactly what the actuator used: no rule unused, nothing used outside it.
    granted = granted_rules(DEPLOY / "referee" / "rbac.yaml")
    assert calls == granted, f"granted but unused: {granted - calls}; used but not granted: {calls - granted}"
    for forbidden in [
        ("delete", "pods"),
        ("update", "deployments"),
        ("create", "deployments"),
        ("delete", "nodes"),
        ("get", "secrets"),
        ("patch", "deployments", "--subresource=status"),
        ("list", "pods"),
    ]:
        answer = kubectl(
            "auth", "can-i", *forbidden, "--as=system:serviceaccount:borg-system:borg-referee", check=False
        )
        assert answer.stdout.strip() == "no", forbidden

    # Replaying the whole topic with a fresh referee (no memory of the first run) changes nothing.
    before = {
        "web": kubectl_json("get", "deploy", "web", "-n", ns)["metadata"]["resourceVersion"],
        "node": kubectl_json("get", "node", tainted)["metadata"]["resourceVersion"],
    }
    async with Running(settings(kafka_bootstrap, topic_prefix, referee_kubeconfig)):
        replayed = await collect(
            kafka_bootstrap, f"{topic_prefix}actions.v1", ActionResult, lambda g: len(g) >= 2 * len(targets)
        )
    second = {r.target.key(): r for r, _ in replayed[len(targets) :]}
    for key in (
        dep_ref(ns, "web").key(),
        node_ref(tainted).key(),
        pod_ref(ns, "victim").key(),
        pod_ref(ns, "fat").key(),
    ):
        assert second[key].outcome == "duplicate", second[key]
        assert second[key].decision_id == results[key].decision_id
    after_web = kubectl_json("get", "deploy", "web", "-n", ns)
    assert after_web["metadata"]["resourceVersion"] == before["web"]
    assert after_web["spec"]["replicas"] == 3
    # One scale write + one annotation (Deployments bump generation for both), none from the replay.
    assert after_web["metadata"]["generation"] == web_generation + 2
    assert kubectl_json("get", "node", tainted)["metadata"]["resourceVersion"] == before["node"]
    borg_events = [
        e for e in kubectl_json("get", "events", "-n", ns)["items"] if e["reason"].startswith("BorgDecision")
    ]
    assert len([e for e in borg_events if e["involvedObject"]["name"] == "web"]) == 1
