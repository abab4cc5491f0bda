"""The arena's ``orchestrator``: the agents' and the referee's pure code acting on a tiny synthetic world.

Regime labels are set by hand (no counters, no ONNX model): what the regime stage would have published.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest

from contracts.models import FailureRiskV2, HorizonRisk
from services.agents.view import ClusterView, Seen
from services.scheduler_extender.scoring import RegimeIn
from simulator.arena.arrivals import Arrival
from simulator.arena.aware import ArenaView, TaskPod
from simulator.arena.kube_default import NodeResources
from simulator.arena.loop import NODE_MEMORY, NODE_MILLI_CPU, Arena
from simulator.arena.orchestrator import (
    CounterEstimator,
    MonitoredEstimator,
    NodeControl,
    Orchestrator,
    OrchestratorConfig,
    OrchestratorPolicy,
    monitored_readings,
    taint_toleration_scores,
    task_key,
)
from simulator.arena.report import metrics

EPOCH = 1_700_000_000_000
CLASSES = ("cpu_bound", "memory_bound", "llc_sensitive", "frontend_bound")


def contended(slowdown: float = 3.0, confidence: float = 0.95) -> RegimeIn:
    return RegimeIn(EPOCH, "membw", confidence, tuple((c, slowdown) for c in CLASSES))


def calm() -> RegimeIn:
    return RegimeIn(EPOCH, "none", 0.9, tuple((c, 1.0) for c in CLASSES))


def unknown() -> RegimeIn:
    return RegimeIn(EPOCH, "unknown", 0.0, (), ("low_confidence",))


def task(i: int, job: int = 7, submit_s: float = 0.0, work_s: float = 100.0, cpu: float = 0.05) -> Arrival:
    return Arrival(i, job, submit_s, work_s, cpu, 0.02, True, "search_index", "llc_sensitive", 0.5)


def world(arrivals: list[Arrival], nodes: int, labels: list[RegimeIn | None], *, horizon_s: float = 150.0,
          cfg: OrchestratorConfig | None = None,
          risk: Callable[[ClusterView, Arena, int], None] | None = None) -> tuple[Arena, Orchestrator]:
    view = ArenaView(nodes, now_ms=EPOCH, labels=list(labels))
    policy = OrchestratorPolicy(1, view, NodeControl(nodes))
    orch = Orchestrator([f"n{i}" for i in range(nodes)], policy, cfg=cfg, epoch_ms=EPOCH, risk=risk)
    return Arena(arrivals, nodes, policy, view, horizon_s=horizon_s, tick_s=10.0, controller=orch), orch


def at_risk(p: float = 0.9, *, from_s: float = 0.0, label: RegimeIn | None = None,
            until_s: float = 1e9) -> Callable[[ClusterView, Arena, int], None]:
    """A stand-in risk stage: every running task at failure probability ``p`` from ``from_s`` to ``until_s``;
    optionally node 0's label is ``label`` over that span and calm after it (the agents read it a step later)."""

    def hook(view: ClusterView, arena: Arena, now_ms: int) -> None:
        t_s = (now_ms - EPOCH) / 1000
        if t_s >= until_s:
            arena.view.labels[0] = calm()._replace(ts_ms=now_ms)
            view.task_risk.clear()
        if not from_s <= t_s < until_s:
            return
        if label is not None:
            arena.view.labels[0] = label._replace(ts_ms=now_ms)
        for tasks in arena.residents:
            for t in tasks:
                key = task_key(t.arrival)
                risk = FailureRiskV2(target_kind="task", target=key, ts_ms=now_ms,
                                     horizons=[HorizonRisk(horizon_s=600, probability=p)], model_version="test",
                                     input_ts_ms=now_ms)
                view.task_risk[key] = Seen(risk, "risk.v2", key, now_ms, now_ms)

    return hook


def test_a_contended_node_is_tainted_and_then_gets_no_placements() -> None:
    arrivals = [task(i, job=i, submit_s=10.0 * i) for i in range(8)]
    arena, orch = world(arrivals, 2, [contended(), calm()])
    out = arena.run()
    assert orch.actions["taint"] == 1  # NoSchedule (predicted 3.0x >= 2.5), set before the first placement
    assert orch.control.taints[0][("borg-orchestrator.io/contended", "NoSchedule")][0] == "membw"
    assert {f.node for f in out.finished} == {1}
    assert orch.policy.excluded == len(arrivals)  # every placement had node 0 feasible and excluded it


