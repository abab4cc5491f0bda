"""Agent C, admission: protect the cluster's queue and its nodes when things degrade.

Pure: (view, settings, scope, now) → candidates.

Nodes
- ``cordon`` a Node whose anomaly score reaches ``cordon_anomaly_score`` (and is
  flagged anomalous) or whose failure risk reaches ``cordon_risk``.
- ``taint`` a Node whose regime predicts a slowdown of at least
  ``taint_interference`` for some workload class with confidence
  ``min_confidence``: ``<taint_key>=<regime>``, effect PreferNoSchedule, NoSchedule
  from ``noschedule_interference``. An anomalous node below the cordon score gets
  ``<anomaly_taint_key>=true:PreferNoSchedule``.
Pods
- ``evict`` a running Pod whose failure risk reaches ``evict_risk`` while its node is
  contended at NoSchedule level (it is better restarted elsewhere).
Neutral on what the models cannot know (regimes.v2 / risk.v2)
- A node whose latest fresh regime is ``unknown`` is never tainted, cordoned or its pods
  evicted because of a model: no regime taint (unknown is not contention), and its anomaly
  score is not acted on either (the anomaly model scores the same window the regime model
  could not judge: counters missing or out of distribution). An in-range risk still cordons it.
- An out-of-range risk (``FailureRiskV2.in_range`` false) is ignored as if absent: it never
  cordons or evicts, and is not cited.
Deprioritize / throttle / hold admission come from queue health only: no regime, no risk.
Namespaces and Deployments (queue health from clusterstate.v1)
- ``hold_admission`` on a Namespace whose queue is ``critical``.
- ``deprioritize`` a Deployment with pending tasks below ``low_priority`` in a
  degraded or critical namespace; ``throttle`` (remove ``throttle_step`` replicas,
  never below its ready count or 1) any other Deployment with pending tasks there.
"""

from __future__ import annotations

from typing import Final

from services.agents.proposals import (
    Candidate,
    Cited,
    abstained,
    answered,
    deployment_ref,
    fresh,
    namespace_ref,
    node_ref,
    pod_ref,
    propose,
    risk_probability,
    usable_risk,
)
from services.agents.settings import AdmissionSettings
from services.agents.view import ClusterView, DeploymentKey, Scope, TaskInfo

AGENT: Final = "admission"


def evaluate(view: ClusterView, s: AdmissionSettings, scope: Scope, now_ms: int) -> list[Candidate]:
    out: list[Candidate] = []
    for node in sorted(scope.nodes):
        out.extend(_node(view, s, node, now_ms))
    for task_id in sorted(scope.tasks):
        task = view.tasks.get(task_id)
        if task is not None:
            out.extend(_evict(view, s, task, now_ms))
    namespaces = set(scope.namespaces) | {ns for ns, _ in scope.deployments}
    for ns in sorted(namespaces):
        out.extend(_namespace(view, s, ns, scope, now_ms))
    return out


def contention(view: ClusterView, s: AdmissionSettings, node: str, now_ms: int) -> tuple[float, list[Cited]] | None:
    """(worst predicted slowdown, evidence) of a confidently contended node, else None."""
    regime = answered(view.regimes.get(node), now_ms, s.max_input_age_s)
    if regime is None:  # missing, stale or unknown: no evidence of contention
        return None
    label = regime.value
    worst = max(label.interference.values(), default=1.0)
    if label.regime == "none" or label.confidence < s.min_confidence or worst < s.taint_interference:
        return None
    return worst, [
        (regime, "regime", label.regime),
        (regime, "max_interference", worst),
        (regime, "confidence", label.confidence),
    ]


