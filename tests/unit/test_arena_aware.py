"""The extender and oracle policies on tiny hand-built nodes."""

from __future__ import annotations

import numpy as np
import pytest

from services.scheduler_extender.scoring import RegimeIn
from simulator.arena.aware import ArenaView, ExtenderPolicy, OraclePolicy, TaskPod, placement_cost
from simulator.arena.kube_default import NodeResources, PodRequest
from simulator.arena.policies import make_policy
from simulator.workloads import CLASS_INDEX, KINDS, SENSITIVITY_MATRIX, excess

GIB = 1 << 30


def _resident(view: ArenaView, node: int, kinds: list[str], ls: list[bool]) -> None:
    classes = np.array([CLASS_INDEX[KINDS[k].workload_class] for k in kinds], dtype=np.int64)
    ex = excess(np.array([KINDS[k].pressure for k in kinds], dtype=np.float64))
    if len(kinds) > 1:
        m = 1.0 + SENSITIVITY_MATRIX[classes] @ ex.T
        np.fill_diagonal(m, 1.0)
        slow = m.max(axis=1)
    else:
        slow = np.ones(len(kinds))
    view.classes[node], view.excess[node], view.slowdown[node] = classes, ex, slow
    view.latency_sensitive[node] = np.array(ls, dtype=bool)


def _pod(kind: str, ls: bool = True) -> TaskPod:
    return TaskPod(1000, 2 * GIB, KINDS[kind].workload_class, KINDS[kind].pressure, ls)


def test_placement_cost_hand_computed() -> None:
    view = ArenaView(2)
    _resident(view, 0, ["spmv"], [False])
    _resident(view, 1, ["web_frontend"], [True])
    # search_index beside spmv: sees 1 + 1.2 * 0.26667 + 0.4 * 0.8 = 1.64 (> 1.25: itself pushed over);
    # spmv beside search_index: 1 + 0.3 * 0.6 + 0.1 * 0.066667 = 1.186667 (added 0.186667)
    pushed, cost = placement_cost(view, 0, "llc_sensitive", KINDS["search_index"].pressure, latency_sensitive=True)
    assert pushed == 1 and cost == pytest.approx(0.64 + 0.186667, abs=1e-5)
    # beside web_frontend (excess 0, 0, 0.066667, 0.666667): 1 + 0.2 * 0.066667 + 0.1 * 0.666667 = 1.08;
    # web_frontend (frontend_bound 0.15, 0.10, 0.40, 1.00) beside search_index: 1 + 0.09 + 0.026667
    pushed, cost = placement_cost(view, 1, "llc_sensitive", KINDS["search_index"].pressure, latency_sensitive=True)
    assert pushed == 0 and cost == pytest.approx(0.08 + 0.116667, abs=1e-5)
    assert placement_cost(ArenaView(1), 0, "llc_sensitive", (0.9, 0.9, 0.9, 0.9)) == (0, 0.0)


def test_oracle_avoids_the_aggressor_that_kube_default_prefers() -> None:
    view = ArenaView(2)
    _resident(view, 0, ["spmv"], [False])
    _resident(view, 1, ["web_frontend"], [True])
    nodes = [NodeResources.with_pods(16000, 64 * GIB, [PodRequest(1000, 2 * GIB)]),
             NodeResources.with_pods(16000, 64 * GIB, [PodRequest(8000, 32 * GIB)])]
    pod = _pod("search_index")
    assert make_policy("kube-default", 1).choose(pod, nodes) == 0  # less allocated
    assert OraclePolicy(1, view).choose(pod, nodes) == 1


def test_oracle_ties_go_to_kube_default() -> None:
    view = ArenaView(2)  # both empty: cost 0 everywhere
    nodes = [NodeResources.with_pods(16000, 64 * GIB, [PodRequest(4000, 8 * GIB)]), NodeResources(16000, 64 * GIB)]
    assert OraclePolicy(1, view).choose(_pod("spmv"), nodes) == 1
    assert OraclePolicy(1, view).choose(TaskPod(17000, GIB), nodes) is None


