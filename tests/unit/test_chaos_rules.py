"""The chaos scenario's pure rules: recovery, attribution of losses to faults, duplicate actions."""

from __future__ import annotations

from loadtests.accounting import Tick, account
from loadtests.chaos_rules import (
    BASELINE_CASE,
    Applied,
    GroupPoint,
    attribute,
    duplicate_actions,
    group_series,
    lag_bound,
    loss_times,
    missing_windows,
    recovered_at,
)
from loadtests.load_plan import node_name
from loadtests.observe import FeatureWindow, LagSample


def test_group_series_sums_topics_per_round() -> None:
    samples = [LagSample(1.0, "g", "a", 10, 15), LagSample(1.0, "g", "b", 5, 5), LagSample(1.0, "h", "a", 0, 9),
               LagSample(2.0, "g", "a", 20, 20), LagSample(2.0, "g", "b", 6, 8)]
    assert group_series(samples, "g") == [GroupPoint(1.0, 15, 20), GroupPoint(2.0, 26, 28)]


def test_lag_bound_is_relative_to_the_steady_state_with_a_floor() -> None:
    # input grows 1,000/s; lag 300-400 before the fault (80 s is outside the baseline, 101 s after it)
    series = [GroupPoint(t, int(t) * 1000 - lag, int(t) * 1000)
              for t, lag in ((80.0, 900), (90.0, 300), (95.0, 400), (101.0, 5000))]
    assert lag_bound(series, 100.0, floor=100.0) == 800.0  # 2 x 400
    assert lag_bound(series, 100.0, floor=1000.0) == 1000.0
    assert lag_bound([], 100.0, floor=50.0) == 50.0


def test_lag_bound_is_capped_when_the_stage_was_already_falling_behind() -> None:
    # 100 msg/s in, and the lag grew to 20,000 before the fault: no steady state to return to
    series = [GroupPoint(t, int(t) * 100 - lag, int(t) * 100) for t, lag in ((90.0, 10_000), (99.0, 20_000))]
    assert lag_bound(series, 100.0, floor=100.0, cap_s=15.0) == 1500.0
    idle = [GroupPoint(90.0, 5, 5), GroupPoint(99.0, 5, 5)]
    assert lag_bound(idle, 100.0, floor=100.0) == 100.0


def test_recovered_needs_progress_past_the_fault_and_a_small_lag() -> None:
    series = [
        GroupPoint(9.0, 100, 110),
        GroupPoint(11.0, 100, 300),  # killed: nothing committed
        GroupPoint(13.0, 120, 500),  # committing again, but far behind
        GroupPoint(15.0, 480, 520),  # caught up
    ]
    assert recovered_at(series, 10.0, bound=50) == 15.0
    assert recovered_at(series, 10.0, bound=1000) == 13.0
    assert recovered_at(series, 10.0, bound=50, not_before=15.0) is None
    assert recovered_at(series[:3], 10.0, bound=50) is None


def test_an_idle_group_counts_as_recovered_when_nothing_new_arrived() -> None:
    series = [GroupPoint(9.0, 100, 100), GroupPoint(11.0, 100, 100)]
    assert recovered_at(series, 10.0, bound=0) == 11.0


def test_attribution_goes_to_the_last_fault_before_time_plus_lookback() -> None:
    faults = [("kill:a", 100.0), ("kill:b", 200.0)]
    got = attribute([(10.0, 1), (85.0, 2), (150.0, 3), (185.0, 4), (500.0, 5)], faults, lookback_s=20.0)
    assert got == {BASELINE_CASE: 1, "kill:a": 2 + 3, "kill:b": 4 + 5}


def test_loss_times_match_the_accounting_rule() -> None:
    ticks = [Tick(seq, 1_000_000 + seq * 1000, 3) for seq in range(30)]
    ticks += [Tick(seq, 1_000_000 + seq * 1000, 3, "flush") for seq in range(30, 42)]
    dead = {(node_name(0), 3)}
    windows = [
        FeatureWindow(node_name(0), 1_010_000, 10, 9),  # 10 samples, one dead-lettered: complete
        FeatureWindow(node_name(1), 1_010_000, 10, 7),  # three short
        FeatureWindow(node_name(1), 1_020_000, 10, 10),
        FeatureWindow(node_name(2), 1_020_000, 10, 10),  # node 2's first window never came: ten uncovered
    ] + [FeatureWindow(node_name(i), end, 10, 10) for i in range(3) for end in (1_030_000, 1_040_000)]
    windows.append(FeatureWindow(node_name(0), 1_020_000, 10, 10))
    events = loss_times(ticks, windows, dead)
    assert sum(n for _, n in events) == account(ticks, windows, dead).lost == 13
    assert (1010.0, 3) in events
    assert sorted(t for t, n in events if n == 1) == [1000.0 + s for s in range(10)]


def test_missing_windows_are_neither_answered_nor_dead_lettered() -> None:
    windows = [FeatureWindow("n", end, 10, 10) for end in (10_000, 20_000, 30_000)]
    assert missing_windows(windows, {("n", 10_000)}, {("n", 30_000)}) == [(20.0, 1)]


def test_a_decision_applied_twice_is_a_duplicate_a_recognised_replay_is_not() -> None:
    results = [
        Applied(1.0, "d-1", "applied"),
        Applied(2.0, "d-1", "duplicate"),
        Applied(3.0, "d-2", "applied"),
        Applied(4.0, "d-2", "failed"),
        Applied(5.0, "d-3", "applied"),
        Applied(7.0, "d-3", "applied"),
    ]
    assert duplicate_actions(results) == [("d-3", 7.0, 2)]