def test_taints_exclude_or_repel_even_where_the_extender_is_neutral() -> None:
    # no labels at all: the extender scores both nodes alike; node 0 is empty, so kube-default prefers it
    view = ArenaView(2)
    control = NodeControl(2)
    policy = OrchestratorPolicy(1, view, control)
    loaded = NodeResources.with_pods(NODE_MILLI_CPU, NODE_MEMORY, [TaskPod(8000, 8 << 30)])
    nodes = [NodeResources(NODE_MILLI_CPU, NODE_MEMORY), loaded]
    pod = TaskPod(1000, 1 << 30, "llc_sensitive")
    assert policy.choose(pod, nodes) == 0
    control.taints[0][("k", "PreferNoSchedule")] = ("membw", 1e9)
    assert policy.choose(pod, nodes) == 1  # TaintToleration: 3 x 100 for node 1, 0 for node 0
    control.taints[0] = {("k", "NoSchedule"): ("membw", 1e9)}
    control.taints[1] = {("k", "NoSchedule"): ("membw", 1e9)}
    assert policy.choose(pod, nodes) is None  # nowhere to go: the pod stays pending
    control.expire(1e9)
    assert policy.choose(pod, nodes) == 0


def test_taint_toleration_normalisation_matches_upstream() -> None:
    # helper.DefaultNormalizeScore(100, reverse=true): 100 - 100 * count / max count; all 100 when no taint
    assert taint_toleration_scores([0, 0]) == [100, 100]
    assert taint_toleration_scores([0, 1, 2]) == [100, 50, 0]
    assert taint_toleration_scores([1, 3]) == [67, 0]


def test_an_eviction_requeues_the_task_and_is_counted_but_never_the_jobs_last() -> None:
    arrivals = [task(i) for i in range(3)]  # one job, three tasks, all on the only node
    hook = at_risk(0.9, from_s=20.0, label=contended(), until_s=40.0)
    # no label before: a calm node would have its pods ballooned, which spends the disruption budget
    arena, orch = world(arrivals, 1, [None], risk=hook, cfg=OrchestratorConfig(taint_ttl_s=40.0))
    out = arena.run()
    assert orch.actions["evict"] == 2 and orch.refused["evict"] >= 1  # the third is the job's last task
    m = metrics(out)
    assert m["evictions"] == 2.0 and m["actions_evict"] == 2.0
    restarted = sorted((f for f in out.finished if f.start_s > 0), key=lambda f: f.start_s)
    assert len(restarted) == 2
    # re-queued and placed again once the NoSchedule taint expired; the work done before was lost
    for f in restarted:
        assert f.start_s >= 30.0 + 40.0 and f.finish_s - f.start_s >= f.arrival.work_s
    assert len(out.finished) == 3 and out.unplaced == 0


def test_the_disruption_budget_caps_evictions() -> None:
    arrivals = [task(i, cpu=0.05) for i in range(10)]
    arena, orch = world(arrivals, 1, [None], risk=at_risk(0.95, from_s=20.0, label=contended()),
                        horizon_s=60.0)
    out = arena.run()
    # nine tasks are evictable (PDB keeps one), the referee allows 5 disruptions per 300 s
    assert orch.ref.max_disruptions == 5 and orch.ref.disruption_window_s == 300.0
    assert out.extra["evictions"] == 5.0
    assert orch.proposals["evict"] >= 9


def test_unknown_regimes_never_cause_an_action() -> None:
    arrivals = [task(i) for i in range(4)]
    arena, orch = world(arrivals, 2, [unknown(), unknown()], risk=at_risk(0.99), horizon_s=60.0)
    out = arena.run()
    for kind in ("taint", "cordon", "evict", "consolidate", "memory_balloon"):
        assert orch.actions[kind] == 0 and orch.proposals[kind] == 0
    assert out.extra["evictions"] == 0.0
    assert all(not t for t in orch.control.taints) and orch.policy.excluded == 0


def test_calm_nodes_pods_are_ballooned_and_that_spends_the_disruption_budget() -> None:
    arrivals = [task(i) for i in range(3)]
    arena, orch = world(arrivals, 1, [calm()], risk=at_risk(0.9, from_s=20.0, label=contended()))
    out = arena.run()
    # three balloons (a disruptive action) at the start leave 2 of the 5 disruptions for evictions
    assert orch.actions["memory_balloon"] == 3 and orch.actions["evict"] == 2
    assert out.extra["evictions"] == 2.0


