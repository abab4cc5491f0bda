"""`borgctl bench pipeline`: its step plan from the environment (defaults, overrides, errors that name the
variable) and the per-second tail count."""

from __future__ import annotations

import pytest

from borgctl.errors import UserError
from loadtests.bench_pipeline import (
    FEATURES_WORKERS,
    MIN_STEP_S,
    STRETCH_NODES,
    TARGET_NODES,
    features_env,
    features_workers,
    seconds_over,
    step_plan,
)


def test_defaults_and_overrides() -> None:
    assert step_plan({}, quick=True) == ([2000, TARGET_NODES], 30.0)
    steps, seconds = step_plan({}, quick=False)
    assert STRETCH_NODES in steps and seconds == 45.0
    env = {"BENCH_PIPELINE_STEPS": "10000", "BENCH_PIPELINE_STEP_S": "120"}
    assert step_plan(env, quick=False) == ([10_000], 120.0)
    assert step_plan({"BENCH_PIPELINE_STEPS": "", "BENCH_PIPELINE_STEP_S": ""}, quick=True) == ([2000, TARGET_NODES],
                                                                                              30.0)


@pytest.mark.parametrize(("name", "value"), [
    ("BENCH_PIPELINE_STEPS", "10k"), ("BENCH_PIPELINE_STEPS", "1000,,2000"), ("BENCH_PIPELINE_STEPS", "0"),
    ("BENCH_PIPELINE_STEP_S", "ten"), ("BENCH_PIPELINE_STEP_S", "10"), ("BENCH_PIPELINE_STEP_S", "nan"),
])
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(UserError, match=f"{name}='{value}'"):
        step_plan({name: value}, quick=False)


def test_the_shortest_step_is_one_that_measures_something() -> None:
    assert step_plan({"BENCH_PIPELINE_STEP_S": str(MIN_STEP_S)}, quick=False)[1] == MIN_STEP_S


def test_seconds_over_counts_seconds_by_their_own_p99() -> None:
    calm = [(100, 50.0)] * 200
    burst = [(101, 40.0)] * 150 + [(101, 900.0)] * 5  # 5 of 155 over: its p99 is over 250
    edge = [(102, 40.0)] * 199 + [(102, 260.0)]  # 1 of 200: its p99 is 40
    slow = [(103, 300.0)] * 3
    rows = calm + burst + edge + slow
    seconds, latencies = [s for s, _ in rows], [v for _, v in rows]
    assert seconds_over(seconds, latencies, 250.0) == 2  # 101 and 103
    assert seconds_over(seconds, latencies, 1000.0) == 0
    assert seconds_over([], [], 250.0) == 0


def test_features_workers_default_and_override() -> None:
    assert features_workers({}) == FEATURES_WORKERS == 2  # as deploy/base/features runs it
    assert features_workers({"BENCH_FEATURES_WORKERS": ""}) == 2
    assert features_workers({"BENCH_FEATURES_WORKERS": "1"}) == 1
    assert features_workers({"BENCH_FEATURES_WORKERS": "6"}) == 6


@pytest.mark.parametrize("raw", ["0", "7", "two", "-1"])
def test_bad_features_workers_name_the_variable(raw: str) -> None:
    with pytest.raises(UserError, match="BENCH_FEATURES_WORKERS"):
        features_workers({"BENCH_FEATURES_WORKERS": raw})


def test_features_linger_goes_to_the_features_processes_only() -> None:
    assert features_env({}) == {} == features_env({"BENCH_FEATURES_LINGER_S": ""})
    assert features_env({"BENCH_FEATURES_LINGER_S": "0.01"}) == {"STREAM_BATCH_LINGER_S": "0.01"}
    for raw in ("-1", "6", "soon", "nan"):
        with pytest.raises(UserError, match="BENCH_FEATURES_LINGER_S"):
            features_env({"BENCH_FEATURES_LINGER_S": raw})
