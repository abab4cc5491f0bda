"""Agent A, reliability: add replicas where failure risk or SLA pressure is high.

Pure: (view, settings, scope, now) → candidates.

- ``replicate`` a Deployment when some of its running tasks are at risk: the task's own
  failure probability, or the risk of the node it runs on, is at least
  ``risk_threshold``. One extra replica per task at risk (at most ``max_step``);
  score = the worst probability seen.
- ``scale_out`` a Deployment whose ready/desired ratio is below ``sla_ready_ratio``
  (replicas are not coming up: SLA pressure). Adds the missing replicas (at most
  ``max_step``); score = 1 - ready/desired.

Deployments scaled to zero are left alone (scaled down on purpose). An out-of-range risk
(risk.v2, ``in_range`` false) is ignored as if absent: an out-of-range task risk falls back to
the node's risk, which counts only when it is in range itself.
"""

from __future__ import annotations

from typing import Final

from contracts.base import Contract
from services.agents.proposals import Candidate, Cited, deployment_ref, fresh, propose, risk_probability, usable_risk
from services.agents.settings import ReliabilitySettings
from services.agents.view import ClusterView, DeploymentKey, Scope, Seen

AGENT: Final = "reliability"


def evaluate(view: ClusterView, s: ReliabilitySettings, scope: Scope, now_ms: int) -> list[Candidate]:
    out: list[Candidate] = []
    for key in sorted(scope.deployments):
        seen = view.deployments.get(key)
        if seen is None or not fresh(seen, now_ms, s.max_input_age_s):
            continue
        out.extend(_for_deployment(view, s, key, seen, now_ms))
    return out


def _for_deployment(
    view: ClusterView, s: ReliabilitySettings, key: DeploymentKey, seen: Seen[Contract], now_ms: int
) -> list[Candidate]:
    dep = view.deployments[key].value
    desired = dep.desired_replicas
    if desired == 0:
        return []
    out: list[Candidate] = []
    target = deployment_ref(*key)

    at_risk: list[Cited] = []
    worst = 0.0
    for task in view.tasks_of(key):
        if not task.running:
            continue
        cited: Cited | None = None
        task_risk = usable_risk(view.task_risk.get(task.task_id), now_ms, s.max_input_age_s)
        if task_risk is not None:
            p = risk_probability(task_risk.value, s.risk_horizon_s)
            if p >= s.risk_threshold:
                cited = (task_risk, "probability", p)
        node_risk = usable_risk(view.node_risk.get(task.machine), now_ms, s.max_input_age_s) if task.machine else None
        if cited is None and node_risk is not None:
            p = risk_probability(node_risk.value, s.risk_horizon_s)
            if p >= s.risk_threshold:
                cited = (node_risk, "probability", p)
        if cited is not None:
            at_risk.append(cited)
            worst = max(worst, float(cited[2] or 0.0))
    if at_risk:
        step = min(len(at_risk), s.max_step)
        out.append(
            propose(
                agent=AGENT,
                kind="replicate",
                target=target,
                score=worst,
                cited=[(seen, "desired_replicas", desired), *at_risk],
                now_ms=now_ms,
                payload={"replicas": desired + step, "from_replicas": desired, "tasks_at_risk": len(at_risk)},
            )
        )

    ratio = dep.ready_replicas / desired
    if ratio < s.sla_ready_ratio:
        missing = desired - dep.ready_replicas
        out.append(
            propose(
                agent=AGENT,
                kind="scale_out",
                target=target,
                score=1.0 - ratio,
                cited=[(seen, "ready_replicas", dep.ready_replicas), (seen, "desired_replicas", desired)],
                now_ms=now_ms,
                payload={"replicas": desired + min(missing, s.max_step), "from_replicas": desired},
            )
        )
    return out
