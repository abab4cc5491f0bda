"""Agent B, efficiency: give resources back when demand is low and the cluster is calm.

Pure: (view, settings, scope, now) → candidates. A node is *calm* when its latest
regime predicts no slowdown above ``calm_interference`` for any workload class (or
the regime is ``none``), it is not anomalous and its failure risk is below
``calm_risk``; it is *idle* when its CPU and memory utilisation are below
``low_cpu_util`` / ``low_mem_util``. Missing inputs never count as calm or idle.
A regime ``unknown`` (regimes.v2: the model abstained) is no information, exactly as a
missing regime: the node is not calm, so nothing is consolidated away from it, scaled in
or ballooned because of it (and it never blocks another node's calm). An out-of-range
risk (risk.v2) is ignored as if absent: it neither blocks calm nor is cited.

- ``scale_in`` a Deployment by one replica when its queue is healthy with nothing
  pending, it is fully ready, it has more than ``min_replicas``, and every node
  running its tasks is calm and idle. Score = 1 - mean CPU utilisation of those nodes.
- ``consolidate`` a Node (cordon it so it drains as pods are replaced) when it is
  calm, below ``consolidate_cpu_util``, runs at most ``consolidate_max_tasks`` tasks
  and the cluster keeps at least ``min_ready_nodes`` other ready nodes — and, when the
  node has a *usable* load forecast (forecasts.v1: fresh, status ``ok``, covering every
  horizon up to ``forecast_horizon_s``), only when its p90 stays below ``forecast_cpu_p90``
  (CPU) and ``forecast_mem_p90`` (memory) at every horizon up to ``forecast_horizon_s``
  (30 min): a node about to get busy is not drained. A node without a usable forecast
  (none yet, stale, ``unknown``, or too short) is judged as before the forecaster existed.
- ``memory_balloon`` a Pod on a calm node with low memory utilisation: shrink its
  memory request to ``balloon_factor`` of the current one (never below
  ``balloon_min_mib``). Payload carries the absolute target, so a replay is idempotent.
"""

from __future__ import annotations

from typing import Final

from services.agents.proposals import (
    Candidate,
    Cited,
    answered,
    deployment_ref,
    fresh,
    node_ref,
    pod_ref,
    propose,
    risk_probability,
    usable_risk,
)
from services.agents.settings import EfficiencySettings
from services.agents.view import ClusterView, DeploymentKey, Scope, TaskInfo

AGENT: Final = "efficiency"


def evaluate(view: ClusterView, s: EfficiencySettings, scope: Scope, now_ms: int) -> list[Candidate]:
    out: list[Candidate] = []
    for key in sorted(scope.deployments):
        out.extend(_scale_in(view, s, key, now_ms))
    for node in sorted(scope.nodes):
        out.extend(_consolidate(view, s, node, now_ms))
    for task_id in sorted(scope.tasks):
        task = view.tasks.get(task_id)
        if task is not None:
            out.extend(_balloon(view, s, task, now_ms))
    return out


def calm(view: ClusterView, s: EfficiencySettings, node: str, now_ms: int) -> list[Cited] | None:
    """Evidence that a node is calm, or None when it is not (or unknown)."""
    regime = answered(view.regimes.get(node), now_ms, s.max_input_age_s)
    if regime is None:  # missing, stale or unknown: calm is never assumed
        return None
    worst = max(regime.value.interference.values(), default=1.0)
    if regime.value.regime != "none" and worst > s.calm_interference:
        return None
    cited: list[Cited] = [(regime, "regime", regime.value.regime), (regime, "max_interference", worst)]
    anomaly = view.anomalies.get(node)
    if anomaly is not None and fresh(anomaly, now_ms, s.max_input_age_s):
        if anomaly.value.is_anomaly:
            return None
        cited.append((anomaly, "score", anomaly.value.score))
    risk = usable_risk(view.node_risk.get(node), now_ms, s.max_input_age_s)
    if risk is not None:
        p = risk_probability(risk.value, None)
        if p >= s.calm_risk:
            return None
        cited.append((risk, "probability", p))
    return cited


def idle(view: ClusterView, s: EfficiencySettings, node: str, now_ms: int) -> tuple[float, list[Cited]] | None:
    """(cpu utilisation, evidence) when a node is idle, else None."""
    state = view.nodestate.get(node)
    if state is None or not fresh(state, now_ms, s.max_input_age_s):
        return None
    ns = state.value
    if ns.cpu_util >= s.low_cpu_util or ns.mem_util >= s.low_mem_util:
        return None
    return ns.cpu_util, [(state, "cpu_util", ns.cpu_util), (state, "mem_util", ns.mem_util)]


