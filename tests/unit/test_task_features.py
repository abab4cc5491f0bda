"""The online state machine and the polars twin agree exactly, and neither reads the future."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featurelib.task_features import (
    TASK_FEATURE_NAMES,
    TaskEvent,
    TaskHistory,
    task_feature_schema_hash,
    task_features_frame,
)
from training.synthetic_trace import SyntheticConfig, events_frame, generate

QUERY_SCHEMA = {"job_id": pl.Int64, "task_index": pl.Int64, "now_us": pl.Int64}


def online_features(events: list[TaskEvent], queries: list[tuple[int, int, int]]) -> np.ndarray:
    """Drive TaskHistory like the risk service: observe in stream order, query at ``now``."""
    stream = sorted(events, key=lambda e: e.time_us)
    history = TaskHistory()
    out = np.zeros((len(queries), len(TASK_FEATURE_NAMES)))
    i = 0
    for q in sorted(range(len(queries)), key=lambda k: queries[k][2]):
        job_id, task_index, now = queries[q]
        while i < len(stream) and stream[i].time_us <= now:
            history.observe(stream[i])
            i += 1
        out[q] = history.features((job_id, task_index), now)
    return out


def offline_features(events: list[TaskEvent], queries: list[tuple[int, int, int]]) -> np.ndarray:
    frame = task_features_frame(events_frame(events), pl.DataFrame(queries, schema=QUERY_SCHEMA, orient="row"))
    return frame.select(TASK_FEATURE_NAMES).to_numpy()


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    bad = [TASK_FEATURE_NAMES[j] for j in np.where(~same.all(axis=0))[0]]
    assert not bad, f"online and offline differ on {bad}"


def test_schema_names_are_unique_and_hash_is_stable() -> None:
    assert len(set(TASK_FEATURE_NAMES)) == len(TASK_FEATURE_NAMES)
    assert task_feature_schema_hash() == task_feature_schema_hash()
    assert len(task_feature_schema_hash()) == 64


@pytest.mark.parametrize("seed", [1, 7])
def test_online_and_offline_features_are_identical_on_a_synthetic_trace(seed: int) -> None:
    trace = generate(SyntheticConfig(seed=seed, duration_s=4 * 3600, n_jobs=120))
    rng = random.Random(seed)
    keys = sorted({(int(e.job_id), e.task_index) for e in trace.task_events})
    queries = [(int(e.job_id), e.task_index, e.time_us) for e in trace.task_events if e.event_type == 1]
    queries += [(*rng.choice(keys), rng.randrange(0, trace.end_us)) for _ in range(600)]
    queries += [(424242, 0, trace.end_us), (keys[0][0], 999, trace.end_us)]  # unknown task / job
    assert_same(online_features(trace.task_events, queries), offline_features(trace.task_events, queries))


_times = st.integers(min_value=0, max_value=9) .map(lambda k: k * 1_000_000_000)
_event = st.builds(
    TaskEvent,
    time_us=st.one_of(_times, st.integers(min_value=0, max_value=9_000_000_000)),
    job_id=st.sampled_from([1, 2, 3]),
    task_index=st.sampled_from([0, 1, 2]),
    event_type=st.integers(min_value=0, max_value=8),
    machine_id=st.sampled_from([None, 10, 11, 12]),
    user=st.sampled_from([None, "", "alice", "bob"]),
    scheduling_class=st.sampled_from([None, 0, 3]),
    priority=st.sampled_from([None, 0, 9]),
    cpu_request=st.sampled_from([None, 0.125, 0.0625, 0.3, math.nan]),
    memory_request=st.sampled_from([None, 0.07446, 0.0311, math.nan]),
    disk_request=st.sampled_from([None, 0.0004244]),
    different_machines_restriction=st.sampled_from([None, 0, 1]),
)


@settings(max_examples=40, deadline=None)
@given(events=st.lists(_event, min_size=1, max_size=40),
       query_times=st.lists(st.integers(min_value=0, max_value=10_000_000_000), min_size=1, max_size=8))
def test_parity_holds_on_arbitrary_event_streams(events: list[TaskEvent], query_times: list[int]) -> None:
    """Ties, terminal events for pending tasks, missing machines/users/requests, NaN requests."""
    queries = [(job, task, t) for t in query_times for job in (1, 2, 3) for task in (0, 1, 2)]
    assert_same(online_features(events, queries), offline_features(events, queries))


def _future_noise(events: list[TaskEvent], after_us: int, seed: int) -> list[TaskEvent]:
    rng = random.Random(seed)
    later = []
    for e in rng.sample(events, 300):
        later.append(replace(e, time_us=after_us + rng.randrange(1, 5_000_000_000), event_type=rng.randrange(9),
                             cpu_request=rng.random(), machine_id=rng.choice([e.machine_id, 77, None])))
    return later


def test_no_feature_reads_events_after_the_prediction_time() -> None:
    trace = generate(SyntheticConfig(seed=3, duration_s=4 * 3600, n_jobs=120))
    cut = trace.end_us // 2
    past = [e for e in trace.task_events if e.time_us <= cut]
    rng = random.Random(0)
    keys = sorted({(int(e.job_id), e.task_index) for e in past})
    queries = [(*rng.choice(keys), rng.randrange(cut // 2, cut + 1)) for _ in range(400)]
    queries += [(int(e.job_id), e.task_index, cut) for e in past[-50:]]
    reference = offline_features(past, queries)
    # the real future, and a perturbed one: neither may change features at or before the cut
    assert_same(reference, offline_features(trace.task_events, queries))
    assert_same(reference, offline_features(trace.task_events + _future_noise(trace.task_events, cut, 1), queries))
    assert_same(reference, online_features(trace.task_events + _future_noise(trace.task_events, cut, 2), queries))


def test_running_totals_follow_a_task_across_machines() -> None:
    h = TaskHistory()
    base = TaskEvent(time_us=0, job_id=1, task_index=0, event_type=0, user="u", cpu_request=0.25,
                     memory_request=0.5)
    for t, et, m in [(1, 0, None), (2, 1, 10), (3, 2, 10), (4, 0, None), (5, 1, 11)]:
        h.observe(replace(base, time_us=t * 1_000_000, event_type=et, machine_id=m))
    f = dict(zip(TASK_FEATURE_NAMES, h.features((1, 0), 5_000_000), strict=True))
    assert f["machine_running_tasks"] == 1.0 and f["machine_cpu_requested"] == 0.25
    assert f["task_evicts"] == 1.0 and f["task_submits"] == 2.0 and f["prev_run_s"] == 1.0
    assert f["user_running_tasks"] == 1.0 and f["job_tasks_running"] == 1.0 and f["is_running"] == 1.0
    assert f["machine_evicts_1h"] == 0.0 and f["machine_schedules_1h"] == 1.0  # the evict was on machine 10
    assert f["last_end_type"] == 2.0 and f["secs_since_evict"] == 2.0
