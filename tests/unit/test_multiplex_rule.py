"""The multiplexing rule: a counter multiplexed below ``MULTIPLEX_MIN_FRACTION`` is not measurable.

Checked on every path a NodeState takes into features (``counter_value``, ``sample_from_dict``,
``sample_from_nodestate``), through the windows to the regime stage's abstention rule, and against
the data the threshold must leave alone (the simulator's multiplexing; real perf stat output).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts import NodeState
from featurelib.node.samples import (
    COUNTERS_USED,
    MULTIPLEX_MIN_FRACTION,
    counter_value,
    sample_from_dict,
    sample_from_nodestate,
)
from featurelib.node.schema import FEATURE_INDEX, MI, as_model_input
from featurelib.node.windows import features_for_stream
from services.regime import abstention

T0 = 1_700_000_000_000
ENABLED = 10**9
HARDWARE = ("cycles", "instructions", "cache-references", "cache-misses", "LLC-loads", "LLC-load-misses",
            "branch-instructions", "branch-misses", "stalled-cycles-frontend", "stalled-cycles-backend")
COUNTS = {name: 1e7 * (i + 1) for i, name in enumerate(COUNTERS_USED)} | {"cycles": 2e9, "instructions": 3e9}


def nodestate(seq: int, fraction: float, *, status: str = "multiplexed") -> dict[str, Any]:
    """One interval whose hardware counters ran for ``fraction`` of the time they were enabled."""
    counters: dict[str, Any] = {}
    for name in COUNTERS_USED:
        value = COUNTS[name]
        if name in HARDWARE:
            running = round(ENABLED * fraction)
            counters[name] = {"raw": round(value * fraction), "value": value, "enabled_ns": ENABLED,
                              "running_ns": running, "status": status}
        else:
            counters[name] = {"raw": value, "value": value, "enabled_ns": ENABLED, "running_ns": ENABLED,
                              "status": "counted"}
    return {"node": "n1", "ts_ms": T0 + seq * 1000, "seq": seq, "interval_ms": 1000, "source": "perf_event",
            "pmu": "hardware", "supported_events": sorted(counters), "counters": counters, "cpu_util": 0.5,
            "mem_util": 0.25}


def test_counter_value_drops_thinly_multiplexed_counts_only() -> None:
    thin = round(ENABLED * MULTIPLEX_MIN_FRACTION) - 1
    assert counter_value("multiplexed", 5.0, ENABLED, thin) is None
    assert counter_value("multiplexed", 5.0, ENABLED, round(ENABLED * MULTIPLEX_MIN_FRACTION)) == 5.0
    assert counter_value("multiplexed", 5.0, ENABLED, 0) is None  # enabled, never ran: no measurement at all
    assert counter_value("multiplexed", 5.0) == 5.0  # no times given (recorded data): kept
    assert counter_value("counted", 5.0, ENABLED, ENABLED) == 5.0
    assert counter_value("counted", 5.0) == 5.0
    assert counter_value("not_supported", None, ENABLED, 0) is None
    assert counter_value("counted", None) is None


@pytest.mark.parametrize("fraction", [0.0001, 0.02, MULTIPLEX_MIN_FRACTION * 0.99])
def test_thin_multiplexing_invalidates_the_hardware_metrics(fraction: float) -> None:
    d = nodestate(0, fraction)
    s = sample_from_dict(d)
    assert s == sample_from_nodestate(NodeState.model_validate(d))  # the two decoders agree
    for metric in ("ipc", "cpi", "llc_mpki", "llc_miss_ratio", "cache_mpki", "cache_miss_ratio", "stall_backend",
                   "branch_mpki", "inst_gps"):
        assert s.metrics[MI[metric]] is None, metric
    # software events and utilisation are unaffected, and it is no sanity violation
    assert s.metrics[MI["busy_cpus"]] is not None and s.metrics[MI["ctx_switches_log"]] is not None
    assert s.metrics[MI["cpu_util"]] == 0.5 and s.metrics[MI["sanity_violation"]] == 0.0


@pytest.mark.parametrize("fraction", [MULTIPLEX_MIN_FRACTION, 0.125, 0.5, 1.0])
def test_multiplexing_at_or_above_the_threshold_keeps_the_scaled_values(fraction: float) -> None:
    d = nodestate(0, fraction)
    s = sample_from_dict(d)
    assert s == sample_from_nodestate(NodeState.model_validate(d))
    assert s.metrics[MI["ipc"]] == COUNTS["instructions"] / COUNTS["cycles"]
    assert s.metrics[MI["llc_mpki"]] is not None


def test_the_rule_applies_to_the_multiplexed_status() -> None:
    """``counted`` means it ran throughout (every producer marks running < enabled ``multiplexed``)."""
    assert sample_from_dict(nodestate(0, 0.01, status="counted")).metrics[MI["ipc"]] is not None
    assert sample_from_dict(nodestate(0, 0.01)).metrics[MI["ipc"]] is None


def test_a_thinly_multiplexed_node_makes_the_regime_stage_abstain() -> None:
    """Through the windows: features it feeds are invalid, so the counters rule abstains."""
    required = [FEATURE_INDEX[n] for n in abstention.DEFAULT_REQUIRED_FEATURES]
    rows = {}
    for fraction in (0.02, 0.5):
        windows = features_for_stream([sample_from_dict(nodestate(i, fraction)) for i in range(40)])
        assert windows
        rows[fraction] = np.stack([as_model_input(w.values, w.valid) for w in windows])
    assert abstention.counters_missing(rows[0.02], required).all()
    assert not abstention.counters_missing(rows[0.5], required).any()


def test_the_simulator_never_multiplexes_below_the_threshold() -> None:
    """Training windows come from the simulator: the rule must not change one of them."""
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=40, seed=11, multiplex_prob=1.0)
    fractions = [c["running_ns"] / c["enabled_ns"] for batch in sim.run(5) for d in batch.nodestate_dicts()
                 for c in d["counters"].values() if c["status"] == "multiplexed"]
    assert fractions and min(fractions) >= MULTIPLEX_MIN_FRACTION


@pytest.mark.shared_data
def test_real_perf_stat_output_is_never_below_the_threshold(shared_data: Path) -> None:
    """Real multiplexed readings (16 events on fewer hardware counters, 12.5-56 %) are all kept."""
    from services.node_agent.perfstat import parse_perf_stat_file
    from services.node_agent.recorded import perf_report_nodestates

    fractions = []
    for path in sorted((shared_data / "perfstat").rglob("*.out")):
        report = parse_perf_stat_file(path)
        for state in perf_report_nodestates(report, node=path.stem, start_ms=T0):
            fractions += [c["running_ns"] / c["enabled_ns"] for c in state["counters"].values()
                          if c["status"] == "multiplexed"]
    assert len(fractions) > 1000
    assert min(fractions) > 2 * MULTIPLEX_MIN_FRACTION
