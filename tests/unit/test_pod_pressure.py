"""Per-pod features and the per-pod pressure estimator (issue 21): ``featurelib.pod``, ``training.pod_pressure``,
the simulator's per-workload counter rates and the arena's counter-based estimates."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from featurelib.pod import BASIC_FEATURES, EXTENDED_FEATURES, pod_features
from simulator.cluster import EVENTS, SyntheticCluster, node_specs_for, workload_rates
from simulator.workloads import KINDS
from training.pod_pressure import errors, sample, train


def test_features_by_hand() -> None:
    counts = {"cycles": 2e10, "instructions": 3e10, "cache-misses": 3e7, "task-clock": 1e10, "context-switches": 500,
              "cache-references": 1.5e8, "branch-instructions": 6e9, "branch-misses": 6e7}
    f = dict(zip(EXTENDED_FEATURES, pod_features(counts, 10.0).tolist(), strict=True))
    assert f["ipc"] == pytest.approx(1.5)
    assert f["miss_pki"] == pytest.approx(1.0)  # 3e7 misses per 3e10 instructions
    assert f["log_miss_per_s"] == pytest.approx(np.log10(1 + 3e6))
    assert f["busy_cores"] == pytest.approx(1.0)  # 10 s of task-clock in 10 s
    assert f["ghz"] == pytest.approx(2.0)
    assert f["cs_per_core_s"] == pytest.approx(50.0)
    extended = (f["ref_pki"], f["miss_ratio"], f["branch_pki"], f["branch_miss_ratio"])
    assert extended == pytest.approx((5, 0.2, 200, 0.01))
    assert len(pod_features(counts, 10.0, extended=False)) == len(BASIC_FEATURES)
    assert not pod_features({}, 10.0).any()  # an idle or uncounted pod: zeros, no division error
    with pytest.raises(ValueError):
        pod_features(counts, 0.0)


def test_node_rates_are_the_sum_of_the_workload_rates() -> None:
    spec = node_specs_for(1)[0]
    kinds = ["stream_triad", "kv_cache", "crypto"]
    inten = np.array([0.9, 0.6, 0.7])
    pressures = np.array([KINDS[k].pressure for k in kinds]) * inten[:, None]
    per, util, _, _ = workload_rates(spec, kinds, inten, pressures, np.random.default_rng(3))
    assert per.shape == (3, len(EVENTS)) and 0 < util <= 0.97
    cluster = SyntheticCluster(nodes=1, seed=1, interval_ms=10_000)
    cluster._rng = np.random.default_rng(3)
    node, util2, _, _ = cluster._epoch_rates(spec, kinds, inten, pressures)
    cap = EVENTS.index("mem-bandwidth-bytes")
    keep = [i for i in range(len(EVENTS)) if i != cap]
    assert node[keep] == pytest.approx(per.sum(axis=0)[keep]) and util2 == util
    assert node[cap] == pytest.approx(min(per[:, cap].sum(), spec.peak_bw_gbs * 0.95e9))
    # the co-runners' slowdown shows in the victim's own row: kv_cache (llc-sensitive) beside the membw hog
    alone, _, _, _ = workload_rates(spec, ["kv_cache"], inten[1:2], pressures[1:2], np.random.default_rng(3))
    ipc = EVENTS.index("instructions"), EVENTS.index("cycles")
    assert per[1, ipc[0]] / per[1, ipc[1]] < 0.9 * alone[0, ipc[0]] / alone[0, ipc[1]]


def test_estimator_learns_on_training_kinds_and_is_measured_on_others() -> None:
    train_kinds = ["compress", "crypto", "kv_cache", "sql_join", "stream_triad", "spmv", "php_app", "python_interp"]
    held = ["monte_carlo", "graph_bfs", "analytics_scan", "jvm_microservice"]
    model = train(train_kinds, pods=1500, seed=0)
    seen = sample(600, train_kinds, train_kinds, seed=5)
    unseen = sample(600, held, train_kinds + held, seed=6)
    on_seen, on_unseen = errors(model.predict(seen.x), seen.y), errors(model.predict(unseen.x), unseen.y)
    assert set(unseen.kinds) <= set(held)
    for r in ("llc", "membw", "core", "frontend"):
        assert on_seen[r]["mae"] < 0.1  # it learned something on the kinds it saw ...
        assert on_unseen[r]["mae"] < 0.3  # ... and is not arbitrary on the others
    p = model.predict(unseen.x)
    assert p.shape == (600, 4) and p.min() >= 0.0 and p.max() <= 1.0


def test_arena_counter_estimates_replace_the_class_guess() -> None:
    from services.scheduler_extender.corunner import CLASS_PRESSURE_GUESS
    from simulator.arena.arrivals import Arrival
    from simulator.arena.aware import ArenaView
    from simulator.arena.loop import Arena
    from simulator.arena.orchestrator import CounterEstimator, NodeControl, OrchestratorPolicy, PodEstimates

    arrivals = [Arrival(i, 1, 0.0, 100.0, 0.05, 0.02, True, k, KINDS[k].workload_class, 0.8)
                for i, k in enumerate(["graph_bfs", "stream_triad"])]
    view = ArenaView(1)
    arena = Arena(arrivals, 1, OrchestratorPolicy(1, view, NodeControl(1)), view, horizon_s=50.0)
    arena._place(0.0, deque(arrivals))
    est = PodEstimates(0.0, seed=1, min_age_s=10.0,
                       counters=CounterEstimator(["kv_cache", "sql_join", "stream_triad", "spmv", "crypto",
                                                  "php_app"], seed=1, pods=800))
    est.observe(arena, 10.0)
    measured = est.of(1, "memory_bound")
    assert measured != CLASS_PRESSURE_GUESS[2]
    assert measured[1] > 0.4  # the memory hog's membw pressure (0.9 x 0.8 = 0.72) is seen as high


def test_job_cpi_slowdown_is_the_jobs_baseline_over_the_pods_ipc() -> None:
    from simulator.arena.orchestrator import JobCpi

    cpi = JobCpi(quantile=0.9, min_samples=3)
    cpi.record(7, 1, 2.0)
    cpi.record(7, 2, 2.0)
    assert cpi.slowdown(7, 1) is None  # two samples: no baseline yet
    cpi.record(7, 3, 1.0)  # a slowed pod of the same job
    assert cpi.slowdown(7, 3) == pytest.approx(2.0)  # 90th percentile of (2, 2, 1) = 2 → 2 / 1
    assert cpi.slowdown(7, 1) == 1.0  # never below 1
    assert cpi.slowdown(8, 1) is None and cpi.slowdown(7, 99) is None
