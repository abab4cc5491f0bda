"""Arena accounting on a hand-computed scenario: slowdown -> completion time, violations, utilisation."""

from __future__ import annotations

import pytest

from simulator.arena.arrivals import Arrival
from simulator.arena.aware import ArenaView
from simulator.arena.loop import Arena, pod_of
from simulator.arena.policies import make_policy
from simulator.arena.report import metrics


def _arrival(task_id: int, kind: str, cls: str, work_s: float, ls: bool, submit_s: float = 0.0) -> Arrival:
    return Arrival(task_id, task_id, submit_s, work_s, 0.1, 0.05, ls, kind, cls, 1.0)


def test_two_corunners_hand_computed() -> None:
    # excess(p) = clip((p - 0.25) / 0.75, 0, 1)
    # spmv pressure (0.45, 0.85, 0.10, 0.05) -> excess (0.26667, 0.8, 0, 0)
    # search_index (llc_sensitive, sensitivity 1.20, 0.40, 0.20, 0.10) beside spmv:
    #   1 + 1.2 * 0.26667 + 0.4 * 0.8 = 1.64
    # search_index pressure (0.70, 0.25, 0.30, 0.25) -> excess (0.6, 0, 0.066667, 0)
    # spmv (memory_bound, sensitivity 0.30, 1.50, 0.10, 0.05) beside it: 1 + 0.18 + 0.0066667 = 1.1866667
    ls = _arrival(0, "search_index", "llc_sensitive", 20.0, True)
    batch = _arrival(1, "spmv", "memory_bound", 50.0, False)
    arena = Arena([ls, batch], 1, make_policy("kube-default", 1), ArenaView(1), horizon_s=100.0, tick_s=10.0)
    out = arena.run()
    done = {f.arrival.task_id: f for f in out.finished}
    # the LS task is slowed 1.64x throughout: 20 s of work take 32.8 s, all of it over the 1.25x SLO
    assert done[0].finish_s == pytest.approx(32.8)
    assert done[0].violation_s == pytest.approx(32.8)
    assert out.violation_s.sum() == pytest.approx(32.8)
    # the batch task runs ticks 0-3 (40 s) at 1.1866667x -> 33.7079 s of work; the remaining
    # 16.2921 s alone: 10 s in tick 4, 6.2921 s in tick 5 -> finishes at 56.2921 s
    assert done[1].finish_s == pytest.approx(40.0 + 50.0 - 40.0 / (1 + 0.18 + 0.1 / 15))
    assert done[1].violation_s == 0.0  # batch work is never an SLO violation
    m = metrics(out)
    assert m["slo_violation_task_s"] == pytest.approx(32.8)
    assert m["slowdown_mean_llc_sensitive"] == pytest.approx(1.64)
    assert m["completion_inflation"] == pytest.approx(done[1].finish_s / 50.0)
    # requested CPU: 0.1 + 0.1 of the node in ticks 0-3, 0.1 in ticks 4-5, nothing in 6-9 (10 ticks)
    assert m["mean_cpu_utilisation"] == pytest.approx((4 * 0.2 + 2 * 0.1) / 10, rel=1e-3)
    assert m["nodes_used"] == pytest.approx(0.6)
    assert m["evictions"] == 0.0
    assert m["placements"] == 2 and m["unfinished"] == 0 and m["unplaced"] == 0


def test_alone_a_task_is_never_slowed() -> None:
    a = [_arrival(0, "spmv", "memory_bound", 25.0, True), _arrival(1, "spmv", "memory_bound", 25.0, True)]
    out = Arena(a, 2, make_policy("kube-default", 3), ArenaView(2), horizon_s=60.0, tick_s=10.0).run()
    # kube-default spreads two equal pods over two empty nodes (LeastAllocated): no co-runner, slowdown 1
    assert {f.node for f in out.finished} == {0, 1}
    assert [f.slowdown for f in out.finished] == pytest.approx([1.0, 1.0])
    assert out.violation_s.sum() == 0.0


def test_pending_waits_until_a_node_frees() -> None:
    big = [Arrival(i, i, 0.0, 15.0, 0.8, 0.1, False, "spmv", "memory_bound", 0.5) for i in range(2)]
    out = Arena(big, 1, make_policy("kube-default", 1), ArenaView(1), horizon_s=60.0, tick_s=10.0).run()
    starts = sorted(f.start_s for f in out.finished)
    # the second pod does not fit beside the first; it is placed at the first tick after the first left (20 s)
    assert starts == [0.0, 20.0]
    assert metrics(out)["mean_wait_s"] == pytest.approx(10.0)


def test_pod_requests_scale_to_the_node() -> None:
    pod = pod_of(_arrival(0, "spmv", "memory_bound", 1.0, False))
    assert pod.milli_cpu == 1600 and pod.memory == round(0.05 * (64 << 30))
    assert pod.workload_class == "memory_bound"
