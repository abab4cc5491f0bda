"""Datasets: cold-start views see no history before their cut; truncating the future changes no feature."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from featurelib.task_features import TASK_FEATURE_NAMES
from training.dataset import ColdStartConfig, build_dataset, cold_start_views
from training.labels import PointConfig
from training.synthetic_trace import SyntheticConfig, events_frame, generate

S = 1_000_000
HORIZONS = (300 * S, 900 * S, 3600 * S)


def test_cold_start_views_ignore_everything_before_their_cut() -> None:
    trace = generate(SyntheticConfig(seed=4, duration_s=8 * 3600, n_jobs=300))
    events = events_frame(trace.task_events)
    train_end = 6 * 3600 * S
    config = ColdStartConfig(views=2, span_us=3600 * S)
    views, cuts = cold_start_views(events, train_end, HORIZONS, (3,), PointConfig(), config)
    assert views is not None and len(cuts) == 2
    now = views.frame["now_us"]
    assert (now < train_end).all() and (now >= cuts[0] + PointConfig().warmup_us).all()
    # rewriting every event before the first cut (as if a different past) leaves the views unchanged
    past = [replace(e, event_type=3, machine_id=99) if e.time_us < cuts[0] else e for e in trace.task_events]
    again, _ = cold_start_views(events_frame(past), train_end, HORIZONS, (3,), PointConfig(), config)
    assert again is not None and again.frame.equals(views.frame)


def test_features_and_labels_of_early_points_do_not_depend_on_how_long_the_data_runs() -> None:
    trace = generate(SyntheticConfig(seed=9, duration_s=8 * 3600, n_jobs=300))
    full = events_frame(trace.task_events)
    cut = 5 * 3600 * S
    short = full.filter(pl.col("time_us") <= cut + max(HORIZONS))
    a = build_dataset(full, HORIZONS, (3,)).frame.filter(pl.col("now_us") < cut)
    b = build_dataset(short, HORIZONS, (3,)).frame.filter(pl.col("now_us") < cut)
    assert a.height == b.height > 0
    assert a.select(TASK_FEATURE_NAMES).equals(b.select(TASK_FEATURE_NAMES))
    for label in ("y_300s", "y_900s", "y_3600s"):  # a shorter trace may censor more, never flip a label
        both = a[label].is_not_null() & b[label].is_not_null()
        assert a.filter(both)[label].equals(b.filter(both)[label])
        assert (a[label].is_not_null() | b[label].is_null()).all()
