"""Pure parts of `borgctl load`: step schedule, windows, statistics and threshold checks."""

from __future__ import annotations

import math

import pytest

from loadtests.load_plan import (
    Phase,
    StepOutcome,
    Thresholds,
    check_soak,
    check_step,
    max_sustained,
    nodes_for,
    parse_steps,
    plan_seconds,
    ramp_phases,
    rate_between,
    second_half_growth,
    settle_s,
    slope,
    step_rate_between,
    step_windows,
)


def test_parse_steps_accepts_k_suffix_and_spaces() -> None:
    assert parse_steps("1000, 5k,10K,20000") == [1000, 5000, 10000, 20000]


@pytest.mark.parametrize("text", ["", "abc", "1000,-5", "0", "1k,nan"])
def test_parse_steps_rejects_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="--steps"):
        parse_steps(text)


def test_nodes_follow_rate_and_interval() -> None:
    assert nodes_for(1000, 1000) == 1000
    assert nodes_for(1000, 500) == 500
    assert nodes_for(10, 10) == 1  # never zero nodes
    assert Phase("step-5000", 5000, 30).nodes == 5000


def test_ramp_phases_warmup_then_one_phase_per_step() -> None:
    phases = ramp_phases([1000, 5000], 30, warmup_s=10)
    assert [(p.name, p.rate, p.seconds) for p in phases] == [
        ("warmup", 1000, 10),
        ("step-1000", 1000, 30),
        ("step-5000", 5000, 30),
    ]
    assert plan_seconds(phases) == 70
    assert [p.name for p in ramp_phases([200], 5, warmup_s=0)] == ["step-200"]
    with pytest.raises(ValueError, match="hold"):
        ramp_phases([200], 0, warmup_s=0)


def test_step_windows_leave_out_the_settling_time() -> None:
    phases = ramp_phases([1000, 5000], 30, warmup_s=10)
    windows = step_windows(phases)
    assert [(w.offered, w.start_s, w.end_s) for w in windows] == [(1000, 15.0, 40.0), (5000, 45.0, 70.0)]
    assert settle_s(30) == 5.0
    assert settle_s(6) == 2.0  # short holds settle a third


def test_step_windows_use_reported_phase_starts() -> None:
    phases = ramp_phases([1000, 5000], 30, warmup_s=10)
    starts = {"warmup": 100.0, "step-1000": 110.5, "step-5000": 141.0}
    windows = step_windows(phases, starts)
    assert windows[0].start_s == pytest.approx(115.5)
    assert windows[1].start_s == pytest.approx(146.0)
    assert windows[1].contains(150.0)
    assert not windows[1].contains(171.0)


def test_rate_between_uses_first_and_last_sample_inside() -> None:
    samples = [(0.0, 0.0), (1.0, 100.0), (2.0, 300.0), (3.0, 600.0), (10.0, 5000.0)]
    assert rate_between(samples, 1.0, 3.0) == pytest.approx(250.0)
    assert rate_between(samples, 4.0, 9.0) is None
    assert rate_between([(1.0, 5.0)], 0.0, 2.0) is None


def _committed_every(interval_s: int, rate: float, seconds: int) -> list[tuple[float, float]]:
    """Committed offsets sampled once a second of a stage consuming `rate`/s and committing every `interval_s`."""
    return [(float(t), float(rate * (t - t % interval_s))) for t in range(seconds + 1)]


def test_step_rate_between_sees_a_steady_stage_through_commits_sparser_than_the_window() -> None:
    committed = _committed_every(5, 500.0, 40)
    # 6 s windows hold one commit or none: first-to-last sample inside reads 0 or 833/s.
    assert rate_between(committed, 21.0, 24.0) == 0.0
    for start in range(10, 30):
        assert step_rate_between(committed, float(start), start + 6.0) == pytest.approx(500.0)
    assert step_rate_between(_committed_every(1, 500.0, 40), 10.0, 16.0) == pytest.approx(500.0)


def test_step_rate_between_of_an_idle_or_barely_started_stage() -> None:
    idle = [(float(t), 1234.0) for t in range(10)]
    assert step_rate_between(idle, 2.0, 8.0) == 0.0
    one_commit = [(0.0, 0.0), (1.0, 0.0), (2.0, 900.0), (3.0, 900.0)]
    assert step_rate_between(one_commit, 0.0, 3.0) == pytest.approx(300.0)
    assert step_rate_between([(1.0, 5.0)], 0.0, 2.0) is None