def test_an_admission_hold_delays_new_arrivals() -> None:
    # 3 big tasks fill the only node, so later submissions queue: 50+ pending pods = critical queue
    big = [Arrival(i, i, 0.0, 400.0, 0.3, 0.02, True, "search_index", "llc_sensitive", 0.5) for i in range(3)]
    waves = [Arrival(100 + i, 100 + i, 10.0, 10.0, 0.3, 0.02, True, "search_index", "llc_sensitive", 0.5)
             for i in range(60)]
    late = [Arrival(500, 500, 30.0, 10.0, 0.01, 0.01, True, "search_index", "llc_sensitive", 0.5)]
    arena, orch = world(big + waves + late, 1, [None], cfg=OrchestratorConfig(hold_s=100.0), horizon_s=60.0)
    arena.max_ticks = 6
    arena.run()
    assert orch.actions["hold_admission"] == 1 and "arena-ls" in orch.control.holds
    held = [a.task_id for a in orch.held_back]
    assert 500 in held  # submitted after the hold began: rejected until it lifts
    assert all(w.task_id not in held for w in waves)  # pending before the hold: still admitted


def test_kinds_left_out_of_the_actions_are_refused_and_release_their_slot() -> None:
    arrivals = [task(i, job=i, submit_s=10.0 * i) for i in range(4)]
    arena, orch = world(arrivals, 2, [contended(), calm()], cfg=OrchestratorConfig(actions=frozenset({"evict"})),
                        horizon_s=60.0)
    arena.run()
    assert orch.proposals["taint"] >= 1 and orch.actions["taint"] == 0 and orch.refused["taint"] >= 1
    assert all(not t for t in orch.control.taints)
    assert not orch.state.actions  # settle() gave the rate-limit slots back


# ---------------------------------------------------------------------------- corrective moves (issue 21)
def _crowded(moves: bool, load_term: bool = False) -> tuple[Arena, Orchestrator]:
    """Two latency-sensitive llc pods and two memory hogs start together on node 0 (node 1 cordoned for 30 s):
    each llc pod is slowed 1 + 1.2·0.2 + 0.4·0.8667 = 1.59x by the hogs (kind stream_triad at intensity 1)."""
    ls = [Arrival(i, 7, 0.0, 100.0, 0.05, 0.02, True, "search_index", "llc_sensitive", 0.5) for i in (0, 1)]
    hogs = [Arrival(i, 8, 0.0, 100.0, 0.05, 0.02, False, "stream_triad", "memory_bound", 1.0) for i in (2, 3)]
    from services.agents.interference_policy import MoveSettings

    cfg = OrchestratorConfig(moves=MoveSettings() if moves else None, load_term=load_term, pod_noise=0.0)
    arena, orch = world(ls + hogs, 2, [None, None], horizon_s=100.0, cfg=cfg)
    orch.control.cordoned_until[1] = 30.0
    return arena, orch


def test_moves_take_the_slowed_pods_to_a_quiet_node() -> None:
    still = metrics(_crowded(moves=False)[0].run())
    arena, orch = _crowded(moves=True)
    out = arena.run()
    m = metrics(out)
    # removing one hog leaves the other: only moving an llc pod itself relieves it; both go, one per round
    assert (orch.moves_applied, orch.moved_latency_sensitive) == (2, 2)
    assert orch.actions["evict"] == 2 and m["evictions"] == 2
    assert {f.arrival.task_id: f.node for f in out.finished if f.arrival.latency_sensitive} == {0: 1, 1: 1}
    assert 2 * 30.0 / 1.59 <= orch.lost_work_s <= 2 * 40.0 / 1.59  # moved at 30-40 s, slowed 1.59x until then
    assert m["moves"] == 2 and m["lost_work_task_s"] == orch.lost_work_s
    moved, kept = m["slo_violation_task_s"], still["slo_violation_task_s"]
    assert isinstance(moved, float) and isinstance(kept, float) and moved < kept


