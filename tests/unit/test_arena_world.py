"""ArenaCluster: the simulator's counters follow the co-runners the arena places, never random epochs."""

from __future__ import annotations

import numpy as np
import pytest

from contracts.models import REGIMES
from simulator.arena.world import ArenaCluster
from simulator.cluster import COL
from simulator.workloads import KINDS, class_slowdowns


def test_counters_follow_the_placed_corunners() -> None:
    cluster = ArenaCluster(2, seed=1, interval_ms=10_000, missing_event_prob=0.0, multiplex_prob=0.0)
    cluster.set_corunners(0, ["spmv", "search_index"], [1.0, 0.8])
    first = cluster.tick()
    pressures = np.array([KINDS["spmv"].pressure, np.array(KINDS["search_index"].pressure) * 0.8])
    assert first.slowdown[0] == pytest.approx(class_slowdowns(pressures))
    assert REGIMES[int(first.regime[0])] == "mixed"  # llc 0.56 and membw 0.85 both reach 0.5
    assert first.values[0, COL["instructions"]] > 0
    assert first.values[1, COL["cycles"]] == 0  # idle node: no co-runner, no cycles
    for _ in range(50):  # epochs never end: the co-runners stay until the arena changes them
        later = cluster.tick()
    assert later.slowdown[0] == pytest.approx(first.slowdown[0])
    assert later.values[1, COL["cycles"]] == 0
    cluster.set_corunners(0, [], [])
    assert cluster.tick().values[0, COL["cycles"]] == 0