def forecast_outlook(view: ClusterView, s: EfficiencySettings, node: str,
                     now_ms: int) -> tuple[bool, list[Cited]] | None:
    """(stays low, evidence) from the node's load forecast; None when it has no usable one.

    Usable: fresh, status ``ok`` and with a p90 for CPU and memory at every horizon it lists up to
    ``forecast_horizon_s``, the longest of which reaches it. Low: every one of those p90s is below
    ``forecast_cpu_p90`` / ``forecast_mem_p90``. The evidence is the worst p90 of each resource."""
    seen = view.forecasts.get(node)
    if seen is None or not fresh(seen, now_ms, s.max_input_age_s) or seen.value.status != "ok":
        return None
    horizons = sorted({q.horizon_s for q in seen.value.quantiles if q.horizon_s <= s.forecast_horizon_s})
    if not horizons or horizons[-1] != s.forecast_horizon_s:
        return None
    worst: dict[str, float] = {}
    for resource in ("cpu", "memory"):
        values = [seen.value.p90(resource, h) for h in horizons]
        if any(v is None for v in values):
            return None
        worst[resource] = max(v for v in values if v is not None)
    low = worst["cpu"] < s.forecast_cpu_p90 and worst["memory"] < s.forecast_mem_p90
    horizon = s.forecast_horizon_s
    return low, [(seen, f"cpu_p90_max_{horizon}s", worst["cpu"]), (seen, f"memory_p90_max_{horizon}s", worst["memory"])]


def _queue_quiet(view: ClusterView, namespace: str | None, now_ms: int, s: EfficiencySettings) -> list[Cited] | None:
    queue = view.queue(namespace)
    if queue is None or not fresh(queue, now_ms, s.max_input_age_s):
        return None
    if queue.value.queue_health != "healthy" or queue.value.pending_pods > 0:
        return None
    return [(queue, "queue_health", queue.value.queue_health), (queue, "pending_pods", queue.value.pending_pods)]


def _scale_in(view: ClusterView, s: EfficiencySettings, key: DeploymentKey, now_ms: int) -> list[Candidate]:
    seen = view.deployments.get(key)
    if seen is None or not fresh(seen, now_ms, s.max_input_age_s):
        return []
    dep = seen.value
    if dep.desired_replicas <= max(s.min_replicas, 0) or dep.ready_replicas < dep.desired_replicas:
        return []
    quiet = _queue_quiet(view, key[0], now_ms, s)
    if quiet is None:
        return []
    nodes = sorted({t.machine for t in view.tasks_of(key) if t.running and t.machine})
    if not nodes:
        return []
    cited: list[Cited] = [(seen, "desired_replicas", dep.desired_replicas), *quiet]
    utils: list[float] = []
    for node in nodes:
        node_calm = calm(view, s, node, now_ms)
        node_idle = idle(view, s, node, now_ms)
        if node_calm is None or node_idle is None:
            return []
        utils.append(node_idle[0])
        cited += node_calm + node_idle[1]
    return [
        propose(
            agent=AGENT,
            kind="scale_in",
            target=deployment_ref(*key),
            score=1.0 - sum(utils) / len(utils),
            cited=cited,
            now_ms=now_ms,
            payload={"replicas": dep.desired_replicas - 1, "from_replicas": dep.desired_replicas},
        )
    ]


def _consolidate(view: ClusterView, s: EfficiencySettings, node: str, now_ms: int) -> list[Candidate]:
    node_calm = calm(view, s, node, now_ms)
    node_idle = idle(view, s, node, now_ms)
    if node_calm is None or node_idle is None or node_idle[0] >= s.consolidate_cpu_util:
        return []
    running = [t for t in view.tasks_on(node) if t.running]
    if len(running) > s.consolidate_max_tasks:
        return []
    cluster = view.clusters.get(None)
    if cluster is None or not fresh(cluster, now_ms, s.max_input_age_s):
        return []
    # The node itself is among the ready ones: the rest must still be enough.
    if cluster.value.nodes_ready - 1 < s.min_ready_nodes or cluster.value.queue_health != "healthy":
        return []
    outlook = forecast_outlook(view, s, node, now_ms)
    if outlook is not None and not outlook[0]:
        return []
    cited: list[Cited] = [
        *node_calm,
        *node_idle[1],
        (cluster, "nodes_ready", cluster.value.nodes_ready),
        (cluster, "queue_health", cluster.value.queue_health),
        *(outlook[1] if outlook is not None else []),
    ]
    return [
        propose(
            agent=AGENT,
            kind="consolidate",
            target=node_ref(node),
            score=1.0 - node_idle[0],
            cited=cited,
            now_ms=now_ms,
            payload={"running_tasks": len(running)},
        )
    ]


def _balloon(view: ClusterView, s: EfficiencySettings, task: TaskInfo, now_ms: int) -> list[Candidate]:
    if not task.running or task.machine is None or task.namespace is None or not task.memory_request_gib:
        return []
    current_mib = round(task.memory_request_gib * 1024)
    target_mib = max(s.balloon_min_mib, int(current_mib * s.balloon_factor))
    if target_mib >= current_mib:
        return []
    node_calm = calm(view, s, task.machine, now_ms)
    state = view.nodestate.get(task.machine)
    if node_calm is None or state is None or not fresh(state, now_ms, s.max_input_age_s):
        return []
    if state.value.mem_util >= s.low_mem_util:
        return []
    cited: list[Cited] = [
        (task.seen, "memory_request", task.memory_request_gib),
        (state, "mem_util", state.value.mem_util),
        *node_calm,
    ]
    return [
        propose(
            agent=AGENT,
            kind="memory_balloon",
            target=pod_ref(task.task_id, task.namespace),
            score=1.0 - state.value.mem_util,
            cited=cited,
            now_ms=now_ms,
            payload={"memory_request_mib": target_mib, "from_mib": current_mib},
        )
    ]