def test_the_violation_left_is_attributed_to_what_the_moves_rule_saw() -> None:
    arena, orch = _crowded(moves=True)
    m = metrics(arena.run())
    # 10 s and 20 s: both llc pods slowed, node 1 cordoned (no target); 30 s: a move found for each, one applied;
    # 40 s: the other's move found and applied; then both run alone on node 1
    assert orch.violation_causes["no_target"] == 2 * 2 * 10.0
    assert orch.violation_causes["move_found"] == (2 + 1) * 10.0
    assert m["violation_attributed_task_s"] == pytest.approx(70.0) == m["slo_violation_task_s"]
    assert m["violation_share_no_target"] == pytest.approx(40 / 70) and m["violation_share_missed"] == 0.0


def test_a_violation_the_estimates_miss_or_after_a_move_is_named_so() -> None:
    from services.agents.interference_policy import Assessment

    arena, orch = _crowded(moves=True)
    arena._place(0.0, deque(arena.arrivals))  # every task on node 0: both llc pods truly 1.59x
    calm_estimates = Assessment([], ["calm", "calm"], [[1.0, 1.0, 1.1, 1.1], []])
    orch._attribute(arena, calm_estimates)
    assert orch.violation_causes["missed"] == 2 * 10.0
    orch.moved.add(task_key(arena.residents[0][0].arrival))
    orch._attribute(arena, Assessment([], ["no_relief", "calm"], [[1.6, 1.6, 1.1, 1.1], []]))
    assert (orch.violation_causes["after_own_move"], orch.violation_causes["no_relief"]) == (10.0, 10.0)
    assert sum(orch.violation_causes.values()) == 40.0  # the hogs (batch) never count


def test_pod_estimates_measure_once_after_a_window_and_guess_the_class_before() -> None:
    from simulator.arena.orchestrator import PodEstimates
    from simulator.workloads import CLASS_PRESSURE_GUESS

    arena, _ = _crowded(moves=False)
    arena._place(0.0, deque(arena.arrivals))  # every task starts on node 0 at t = 0
    exact = PodEstimates(0.0, seed=1, min_age_s=10.0)
    exact.observe(arena, 5.0)
    assert exact.of(2, "memory_bound") == CLASS_PRESSURE_GUESS[2]  # not measured yet: the class's guess
    exact.observe(arena, 10.0)
    assert exact.of(2, "memory_bound") == pytest.approx((0.4, 0.9, 0.1, 0.05))
    noisy = [PodEstimates(0.3, seed=s, min_age_s=10.0) for s in (1, 1, 2)]
    for e in noisy:
        e.observe(arena, 10.0)
    assert noisy[0].of(2, "memory_bound") == noisy[1].of(2, "memory_bound") != noisy[2].of(2, "memory_bound")
    assert all(0.0 <= v <= 1.0 for v in noisy[0].of(2, "memory_bound"))
    with pytest.raises(ValueError):
        PodEstimates(-0.1, seed=1, min_age_s=10.0)


def test_the_job_prior_guesses_an_unmeasured_pod_at_its_jobs_measured_mean() -> None:
    from simulator.arena.orchestrator import PodEstimates
    from simulator.workloads import CLASS_PRESSURE_GUESS

    arena, _ = _crowded(moves=False)
    arena._place(0.0, deque(arena.arrivals))  # tasks 2 and 3 (job 8, memory hogs) start on node 0 at t = 0
    est = PodEstimates(0.0, seed=1, min_age_s=10.0)
    est.job_prior = True
    est.observe(arena, 5.0)
    assert est.of(99, "memory_bound", job_id=8) == CLASS_PRESSURE_GUESS[2]  # nothing of job 8 measured yet
    est.observe(arena, 10.0)
    # a new pod of job 8 (task 99, never seen): the mean of tasks 2 and 3's estimates, not the class guess
    assert est.of(99, "memory_bound", job_id=8) == pytest.approx((0.4, 0.9, 0.1, 0.05))
    assert est.of(99, "memory_bound", job_id=1234) == CLASS_PRESSURE_GUESS[2]  # a job never measured
    off = PodEstimates(0.0, seed=1, min_age_s=10.0)
    off.observe(arena, 10.0)
    assert off.of(99, "memory_bound", job_id=8) == CLASS_PRESSURE_GUESS[2]  # default: the class guess