def _label(regime: str, conf: float, slow: float, ts: int = 1_000) -> RegimeIn:
    classes = ("cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound")
    return RegimeIn(ts, regime, conf, tuple((c, slow) for c in classes))


def test_extender_filters_a_predicted_slow_node() -> None:
    view = ArenaView(2, now_ms=5_000)
    view.labels = [_label("llc", 0.9, 1.6), _label("none", 0.9, 1.0)]
    nodes = [NodeResources(16000, 64 * GIB), NodeResources.with_pods(16000, 64 * GIB, [PodRequest(8000, 32 * GIB)])]
    policy = ExtenderPolicy(1, view)
    assert policy.choose(_pod("search_index"), nodes) == 1
    assert policy.filtered == 1
    view.labels = [_label("llc", 0.9, 1.6), _label("llc", 0.9, 1.7)]
    assert policy.choose(_pod("search_index"), nodes) is None  # every node filtered: the pod waits


def test_extender_prefers_a_known_quiet_node_over_an_abstained_one() -> None:
    # none/1.0: penalty 0.25 * 0.5 + 0.15 * 0.5 = 0.2 -> score 8; unknown: 0.6 * 0.5 + 0.2 = 0.5 -> 5;
    # 3 points * weight 5 * 10 = 150 outweighs kube-default's preference for the emptier node
    view = ArenaView(2, now_ms=5_000)
    view.labels = [RegimeIn(1_000, "unknown", 0.0, (), ("low_confidence",)), _label("none", 0.9, 1.0)]
    nodes = [NodeResources(16000, 64 * GIB), NodeResources.with_pods(16000, 64 * GIB, [PodRequest(8000, 32 * GIB)])]
    assert make_policy("kube-default", 1).choose(_pod("spmv"), nodes) == 0
    policy = ExtenderPolicy(1, view)
    assert [c.scores[CLASS_INDEX["memory_bound"]] for c in policy.cards()] == [5, 8]
    assert policy.choose(_pod("spmv"), nodes) == 1
    # a stale label (older than 120 s) is no information either: both nodes neutral, kube-default decides
    view.now_ms = 1_000 + 121_000
    assert policy.choose(_pod("spmv"), nodes) == 0


def test_extender_corunner_term_keeps_a_frontend_pod_off_a_frontend_node() -> None:
    # nothing known from the model (both unknown: card penalty 0.5). Node 0 holds web_frontend (emptier:
    # kube-default's pick), node 1 spmv. Co-runner harm for a frontend pod (table from the training kinds):
    # node 0: own 1.417 - 1 + the resident's 1.417 - 1 = 0.834 -> penalty 1; node 1: own 1.062 - 1 = 0.062
    # (spmv is batch) -> 0.124. Weight 1: scores 0 and round(8.76) = 9; 9 points * 5 * 10 outweigh the fit.
    from services.scheduler_extender.scoring import ScoringConfig

    view = ArenaView(2, now_ms=5_000)
    _resident(view, 0, ["web_frontend"], [True])
    _resident(view, 1, ["spmv"], [False])
    nodes = [NodeResources.with_pods(16000, 64 * GIB, [PodRequest(1000, 2 * GIB)]),
             NodeResources.with_pods(16000, 64 * GIB, [PodRequest(8000, 32 * GIB)])]
    pod = _pod("web_frontend")
    assert ExtenderPolicy(1, view).choose(pod, nodes) == 0  # no co-runner term: both 5, kube-default decides
    policy = ExtenderPolicy(1, view, ScoringConfig(weight_corunner=1.0))
    fe = CLASS_INDEX["frontend_bound"]
    assert [policy.node_score(i, fe, policy.cards()) for i in (0, 1)] == [0, 9]
    assert policy.choose(pod, nodes) == 1
