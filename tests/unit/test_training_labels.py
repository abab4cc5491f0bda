"""Prediction points and labels on hand-made traces: horizons, censoring, checkpoints, warm-up."""

from __future__ import annotations

import polars as pl
import pytest

from featurelib.task_features import TaskEvent
from training.errors import DataError
from training.labels import PointConfig, add_labels, data_bounds, parse_failure_events, prediction_points
from training.synthetic_trace import events_frame

S = 1_000_000
H = (300 * S, 900 * S)
NO_WARMUP = PointConfig(warmup_us=0, checkpoint_every_us=1800 * S)


def trace(*rows: tuple[int, int, int, int]) -> pl.DataFrame:
    """rows: (time_s, job, task, event_type); machine 5 on every row."""
    return events_frame([TaskEvent(time_us=t * S, job_id=j, task_index=k, event_type=e, machine_id=5, user="u")
                         for t, j, k, e in sorted(rows)])


def labelled(frame: pl.DataFrame, config: PointConfig = NO_WARMUP, failures: tuple[int, ...] = (3,)) -> pl.DataFrame:
    points = prediction_points(frame, config)
    return add_labels(points, H, failures, data_bounds(frame)[1])


def point(frame: pl.DataFrame, job: int, now_s: int) -> dict[str, object]:
    rows = frame.filter((pl.col("job_id") == job) & (pl.col("now_us") == now_s * S)).to_dicts()
    assert len(rows) == 1, f"expected one point for job {job} at {now_s}s, got {rows}"
    return rows[0]


END = (20_000, 9, 0, 4)  # a late event fixes the end of the data


def test_fail_within_horizon_is_positive_for_every_longer_horizon() -> None:
    out = labelled(trace((1000, 1, 0, 0), (1010, 1, 0, 1), (1210, 1, 0, 3), END))
    p = point(out, 1, 1010)
    assert (p["kind"], p["y_300s"], p["y_900s"]) == ("schedule", 1, 1)


def test_fail_after_the_horizon_is_negative_for_that_horizon_only() -> None:
    out = labelled(trace((1000, 1, 0, 0), (1010, 1, 0, 1), (1610, 1, 0, 3), END))
    p = point(out, 1, 1010)
    assert (p["y_300s"], p["y_900s"]) == (0, 1)


def test_other_terminal_events_are_negative_unless_selected() -> None:
    rows = trace((1000, 1, 0, 0), (1010, 1, 0, 1), (1100, 1, 0, 2), END)
    assert point(labelled(rows), 1, 1010)["y_300s"] == 0
    assert point(labelled(rows, failures=parse_failure_events("FAIL,EVICT")), 1, 1010)["y_300s"] == 1


def test_open_run_at_the_end_of_the_data_is_censored_beyond_it() -> None:
    out = labelled(trace((19_000, 1, 0, 0), (19_500, 1, 0, 1), END))
    p = point(out, 1, 19_500)
    assert p["y_300s"] == 0  # 19,800 s <= end: observed to survive
    assert p["y_900s"] is None  # 20,400 s > end: unknown


def test_missing_terminal_record_within_horizon_is_censored() -> None:
    out = labelled(trace((1000, 1, 0, 0), (1010, 1, 0, 1), (1100, 1, 0, 0), (1110, 1, 0, 1), END))
    assert point(out, 1, 1010)["y_300s"] is None


def test_checkpoints_follow_a_long_run_on_the_absolute_grid() -> None:
    out = labelled(trace((1000, 1, 0, 0), (1010, 1, 0, 1), (8000, 1, 0, 3), END))
    run = out.filter(pl.col("job_id") == 1).sort("now_us")
    assert run["now_us"].to_list() == [s * S for s in (1010, 1800, 3600, 5400, 7200)]
    assert run["kind"].to_list() == ["schedule"] + ["checkpoint"] * 4
    assert run["y_900s"].to_list() == [0, 0, 0, 0, 1]


def test_tasks_present_at_time_zero_are_censored() -> None:
    rows = trace((0, 1, 0, 0), (0, 1, 0, 1), (2000, 1, 0, 3), (2000, 1, 0, 0), (2010, 1, 0, 1), (2100, 1, 0, 3), END)
    out = labelled(rows)
    # the run in progress at time 0 (start unknown) gives no points; the later, fully observed run does
    assert out.filter(pl.col("job_id") == 1)["now_us"].to_list() == [2010 * S]
    strict = labelled(rows, PointConfig(warmup_us=0, whole_task_censoring=True))
    assert strict.filter(pl.col("job_id") == 1).height == 0


def test_no_point_before_the_warm_up() -> None:
    rows = trace((700, 1, 0, 0), (710, 1, 0, 1), (800, 1, 0, 3), (5000, 2, 0, 0), (5010, 2, 0, 1), END)
    out = labelled(rows, PointConfig(warmup_us=3600 * S))
    assert out["job_id"].unique().to_list() == [2]


def test_a_task_that_ends_at_the_same_microsecond_is_not_a_point() -> None:
    out = labelled(trace((1000, 1, 0, 0), (1010, 1, 0, 1), (1010, 1, 0, 3), END))
    assert out.filter(pl.col("job_id") == 1).height == 0


def test_failure_event_names() -> None:
    assert parse_failure_events("fail, evict") == (2, 3)
    with pytest.raises(ValueError, match="unknown failure event BOOM"):
        parse_failure_events("FAIL,BOOM")


def test_a_trace_with_only_time_zero_rows_has_nothing_to_predict() -> None:
    with pytest.raises(DataError):
        data_bounds(trace((0, 1, 0, 0)))