def test_monitored_readings_show_the_demand_until_the_node_saturates_then_each_pods_share() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    calm = np.array([[0.3, 0.1, 0.9, 0.2], [0.2, 0.4, 0.1, 0.6]])  # llc 0.5, membw 0.5 in all: no saturation
    np.testing.assert_allclose(monitored_readings(calm, [0, 1], 0.0, rng), [[0.3, 0.1], [0.2, 0.4]])
    crowded = np.array([[0.8, 0.1, 0, 0], [0.6, 0.2, 0, 0], [0.2, 0.3, 0, 0]])  # llc demand 1.6: shares
    np.testing.assert_allclose(monitored_readings(crowded, [2, 0], 0.0, rng), [[0.2 / 1.6, 0.3], [0.8 / 1.6, 0.1]])
    many = np.tile([[0.2, 0.2, 0.0, 0.0]], (4000, 1))  # saturated: each holds 1/4000; the noise is log-normal
    logs = np.log(monitored_readings(many, range(4000), 0.1, rng) * 4000)
    assert abs(float(logs.mean())) < 0.01 and 0.09 < float(logs.std()) < 0.11


def test_the_monitored_estimator_replaces_llc_and_membw_and_keeps_the_counters_core_and_frontend() -> None:
    kinds = ["crypto", "kv_cache", "stream_triad", "php_app"]
    residents = [Arrival(i, i, 0.0, 100.0, 0.1, 0.02, True, kind, "x", 0.8)
                 for i, kind in enumerate(["search_index", "spmv", "video_encode"])]
    counted = CounterEstimator(kinds, seed=3, pods=400).estimate(0, residents, [0, 2])
    monitored = MonitoredEstimator(kinds, seed=3, noise=0.0, pods=400).estimate(0, residents, [0, 2])
    total = [sum(a.pressure[r] for a in residents) for r in (0, 1)]
    for k, c, m in zip([0, 2], counted, monitored, strict=True):
        assert m[2:] == c[2:]  # core and frontend: the same regressor on the same simulated counts
        assert m[0] == pytest.approx(residents[k].pressure[0] / max(1.0, total[0]))
        assert m[1] == pytest.approx(residents[k].pressure[1] / max(1.0, total[1]))
    with pytest.raises(ValueError, match="monitoring noise"):
        MonitoredEstimator(kinds, seed=3, noise=-0.1, pods=400)


def test_rereading_takes_a_pods_demand_from_windows_its_node_was_not_saturated_else_a_lower_bound() -> None:
    kinds = ["crypto", "kv_cache", "stream_triad", "php_app"]

    def pod(i: int, kind: str, intensity: float) -> Arrival:
        return Arrival(i, i, 0.0, 100.0, 0.1, 0.02, True, kind, "x", intensity)

    a, b = pod(1, "search_index", 0.5), pod(2, "spmv", 0.5)  # llc 0.35 + 0.225, membw 0.125 + 0.425: calm
    c, d = pod(3, "spmv", 1.0), pod(4, "stream_triad", 1.0)  # llc 0.45 + 0.4 (calm), membw 0.85 + 0.9 (saturated)
    est = MonitoredEstimator(kinds, seed=3, noise=0.0, pods=400, reading="unsaturated")
    plain = CounterEstimator(kinds, seed=3, pods=400)  # the same regressor, its counts drawn in the same order
    est.observe([a, b], [0, 1])
    got, counted = est.estimate(0, [a, b], [0])[0], plain.estimate(0, [a, b], [0])[0]
    assert got[:2] == pytest.approx((0.35, 0.125)) and got[2:] == counted[2:]
    est.observe([c, d], [0, 1])
    got, counted = est.estimate(0, [c, d], [0])[0], plain.estimate(0, [c, d], [0])[0]
    assert got[0] == pytest.approx(0.45)  # llc was calm: the reading is the demand
    share = 0.85 / 1.75  # membw never calm: the larger of its highest reading and the counters' estimate
    assert got[1] == pytest.approx(max(share, counted[1])) and got[1] >= share
    est.observe([c], [0])  # its co-runner gone: the node is calm, so the reading is the demand from now on
    assert est.refined(3, got) == pytest.approx((0.45, 0.85, got[2], got[3]))
    est.observe([c, d], [0, 1])  # saturated again: a share, not counted
    assert est.monitored(3) == pytest.approx((0.45, 0.85))
    assert est.monitored(4) == pytest.approx((0.4, 0.9 / 1.75))  # never estimated from counters: its reading
    c_young = pod(5, "spmv", 1.0)
    est.observe([c_young], [])  # read (for the node's sum) but too young to keep
    assert est.monitored(5).tolist() == [0.0, 0.0]

    noisy = MonitoredEstimator(kinds, seed=3, noise=0.2, pods=400, reading="unsaturated")
    noisy.observe([a, b], [0, 1])
    first = noisy.monitored(1)
    for _ in range(5):  # one persistent factor per pod and resource: windows do not average it away
        noisy.observe([a, b], [0, 1])
    assert noisy.monitored(1) == pytest.approx(first)
    assert abs(float(first[0]) / 0.35 - 1.0) > 1e-6  # ... and it is a factor, not the demand itself
    with pytest.raises(ValueError, match="saturated_at"):
        MonitoredEstimator(kinds, seed=3, noise=0.1, pods=400, reading="unsaturated", saturated_at=0.0)