def test_backlog_growth_reads_the_lag_after_commits() -> None:
    from loadtests.run_metrics import backlog_growth, saturated

    committed = _committed_every(5, 500.0, 40)
    keeping_up = [(t, int(500 * t - c)) for t, c in committed]  # saw-tooth of up to 5 s of input
    assert backlog_growth(keeping_up, committed, 19.0, 31.0) == (0.0, 10.0)
    growth = backlog_growth(keeping_up, committed, 21.0, 24.0)  # no commit inside: the nearest on each side
    assert growth == (0.0, 5.0)
    assert not saturated(growth[0], 500 * growth[1])
    sawtooth_only = keeping_up[24][1] - keeping_up[21][1]
    assert saturated(sawtooth_only, 500 * 3)  # what reading first and last sample in the window concluded
    falling_behind = [(t, int(800 * t - c)) for t, c in committed]  # 800/s arrive, 500/s consumed
    grew, seconds = backlog_growth(falling_behind, committed, 20.0, 36.0) or (0.0, 0.0)
    assert grew / seconds == pytest.approx(300.0)
    assert saturated(grew, 800 * seconds)
    never_committed = [(float(t), 0.0) for t in range(10)]
    stuck = [(t, 100 * int(t)) for t, _ in never_committed]
    assert backlog_growth(stuck, never_committed, 2.0, 8.0) == (600.0, 6.0)


def test_slope_and_second_half_growth() -> None:
    flat_then_growing = [(float(t), 100.0 if t < 50 else 100.0 + (t - 50) * 0.5) for t in range(101)]
    per_s, growth = second_half_growth(flat_then_growing)
    assert per_s == pytest.approx(0.5)
    assert growth == pytest.approx(25.0)
    assert second_half_growth([(0.0, 1.0)]) == (0.0, 0.0)
    assert slope([(1.0, 2.0), (1.0, 5.0)]) == 0.0


def test_check_step_p99_throughput_and_dead_letters() -> None:
    th = Thresholds(max_p99_ms=250, min_throughput_ratio=0.9, max_dead_letters=0)
    ok = StepOutcome(offered=10_000, achieved=9_950, stream_p99_ms=120.0)
    assert check_step(ok, th) == []
    slow = StepOutcome(offered=10_000, achieved=9_950, stream_p99_ms=400.0)
    assert any("p99 400.0 ms > 250 ms" in v for v in check_step(slow, th))
    behind = StepOutcome(offered=10_000, achieved=7_000, stream_p99_ms=100.0, dead_letters=3)
    problems = check_step(behind, th)
    assert any("0.70 of offered < 0.9" in v for v in problems)
    assert any("3 dead letters" in v for v in problems)


def test_check_step_unmeasured_metric_is_a_violation() -> None:
    th = Thresholds(max_p99_ms=250, min_throughput_ratio=0.9)
    blind = StepOutcome(offered=1000, achieved=None, stream_p99_ms=math.nan)
    problems = check_step(blind, th)
    assert len(problems) == 2
    assert all("no " in v for v in problems)
    assert check_step(blind, Thresholds()) == []  # no thresholds, nothing to miss


def test_max_sustained_is_the_highest_passing_step_below_the_first_failure() -> None:
    th = Thresholds(max_p99_ms=250)
    outcomes = [
        StepOutcome(1000, 1000, 50.0),
        StepOutcome(5000, 5000, 90.0),
        StepOutcome(10000, 9000, 900.0),
        StepOutcome(20000, 19000, 100.0),  # a fluke above a failure does not count
    ]
    assert max_sustained(outcomes, th) == 5000
    assert max_sustained([StepOutcome(1000, 1000, 900.0)], th) is None


def test_check_soak_loss_rss_and_dead_letters() -> None:
    th = Thresholds(max_lost=0, max_rss_growth_mb=20, max_dead_letters=5)
    assert check_soak(0, {"features": 3.0}, 0, th) == []
    problems = check_soak(2, {"features": 3.0, "regime": 45.5}, 9, th)
    assert any("2 lost" in v for v in problems)
    assert any("regime RSS grew 45.5 MB" in v for v in problems)
    assert any("9 dead letters" in v for v in problems)
    assert any("not measured" in v for v in check_soak(None, {}, 0, th))


def test_a_stage_is_saturated_only_when_its_backlog_really_grew() -> None:
    from loadtests.run_metrics import saturated

    assert saturated(backlog_growth=60_000, produced=150_000)  # 5k/s offered, 3k/s consumed
    assert not saturated(backlog_growth=40, produced=300)  # commit jitter of a 14 msg/s stage
    assert not saturated(backlog_growth=2_000, produced=300_000)  # <1 s of input
