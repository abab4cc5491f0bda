"""Table tests of the three agents' pure policies (no Kafka)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from contracts.base import Contract
from contracts.models import (
    AbstainReason,
    AnomalyScore,
    ClusterState,
    DeploymentState,
    FailureRiskV2,
    HorizonRisk,
    NodeState,
    RegimeLabelV2,
    TaskEvent,
)
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from services.agents import admission_policy, efficiency_policy, reliability_policy
from services.agents.settings import AdmissionSettings, EfficiencySettings, ReliabilitySettings
from services.agents.view import ClusterView
from tests.samples import unknown_label

NOW = 1_750_000_000_000
TOPIC = {
    RegimeLabelV2: REGIMES_TOPIC,
    AnomalyScore: "anomalies.v1",
    FailureRiskV2: RISK_TOPIC,
    NodeState: "nodestate.v1",
    ClusterState: "clusterstate.v1",
    TaskEvent: "taskevents.v1",
}


def regime(node: str, name: str = "none", conf: float = 0.9, worst: float = 1.0, ts: int = NOW) -> RegimeLabelV2:
    return RegimeLabelV2(
        node=node,
        ts_ms=ts,
        regime=name,  # type: ignore[arg-type]
        confidence=conf,
        raw_regime=name,  # type: ignore[arg-type]
        changed=False,
        interference={"cpu_bound": 1.0, "llc_sensitive": worst},
        model_version="m1",
        input_ts_ms=ts - 5,
    )


def unknown(node: str, reasons: tuple[AbstainReason, ...] = ("counters_missing",), ts: int = NOW) -> RegimeLabelV2:
    """The regime stage abstained on the node's window (regimes.v2)."""
    return unknown_label(node, ts, reasons, input_ts_ms=ts - 5)


def anomaly(node: str, score: float, flagged: bool, ts: int = NOW) -> AnomalyScore:
    return AnomalyScore(
        node=node, ts_ms=ts, score=score, is_anomaly=flagged, threshold=0.6, model_version="m1", input_ts_ms=ts
    )


def risk(target: str, p: float, kind: str = "node", ts: int = NOW, in_range: bool = True) -> FailureRiskV2:
    """A risk.v2 record; ``in_range=False``: a task input (task risk) or an aggregated task (node risk) out of range."""
    return FailureRiskV2(
        target_kind=kind,  # type: ignore[arg-type]
        target=target,
        ts_ms=ts,
        out_of_range=[] if in_range or kind == "node" else ["cpu_request"],
        tasks_out_of_range=0 if in_range or kind == "task" else 1,
        model_version="m1",
        input_ts_ms=ts - 7,
        horizons=[HorizonRisk(horizon_s=300, probability=p / 2), HorizonRisk(horizon_s=3600, probability=p)],
    )


def usage(node: str, cpu: float, mem: float, ts: int = NOW) -> NodeState:
    return NodeState(
        node=node,
        ts_ms=ts,
        seq=1,
        interval_ms=1000,
        source="synthetic",
        pmu="software",
        supported_events=[],
        cpu_util=cpu,
        mem_util=mem,
    )


def dep(ns: str, name: str, desired: int, ready: int) -> DeploymentState:
    return DeploymentState(
        namespace=ns, name=name, desired_replicas=desired, ready_replicas=ready, available_replicas=ready
    )


def queue(
    ns: str | None,
    health: str = "healthy",
    pending: int = 0,
    deps: list[DeploymentState] | None = None,
    ready_nodes: int = 4,
    oldest: float = 0.0,
    ts: int = NOW,
) -> ClusterState:
    return ClusterState(
        cluster="c",
        namespace=ns,
        ts_ms=ts,
        pending_pods=pending,
        running_pods=3,
        queue_health=health,  # type: ignore[arg-type]
        nodes_total=ready_nodes,
        nodes_ready=ready_nodes,
        deployments=deps or [],
        oldest_pending_s=oldest,
    )