def _node(view: ClusterView, s: AdmissionSettings, node: str, now_ms: int) -> list[Candidate]:
    out: list[Candidate] = []
    target = node_ref(node)
    unknown = abstained(view.regimes.get(node), now_ms, s.max_input_age_s)
    anomaly = None if unknown else view.anomalies.get(node)
    anomalous = anomaly is not None and fresh(anomaly, now_ms, s.max_input_age_s) and anomaly.value.is_anomaly
    risk = usable_risk(view.node_risk.get(node), now_ms, s.max_input_age_s)
    p = risk_probability(risk.value, None) if risk is not None else 0.0

    cordon_cited: list[Cited] = []
    cordon_score = 0.0
    if anomalous and anomaly is not None and anomaly.value.score >= s.cordon_anomaly_score:
        cordon_cited.append((anomaly, "score", anomaly.value.score))
        cordon_score = anomaly.value.score
    if risk is not None and p >= s.cordon_risk:
        cordon_cited.append((risk, "probability", p))
        cordon_score = max(cordon_score, p)
    if cordon_cited:
        out.append(
            propose(agent=AGENT, kind="cordon", target=target, score=cordon_score, cited=cordon_cited, now_ms=now_ms)
        )
    elif anomalous and anomaly is not None:
        out.append(
            propose(
                agent=AGENT,
                kind="taint",
                target=target,
                score=anomaly.value.score,
                cited=[(anomaly, "score", anomaly.value.score), (anomaly, "is_anomaly", True)],
                now_ms=now_ms,
                payload={"key": s.anomaly_taint_key, "value": "true", "effect": "PreferNoSchedule"},
            )
        )

    contended = contention(view, s, node, now_ms)
    if contended is not None:
        worst, cited = contended
        regime = view.regimes[node].value
        severe = worst >= s.noschedule_interference
        span = max(s.noschedule_interference - 1.0, 1e-6)
        out.append(
            propose(
                agent=AGENT,
                kind="taint",
                target=target,
                score=regime.confidence * min(1.0, (worst - 1.0) / span),
                cited=cited,
                now_ms=now_ms,
                payload={
                    "key": s.taint_key,
                    "value": regime.regime,
                    "effect": "NoSchedule" if severe else "PreferNoSchedule",
                },
            )
        )
    return out


def _evict(view: ClusterView, s: AdmissionSettings, task: TaskInfo, now_ms: int) -> list[Candidate]:
    if not task.running or task.machine is None or task.namespace is None:
        return []
    risk = usable_risk(view.task_risk.get(task.task_id), now_ms, s.max_input_age_s)
    if risk is None:
        return []
    p = risk_probability(risk.value, None)
    contended = contention(view, s, task.machine, now_ms)
    if p < s.evict_risk or contended is None or contended[0] < s.noschedule_interference:
        return []
    return [
        propose(
            agent=AGENT,
            kind="evict",
            target=pod_ref(task.task_id, task.namespace),
            score=p,
            cited=[(risk, "probability", p), *contended[1]],
            now_ms=now_ms,
            payload={"node": task.machine},
        )
    ]


def _namespace(view: ClusterView, s: AdmissionSettings, ns: str, scope: Scope, now_ms: int) -> list[Candidate]:
    queue = view.clusters.get(ns)
    if queue is None or not fresh(queue, now_ms, s.max_input_age_s):
        return []
    state = queue.value
    if state.queue_health == "healthy":
        return []
    qcited: list[Cited] = [
        (queue, "queue_health", state.queue_health),
        (queue, "pending_pods", state.pending_pods),
        (queue, "oldest_pending_s", state.oldest_pending_s),
    ]
    out: list[Candidate] = []
    if state.queue_health == "critical" and ns in scope.namespaces:
        out.append(
            propose(
                agent=AGENT,
                kind="hold_admission",
                target=namespace_ref(ns),
                score=min(1.0, 0.6 + 0.4 * min(1.0, state.oldest_pending_s / 300.0)),
                cited=qcited,
                now_ms=now_ms,
                payload={"pending_pods": state.pending_pods},
            )
        )
    for key in sorted(k for k in view.deployments if k[0] == ns):
        out.extend(_throttle(view, s, key, qcited, now_ms))
    return out


def _throttle(
    view: ClusterView, s: AdmissionSettings, key: DeploymentKey, qcited: list[Cited], now_ms: int
) -> list[Candidate]:
    seen = view.deployments[key]
    dep = seen.value
    pending = [t for t in view.tasks_of(key) if not t.running]
    if not pending or dep.desired_replicas <= 1:
        return []
    cited: list[Cited] = [
        *qcited,
        (seen, "desired_replicas", dep.desired_replicas),
        (seen, "ready_replicas", dep.ready_replicas),
    ]
    score = min(1.0, len(pending) / dep.desired_replicas)
    priorities = [t.priority for t in pending if t.priority is not None]
    if priorities and max(priorities) < s.low_priority:
        cited.append((pending[0].seen, "priority", max(priorities)))
        return [
            propose(
                agent=AGENT,
                kind="deprioritize",
                target=deployment_ref(*key),
                score=score,
                cited=cited,
                now_ms=now_ms,
                payload={"tier": "deprioritized", "pending_tasks": len(pending)},
            )
        ]
    floor = max(1, dep.ready_replicas)
    replicas = max(floor, dep.desired_replicas - s.throttle_step)
    if replicas >= dep.desired_replicas:
        return []
    return [
        propose(
            agent=AGENT,
            kind="throttle",
            target=deployment_ref(*key),
            score=score,
            cited=cited,
            now_ms=now_ms,
            payload={"replicas": replicas, "from_replicas": dep.desired_replicas, "pending_tasks": len(pending)},
        )
    ]
