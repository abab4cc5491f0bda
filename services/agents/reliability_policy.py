"""Agent A, reliability: add replicas where failure risk or SLA pressure is high.

Pure: (view, settings, scope, now) → candidates — except that the interference moves note in the view when
they last re-planned and which pods they proposed (``moves_planned_ms``, ``moved``).

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

- ``evict`` a pod whose co-runners push a latency-sensitive pod past ``move_slo_slowdown``
  (``AGENT_RELIABILITY_INTERFERENCE``, off by default): the rule of :mod:`services.agents.interference_policy`
  on the pods the Kubernetes API lists joined to their podpressure.v1 estimates
  (:mod:`services.agents.pod_loads`), re-planned at most every ``move_every_s`` when an estimate arrives.
  A pod (a Job's pods count as one) is proposed at most once.
"""

from __future__ import annotations

from typing import Final, get_args

from prometheus_client import Counter, Gauge

from contracts.base import Contract
from services.agents import interference_policy
from services.agents.pod_loads import PodMeta, node_loads
from services.agents.proposals import Candidate, Cited, deployment_ref, fresh, propose, risk_probability, usable_risk
from services.agents.settings import ReliabilitySettings
from services.agents.view import ClusterView, DeploymentKey, Scope, Seen

AGENT: Final = "reliability"
PLANS = Counter("borg_agent_interference_plans_total", "Interference re-plans of the cluster")
NODES = Gauge("borg_agent_interference_nodes", "Nodes at the last re-plan: known (every pod answered) or not",
              ["state"])
HOT = Gauge("borg_agent_interference_hot_nodes", "Known nodes where a latency-sensitive pod is predicted over the SLO")
MOVES = Counter("borg_agent_interference_moves_total", "Interference evict proposals made")
VERDICTS = Gauge("borg_agent_interference_verdict_nodes", "Known nodes at the last re-plan by what the rule "
                 "concluded: calm, move, no_eligible, no_relief or no_target", ["verdict"])


def evaluate(view: ClusterView, s: ReliabilitySettings, scope: Scope, now_ms: int) -> list[Candidate]:
    out: list[Candidate] = []
    for key in sorted(scope.deployments):
        seen = view.deployments.get(key)
        if seen is None or not fresh(seen, now_ms, s.max_input_age_s):
            continue
        out.extend(_for_deployment(view, s, key, seen, now_ms))
    if s.interference and scope.nodes:
        out.extend(interference_moves(view, s, now_ms))
    return out


def move_identity(pod: PodMeta) -> str:
    """What a move is remembered by: a Job's replacement pod is the same task (never moved twice)."""
    return pod.owner if pod.owner.split("/", 1)[-1].startswith("Job/") else pod.key


def interference_moves(view: ClusterView, s: ReliabilitySettings, now_ms: int) -> list[Candidate]:
    """``evict`` proposals from the interference rule, at most once per ``move_every_s``."""
    if (view.kube_listed_ms is None or now_ms - view.kube_listed_ms > s.pressure_max_age_s * 1000
            or now_ms - view.moves_planned_ms < s.move_every_s * 1000):
        return []  # no pod list, or one too old to trust (the API server unreachable), or planned just now
    view.moves_planned_ms = now_ms
    estimates = {uid: seen.value for uid, seen in view.pod_pressure.items()}
    loads = node_loads(view.kube_pods, view.kube_nodes, estimates, now_ms, s.pressure_max_age_s)
    settings = interference_policy.MoveSettings(slo_slowdown=s.move_slo_slowdown, min_age_s=s.move_min_age_s,
                                                max_per_round=s.move_max_per_round, score=s.move_score)
    by_key = {p.key: p for p in view.kube_pods}
    moved = frozenset(k for k, p in by_key.items() if move_identity(p) in view.moved)
    assessed = interference_policy.assess(loads, settings, moved)
    moves = assessed.moves[: settings.max_per_round]
    PLANS.inc()
    for verdict in get_args(interference_policy.Verdict):
        VERDICTS.labels(verdict).set(assessed.verdicts.count(verdict))
    NODES.labels("known").set(len(loads))
    NODES.labels("unknown").set(len(view.kube_nodes) - len(loads))
    HOT.set(len(assessed.verdicts) - assessed.verdicts.count("calm"))
    MOVES.inc(len(moves))
    out: list[Candidate] = []
    for move, candidate in zip(moves, interference_policy.proposals(moves, settings, now_ms), strict=True):
        pod = by_key[move.pod.key]
        view.moved[move_identity(pod)] = now_ms
        while len(view.moved) > s.max_tasks:
            view.moved.pop(next(iter(view.moved)))
        seen = view.pod_pressure.get(pod.uid)
        out.append(Candidate(proposal=candidate.proposal, sources=(seen,) if seen is not None else ()))
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