def task(
    name: str,
    job: str,
    node: str | None,
    ns: str = "ns",
    event: str = "SCHEDULE",
    priority: int | None = None,
    mem: float | None = None,
    ts: int = NOW,
) -> TaskEvent:
    return TaskEvent(
        task_id=f"{ns}/{name}",
        job_id=job,
        task_index=0,
        ts_ms=ts,
        event=event,  # type: ignore[arg-type]
        source="kubernetes",
        machine=node,
        namespace=ns,
        priority=priority,
        memory_request=mem,
    )


def view_of(*inputs: Contract) -> ClusterView:
    view = ClusterView()
    for value in inputs:
        key = getattr(value, "node", None) or getattr(value, "target", None) or getattr(value, "task_id", None) or "k"
        view.update(TOPIC[type(value)], str(key), value)
    return view


@dataclass
class Case:
    name: str
    inputs: list[Contract]
    expect: list[tuple[str, str, dict[str, Any]]]  # (kind, target key, payload subset)
    settings: dict[str, Any] = field(default_factory=dict)
    score: float | None = None  # of the first expected proposal


def run(case: Case, module: Any, settings_cls: Any) -> None:
    view = view_of(*case.inputs)
    s = settings_cls(**case.settings)
    got = [c.proposal for c in module.evaluate(view, s, view.everything(), NOW)]
    summary = sorted((p.kind, p.target.key()) for p in got)
    assert summary == sorted((k, t) for k, t, _ in case.expect), [(p.kind, p.target.key(), p.payload) for p in got]
    for kind, target, payload in case.expect:
        p = next(p for p in got if p.kind == kind and p.target.key() == target)
        assert {k: p.payload.get(k) for k in payload} == payload, p.payload
        assert p.evidence, "every proposal cites its inputs"
        assert p.input_ts_ms is not None
        assert p.input_ts_ms <= NOW
    if case.score is not None:
        assert got[0].score == pytest.approx(case.score, abs=1e-3)


WEB = "Deployment/ns/web"