def test_window_reading_is_the_latest_window_while_calm_else_at_least_the_counters_estimate() -> None:
    """``--rdt-reading window``: the pod-pressure stage's rule, no memory of earlier windows."""
    kinds = ["crypto", "kv_cache", "stream_triad", "php_app"]

    def pod(i: int, kind: str) -> Arrival:
        return Arrival(i, i, 0.0, 100.0, 0.1, 0.02, True, kind, "x", 1.0)

    c, d = pod(3, "spmv"), pod(4, "stream_triad")  # llc 0.45 + 0.4 (calm), membw 0.85 + 0.9 (saturated)
    est = MonitoredEstimator(kinds, seed=3, noise=0.0, pods=400, reading="window")
    plain = CounterEstimator(kinds, seed=3, pods=400)
    est.observe([c], [0])  # alone: calm in both
    assert est.monitored(3) == pytest.approx((0.45, 0.85))
    est.observe([c, d], [0, 1])  # membw saturated: this window's share or the counters', not the calm 0.85 kept
    got, counted = est.estimate(0, [c, d], [0])[0], plain.estimate(0, [c, d], [0])[0]
    assert got[0] == pytest.approx(0.45) and got[2:] == counted[2:]
    assert got[1] == pytest.approx(max(0.85 / 1.75, counted[1]))
    est.observe([c], [0])  # calm again: the reading alone, whatever the counters said
    assert est.refined(3, got) == pytest.approx((0.45, 0.85, got[2], got[3]))
    assert est.monitored(9).tolist() == [0.0, 0.0]  # never read, never estimated


def test_rescaling_scales_a_share_by_the_oversubscription_its_calm_read_co_residents_show() -> None:
    kinds = ["crypto", "kv_cache", "stream_triad", "php_app"]

    def pod(i: int, kind: str) -> Arrival:
        return Arrival(i, i, 0.0, 100.0, 0.1, 0.02, True, kind, "x", 1.0)

    known, new = pod(1, "spmv"), pod(2, "stream_triad")  # membw 0.85 alone (calm), 0.85 + 0.9 together
    for reading, membw in (("rescaled", 0.9), ("unsaturated", 0.9 / 1.75)):
        est = MonitoredEstimator(kinds, seed=3, noise=0.0, pods=400, reading=reading)  # type: ignore[arg-type]
        est.observe([known], [0])
        est.observe([known, new], [0, 1])  # saturated: known reads 0.85 / 1.75 against its calm 0.85, so x1.75
        assert est.monitored(2) == pytest.approx((0.4, membw))  # llc 0.85 in all: calm, the demand itself
        assert est.monitored(1) == pytest.approx((0.45, 0.85))
    strangers = MonitoredEstimator(kinds, seed=3, noise=0.0, pods=400, reading="rescaled")
    strangers.observe([pod(3, "spmv"), pod(4, "stream_triad")], [0, 1])  # nobody read calm: nothing to scale by
    assert strangers.monitored(4)[1] == pytest.approx(0.9 / 1.75)  # the lower bound, as without rescaling
    noisy = MonitoredEstimator(kinds, seed=3, noise=0.3, pods=400, reading="rescaled")
    noisy.observe([known], [0])
    noisy.observe([known, new], [0, 1])  # persistent factors cancel in the ratio: the new pod's demand x its factor
    factor = noisy.monitored(2)[0] / 0.4  # its llc was read calm: demand x factor
    assert abs(factor - 1.0) > 1e-6
    assert noisy.monitored(2)[1] == pytest.approx(min(1.0, 0.9 * float(noisy._factor[2][1])))
