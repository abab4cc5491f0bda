"""Prediction points and leakage-safe failure labels.

Prediction points (task, now_us) -- every one is a moment at which the task is
running, decided from events at or before ``now_us`` only:

* ``schedule``: each time a task is SCHEDULEd (and still running once every
  event at that microsecond has been applied);
* ``checkpoint``: every ``checkpoint_every_us`` on the absolute grid
  (multiples of it) while the task keeps running, i.e. what a risk service
  scoring all running tasks periodically sees.

Subjects are tasks whose first observed event is a SUBMIT after time 0:
tasks present at trace start (time 0) or whose start lies before the data
(a directory of later parts) have unknown history and are left out
(censored start). No point is taken before ``data_start + warmup_us`` (data
start = first event after time 0), so windowed history is filled.

Label for horizon H: the run's outcome is the task's next lifecycle event
(SUBMIT..LOST) strictly after ``now_us``. ``y = 1`` when that is a terminal
event in the failure set within ``(now, now + H]``; ``y = 0`` when it is a
terminal event outside the set within H, or nothing ends the run within H and
``now + H`` is still inside the data. Censored (``null``, excluded): the run
is still open at the end of the data and ``now + H`` lies beyond it, or the
next lifecycle event within H is a SUBMIT/SCHEDULE (a missing terminal record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

from featurelib.task_features import TERMINAL_EVENTS, EventType
from training.errors import DataError

FAILURE_EVENT_NAMES: Final = {"FAIL": EventType.FAIL, "EVICT": EventType.EVICT, "KILL": EventType.KILL,
                              "LOST": EventType.LOST}
_TASK: Final = ["job_id", "task_index"]
_LIFECYCLE: Final = (0, 1, 2, 3, 4, 5, 6)
_STOPS: Final = (0, 2, 3, 4, 5, 6)


@dataclass(frozen=True, slots=True)
class PointConfig:
    checkpoint_every_us: int = 1_800_000_000
    warmup_us: int = 3_600_000_000
    whole_task_censoring: bool = False
    """True: drop every task present at time 0. False: drop only their runs in progress at time 0."""


def label_column(horizon_us: int) -> str:
    return f"y_{horizon_us // 1_000_000}s"


def parse_failure_events(text: str) -> tuple[int, ...]:
    """``"FAIL,EVICT"`` -> event type codes; raises ValueError on unknown names."""
    names = [n.strip().upper() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAILURE_EVENT_NAMES]
    if unknown or not names:
        raise ValueError(f"unknown failure event {', '.join(unknown) or '(none)'}; "
                         f"choose from {', '.join(FAILURE_EVENT_NAMES)}")
    return tuple(sorted({int(FAILURE_EVENT_NAMES[n]) for n in names}))


def data_bounds(events: pl.DataFrame) -> tuple[int, int]:
    """(first event time after 0, last event time) of a canonical events frame."""
    start = events.filter(pl.col("time_us") > 0).select(pl.col("time_us").min()).item()
    end = events.select(pl.col("time_us").max()).item()
    if start is None or end is None:
        raise DataError("no events after time 0: nothing to predict")
    return int(start), int(end)


def prediction_points(events: pl.DataFrame, config: PointConfig = PointConfig()) -> pl.DataFrame:
    """Points ``job_id, task_index, now_us, kind, next_us, next_type``, sorted by ``now_us``."""
    start, end = data_bounds(events)
    et = pl.col("event_type").cast(pl.Int64)
    ev = events.select("time_us", *_TASK, et.alias("event_type")).sort("time_us", maintain_order=True)
    first = ev.group_by(_TASK, maintain_order=True).agg(pl.col("time_us").first().alias("t0"),
                                                         pl.col("event_type").first().alias("e0"))
    if config.whole_task_censoring:
        subjects = first.filter((pl.col("t0") > 0) & (pl.col("e0") == EventType.SUBMIT)).select(_TASK)
        ev = ev.join(subjects, on=_TASK, how="semi", maintain_order="left")
    etc = pl.col("event_type")
    state = ev.with_columns(
        pl.when(etc == 1).then(True).when(etc.is_in(_STOPS)).then(False)
        .forward_fill().over(_TASK).fill_null(False).alias("running"),
        (etc == 1).any().over([*_TASK, "time_us"]).alias("scheduled_now"),
    ).unique([*_TASK, "time_us"], keep="last", maintain_order=True)
    sched = state.filter(pl.col("running") & pl.col("scheduled_now") & (pl.col("time_us") > 0)).select(
        *_TASK, pl.col("time_us").alias("now_us"))
    outcome = (ev.filter(etc.is_in(_LIFECYCLE)).unique([*_TASK, "time_us"], keep="first", maintain_order=True)
               .select(*_TASK, pl.col("time_us").alias("next_us"), pl.col("event_type").alias("next_type")))
    sched = sched.sort("now_us").join_asof(
        outcome, left_on="now_us", right_on="next_us", by=_TASK, strategy="forward",
        allow_exact_matches=False, check_sortedness=False, coalesce=False,
    ).drop([f"{c}_right" for c in _TASK], strict=False)
    step = config.checkpoint_every_us
    run_end = pl.coalesce(pl.col("next_us") - 1, pl.lit(end))
    checkpoints = (
        sched.with_columns(pl.int_ranges(pl.col("now_us") // step + 1, run_end // step + 1).alias("_k"))
        .explode("_k").drop_nulls("_k")
        .with_columns((pl.col("_k") * step).alias("now_us"), pl.lit("checkpoint").alias("kind")).drop("_k")
    )
    points = pl.concat([sched.with_columns(pl.lit("schedule").alias("kind")), checkpoints.select(
        *_TASK, "now_us", "next_us", "next_type", "kind")], how="diagonal")
    points = points.filter(pl.col("now_us") >= start + config.warmup_us)
    return points.select(*_TASK, "now_us", "kind", "next_us", "next_type").sort(
        "now_us", *_TASK, maintain_order=True)


def add_labels(points: pl.DataFrame, horizons_us: tuple[int, ...], failure_types: tuple[int, ...],
               data_end_us: int) -> pl.DataFrame:
    """One nullable Int8 label column per horizon (``label_column(H)``); null = censored."""
    nxt, now, typ = pl.col("next_us"), pl.col("now_us"), pl.col("next_type")
    cols = []
    for h in horizons_us:
        within = nxt.is_not_null() & (nxt - now <= h)
        y = (
            pl.when(within & typ.is_in(TERMINAL_EVENTS)).then(typ.is_in(failure_types).cast(pl.Int8))
            .when(nxt.is_not_null() & (nxt - now > h)).then(pl.lit(0, pl.Int8))
            .when(nxt.is_null() & (now + h <= data_end_us)).then(pl.lit(0, pl.Int8))
            .otherwise(pl.lit(None, pl.Int8))
        )
        cols.append(y.alias(label_column(h)))
    return points.with_columns(cols)