RELIABILITY = [
    Case("healthy deployment: nothing", [queue("ns", deps=[dep("ns", "web", 3, 3)])], []),
    Case(
        "replicas not ready: scale out by the missing ones (max_step)",
        [queue("ns", deps=[dep("ns", "web", 4, 1)])],
        [("scale_out", WEB, {"replicas": 6, "from_replicas": 4})],
        score=0.75,
    ),
    Case(
        "task at risk: replicate one more",
        [queue("ns", deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1"), risk("ns/web-1", 0.7, kind="task")],
        [("replicate", WEB, {"replicas": 4, "tasks_at_risk": 1})],
        score=0.7,
    ),
    Case(
        "node at risk: one more replica per task on it",
        [
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", "n1"),
            task("web-2", "web", "n1"),
            task("web-3", "web", "n2"),
            risk("n1", 0.8),
        ],
        [("replicate", WEB, {"replicas": 5, "tasks_at_risk": 2})],
    ),
    Case(
        "risk below threshold: nothing",
        [queue("ns", deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1"), risk("n1", 0.5)],
        [],
    ),
    Case(
        "one horizon asked for: its probability counts",
        [queue("ns", deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1"), risk("n1", 0.9)],
        [],
        settings={"risk_horizon_s": 300},
    ),
    Case(
        "pending task is not at risk of failing",
        [
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", None, event="SUBMIT"),
            risk("ns/web-1", 0.9, kind="task"),
        ],
        [],
    ),
    Case(
        "out-of-range task risk alone: nothing",
        [
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", "n1"),
            risk("ns/web-1", 0.95, kind="task", in_range=False),
        ],
        [],
    ),
    Case(
        "out-of-range node risk alone: nothing",
        [queue("ns", deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1"), risk("n1", 0.95, in_range=False)],
        [],
    ),
    Case(
        "out-of-range task risk, in-range node risk at threshold: the node's risk replicates",
        [
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", "n1"),
            risk("ns/web-1", 0.99, kind="task", in_range=False),
            risk("n1", 0.7),
        ],
        [("replicate", WEB, {"replicas": 4, "tasks_at_risk": 1})],
        score=0.7,
    ),
    Case("scaled to zero on purpose: nothing", [queue("ns", deps=[dep("ns", "web", 0, 0)])], []),
    Case(
        "stale inputs are ignored",
        [queue("ns", deps=[dep("ns", "web", 4, 1)], ts=NOW - 3_600_000)],
        [],
    ),
]

CALM = [regime("n1"), usage("n1", 0.1, 0.2), anomaly("n1", 0.1, False), risk("n1", 0.05)]
EFFICIENCY = [
    Case(
        "calm, idle, quiet queue, fully ready: scale in by one",
        [*CALM, queue("ns", deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1")],
        [("scale_in", WEB, {"replicas": 2, "from_replicas": 3})],
        settings={"consolidate_cpu_util": 0.05},
        score=0.9,
    ),
    Case(
        "contended node: no scale in",
        [
            regime("n1", "llc", worst=1.5),
            usage("n1", 0.1, 0.2),
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", "n1"),
        ],
        [],
    ),
    Case(
        "anomalous node: no scale in",
        [
            regime("n1"),
            usage("n1", 0.1, 0.2),
            anomaly("n1", 0.8, True),
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", "n1"),
        ],
        [],
    ),
    Case(
        "pods pending in the namespace: no scale in",
        [*CALM, queue("ns", "healthy", pending=2, deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1")],
        [],
        settings={"consolidate_cpu_util": 0.05},
    ),
    Case(
        "at min replicas: no scale in",
        [*CALM, queue("ns", deps=[dep("ns", "web", 1, 1)]), task("web-1", "web", "n1")],
        [],
        settings={"consolidate_cpu_util": 0.05},
    ),
    Case(
        "busy node: no scale in",
        [regime("n1"), usage("n1", 0.7, 0.2), queue("ns", deps=[dep("ns", "web", 3, 3)]), task("web-1", "web", "n1")],
        [],
    ),
    Case(
        "nearly idle calm node, enough other nodes: consolidate",
        [regime("n9"), usage("n9", 0.04, 0.1), queue(None, ready_nodes=4)],
        [("consolidate", "Node/_/n9", {"running_tasks": 0})],
        score=0.96,
    ),
    Case(
        "too few other ready nodes: no consolidation",
        [regime("n9"), usage("n9", 0.04, 0.1), queue(None, ready_nodes=2)],
        [],
    ),
    Case(
        "calm node with low memory use: balloon the pod's memory request",
        [regime("n1"), usage("n1", 0.5, 0.2), task("db-0", "db", "n1", mem=0.5)],
        [("memory_balloon", "Pod/ns/db-0", {"memory_request_mib": 409, "from_mib": 512})],
    ),
    Case(
        "unknown regime is no information: not calm, no consolidation",
        [unknown("n9"), usage("n9", 0.04, 0.1), queue(None, ready_nodes=4)],
        [],
    ),
    Case(
        "unknown regime (out of distribution): no scale in",
        [
            unknown("n1", ("out_of_distribution",)),
            usage("n1", 0.1, 0.2),
            anomaly("n1", 0.1, False),
            queue("ns", deps=[dep("ns", "web", 3, 3)]),
            task("web-1", "web", "n1"),
        ],
        [],
        settings={"consolidate_cpu_util": 0.05},
    ),
    Case(
        "unknown regime: no balloon",
        [unknown("n1", ("low_confidence",)), usage("n1", 0.5, 0.2), task("db-0", "db", "n1", mem=0.5)],
        [],
    ),
    Case(
        "calm label after an unknown one: calm again",
        [unknown("n9", ts=NOW - 1000), regime("n9"), usage("n9", 0.04, 0.1), queue(None, ready_nodes=4)],
        [("consolidate", "Node/_/n9", {"running_tasks": 0})],
    ),
    Case(
        "out-of-range high node risk is ignored: it does not block consolidation",
        [regime("n9"), usage("n9", 0.04, 0.1), risk("n9", 0.9, in_range=False), queue(None, ready_nodes=4)],
        [("consolidate", "Node/_/n9", {"running_tasks": 0})],
    ),
    Case(
        "in-range high node risk: not calm, no consolidation",
        [regime("n9"), usage("n9", 0.04, 0.1), risk("n9", 0.9), queue(None, ready_nodes=4)],
        [],
    ),
    Case(
        "request at the floor: no balloon",
        [regime("n1"), usage("n1", 0.5, 0.2), task("db-0", "db", "n1", mem=64 / 1024)],
        [],
    ),
]

ADMISSION = [
    Case("calm cluster: nothing", [regime("n1"), queue("ns")], []),
    Case(
        "confident contention: taint PreferNoSchedule",
        [regime("n1", "llc", conf=0.9, worst=1.8)],
        [
            (
                "taint",
                "Node/_/n1",
                {"key": "borg-orchestrator.io/contended", "value": "llc", "effect": "PreferNoSchedule"},
            )
        ],
        score=0.9 * 0.8 / 1.5,
    ),
    Case(
        "severe contention: taint NoSchedule",
        [regime("n1", "membw", conf=0.8, worst=3.0)],
        [("taint", "Node/_/n1", {"value": "membw", "effect": "NoSchedule"})],
        score=0.8,
    ),
    Case("unsure regime: no taint", [regime("n1", "llc", conf=0.3, worst=3.0)], []),
    Case("very anomalous node: cordon", [anomaly("n1", 0.97, True)], [("cordon", "Node/_/n1", {})], score=0.97),
    Case(
        "anomalous node: taint anomalous",
        [anomaly("n1", 0.7, True)],
        [("taint", "Node/_/n1", {"key": "borg-orchestrator.io/anomalous", "effect": "PreferNoSchedule"})],
    ),
    Case("node about to fail: cordon", [risk("n1", 0.95)], [("cordon", "Node/_/n1", {})], score=0.95),
    Case(
        "risky task on a severely contended node: evict it (and taint the node)",
        [regime("n1", "membw", conf=0.9, worst=3.0), task("web-1", "web", "n1"), risk("ns/web-1", 0.9, kind="task")],
        [("evict", "Pod/ns/web-1", {"node": "n1"}), ("taint", "Node/_/n1", {"effect": "NoSchedule"})],
    ),
    Case("unknown regime: no taint", [unknown("n1")], []),
    Case(
        "unknown after a contended label: the newer unknown wins, no taint",
        [regime("n1", "membw", conf=0.9, worst=3.0, ts=NOW - 1000), unknown("n1")],
        [],
    ),
    Case(
        "unknown regime, anomalous: the anomaly score of an unjudgeable window is not acted on",
        [unknown("n1", ("out_of_distribution",)), anomaly("n1", 0.7, True)],
        [],
    ),
    Case(
        "unknown regime, very anomalous: no cordon either",
        [unknown("n1"), anomaly("n1", 0.99, True)],
        [],
    ),
    Case(
        "unknown regime, in-range risk about to fail: cordon on the risk",
        [unknown("n1"), risk("n1", 0.95)],
        [("cordon", "Node/_/n1", {})],
        score=0.95,
    ),
    Case(
        "risky task on an unknown node: no evict, no taint",
        [unknown("n1"), task("web-1", "web", "n1"), risk("ns/web-1", 0.95, kind="task")],
        [],
    ),
    Case("out-of-range node risk alone: no cordon", [risk("n1", 0.99, in_range=False)], []),
    Case(
        "out-of-range task risk on a severely contended node: taint only, no evict",
        [
            regime("n1", "membw", conf=0.9, worst=3.0),
            task("web-1", "web", "n1"),
            risk("ns/web-1", 0.95, kind="task", in_range=False),
        ],
        [("taint", "Node/_/n1", {"effect": "NoSchedule"})],
    ),
    Case(
        "critical queue: hold admission, throttle what is pending",
        [
            queue("ns", "critical", pending=60, deps=[dep("ns", "web", 4, 2)], oldest=150.0),
            task("web-1", "web", "n1"),
            task("web-2", "web", "n1"),
            task("web-3", "web", None, event="SUBMIT"),
            task("web-4", "web", None, event="SUBMIT"),
        ],
        [
            ("hold_admission", "Namespace/_/ns", {"pending_pods": 60}),
            ("throttle", WEB, {"replicas": 3, "from_replicas": 4}),
        ],
        score=0.8,
    ),
    Case(
        "degraded queue, low-priority pending work: deprioritize it",
        [
            queue("ns", "degraded", pending=6, deps=[dep("ns", "batch", 4, 2)]),
            task("b-1", "batch", None, event="SUBMIT", priority=10),
            task("b-2", "batch", "n1", priority=10),
        ],
        [("deprioritize", "Deployment/ns/batch", {"tier": "deprioritized", "pending_tasks": 1})],
    ),
    Case(
        "degraded queue but nothing pending in the deployment: nothing",
        [queue("ns", "degraded", pending=6, deps=[dep("ns", "web", 4, 4)]), task("web-1", "web", "n1")],
        [],
    ),
]


@pytest.mark.parametrize("case", RELIABILITY, ids=lambda c: c.name)
def test_reliability_policy(case: Case) -> None:
    run(case, reliability_policy, ReliabilitySettings)


@pytest.mark.parametrize("case", EFFICIENCY, ids=lambda c: c.name)
def test_efficiency_policy(case: Case) -> None:
    run(case, efficiency_policy, EfficiencySettings)


@pytest.mark.parametrize("case", ADMISSION, ids=lambda c: c.name)
def test_admission_policy(case: Case) -> None:
    run(case, admission_policy, AdmissionSettings)


def test_proposal_ids_are_deterministic_and_evidence_names_the_inputs() -> None:
    inputs = [queue("ns", deps=[dep("ns", "web", 4, 1)])]
    a = reliability_policy.evaluate(view_of(*inputs), ReliabilitySettings(), view_of(*inputs).everything(), NOW)
    b = reliability_policy.evaluate(view_of(*inputs), ReliabilitySettings(), view_of(*inputs).everything(), NOW + 5)
    assert a[0].proposal.proposal_id == b[0].proposal.proposal_id
    ev = {(e.topic, e.field): e.value for e in a[0].proposal.evidence}
    assert ev == {("clusterstate.v1", "ready_replicas"): 1, ("clusterstate.v1", "desired_replicas"): 4}


def test_terminal_task_event_forgets_the_task() -> None:
    view = view_of(task("web-1", "web", "n1"), risk("ns/web-1", 0.9, kind="task"))
    assert "ns/web-1" in view.tasks
    scope = view.update("taskevents.v1", "ns/web-1", task("web-1", "web", "n1", event="FINISH"))
    assert "ns/web-1" not in view.tasks
    assert "ns/web-1" not in view.task_risk
    assert scope.nodes == {"n1"}
    assert view.tasks_on("n1") == []


def test_out_of_range_risk_is_never_cited() -> None:
    """Ignored means ignored: a consolidation next to an out-of-range risk cites no risk at all."""
    inputs = [regime("n9"), usage("n9", 0.04, 0.1), risk("n9", 0.2, in_range=False), queue(None, ready_nodes=4)]
    view = view_of(*inputs)
    got = efficiency_policy.evaluate(view, EfficiencySettings(), view.everything(), NOW)
    assert [c.proposal.kind for c in got] == ["consolidate"]
    assert RISK_TOPIC not in {e.topic for e in got[0].proposal.evidence}
    in_range = view_of(*inputs[:2], risk("n9", 0.2), inputs[3])
    cited = efficiency_policy.evaluate(in_range, EfficiencySettings(), in_range.everything(), NOW)
    assert RISK_TOPIC in {e.topic for e in cited[0].proposal.evidence}


def test_unknown_regime_is_stored_and_cited_nowhere() -> None:
    """The view keeps the unknown label (it replaces the older one); no proposal cites it."""
    view = view_of(regime("n1", "llc", worst=1.8, ts=NOW - 1000), unknown("n1"), anomaly("n1", 0.7, True))
    assert view.regimes["n1"].value.regime == "unknown"
    for module, settings in ((admission_policy, AdmissionSettings()), (efficiency_policy, EfficiencySettings())):
        assert module.evaluate(view, settings, view.everything(), NOW) == []  # type: ignore[attr-defined]
