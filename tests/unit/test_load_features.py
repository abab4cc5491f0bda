"""featurelib.load_features: the online history and the batch matrix agree bit for bit; no future data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from featurelib.load_features import (
    DAY,
    LOAD_FEATURE_INDEX,
    LOAD_FEATURE_NAMES,
    N_LOAD_FEATURES,
    STEP_S,
    LoadHistory,
    bucketize,
    load_feature_schema_hash,
    load_features_matrix,
)

T0 = 1_372_629_804.0  # a Bitbrains timestamp (not on the 300 s grid)


def generated(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Irregular samples: several per bucket, gaps, late samples and NaNs."""
    rng = np.random.default_rng(seed)
    steps = rng.choice([10.0, 60.0, 299.0, 300.0, 301.0, 1500.0], size=n, p=[0.3, 0.2, 0.1, 0.3, 0.07, 0.03])
    t = T0 + np.cumsum(steps)
    late = rng.random(n) < 0.02
    t[late] -= 700.0
    cpu = rng.random(n) * 100.0
    mem = 30.0 + rng.random(n) * 40.0
    cpu[rng.random(n) < 0.05] = np.nan
    mem[rng.random(n) < 0.05] = np.nan
    return t, cpu, mem


def online(t: np.ndarray, cpu: np.ndarray, mem: np.ndarray) -> dict[int, list[float]]:
    history = LoadHistory()
    out: dict[int, list[float]] = {}
    for ti, c, m in zip(t, cpu, mem, strict=True):
        k = history.observe(float(ti), float(c), float(m))
        if k is not None:
            vector = history.features()
            assert vector is not None
            out[k] = vector
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_online_equals_batch_bit_for_bit(seed: int) -> None:
    t, cpu, mem = generated(seed, 2500)
    first, buckets = bucketize(t, cpu, mem)
    matrix = load_features_matrix(first, buckets)
    vectors = online(t, cpu, mem)
    assert len(vectors) > 500
    for k, vector in vectors.items():
        row = matrix[k - first]
        assert len(vector) == N_LOAD_FEATURES
        assert np.array_equal(np.asarray(vector), row, equal_nan=True), k
    # deep history was exercised: the seasonal (1 day) lag is set on some rows
    assert np.isfinite(matrix[:, LOAD_FEATURE_INDEX["cpu_day_h0"]]).any()


def test_close_on_time_alone_and_late_samples() -> None:
    history = LoadHistory()
    assert history.observe(600.0, 10.0, 20.0) is None
    assert history.observe(650.0, 30.0, math.nan) is None
    assert history.close(899.0) is None
    assert history.close(900.0) == 2
    vector = history.features()
    assert vector is not None
    assert vector[LOAD_FEATURE_INDEX["cpu_last"]] == 20.0
    assert vector[LOAD_FEATURE_INDEX["mem_last"]] == 20.0
    assert history.observe(700.0, 99.0, 99.0) is None  # bucket 2 is closed: late, dropped
    assert history.late == 1


def test_hand_computed_features() -> None:
    # one sample per bucket, value = bucket number; bucket k ends at (k + 1) * 300
    n = DAY + 20
    t = np.arange(n) * float(STEP_S) + 5.0
    cpu = np.arange(n, dtype=float)
    mem = np.full(n, 50.0)
    first, buckets = bucketize(t, cpu, mem)
    row = load_features_matrix(first, buckets)[n - 1]
    k = n - 1
    f = {name: row[i] for i, name in enumerate(LOAD_FEATURE_NAMES)}
    assert f["cpu_last"] == k
    assert f["cpu_lag12"] == k - 12
    assert f["cpu_mean_15m"] == pytest.approx(k - 1)
    assert f["cpu_mean_1h"] == pytest.approx(k - 5.5)
    assert f["cpu_min_1h"] == k - 11
    assert f["cpu_max_1h"] == k
    assert f["cpu_std_1h"] == pytest.approx(np.std(np.arange(12.0)))
    assert f["cpu_day_h0"] == k - DAY
    assert f["cpu_day_h6"] == k + 6 - DAY
    assert f["mem_std_1h"] == 0.0
    assert f["cpu_valid_1h"] == 1.0
    assert f["hour_of_day"] == pytest.approx(((k + 1) * 300 % 86_400) / 3600)
    assert f["day_of_week"] == 4.0  # 1970-01-02 is a Friday


def test_no_future_data() -> None:
    """Changing every value after bucket k leaves the features at buckets <= k unchanged (both paths)."""
    t, cpu, mem = generated(5, 2000)
    first, buckets = bucketize(t, cpu, mem)
    before = load_features_matrix(first, buckets)
    k = first + len(buckets) // 2
    later = t >= (k + 1) * STEP_S
    cpu2, mem2 = cpu.copy(), mem.copy()
    cpu2[later] = 100.0 - np.nan_to_num(cpu2[later])
    mem2[later] = 1.0
    first2, buckets2 = bucketize(t, cpu2, mem2)
    after = load_features_matrix(first2, buckets2)
    upto = k - first + 1
    assert first2 == first
    assert np.array_equal(before[:upto], after[:upto], equal_nan=True)
    assert not np.array_equal(before[upto:], after[upto:], equal_nan=True)  # the change is visible later
    on1, on2 = online(t, cpu, mem), online(t, cpu2, mem2)
    assert all(np.array_equal(on1[b], on2[b], equal_nan=True) for b in on1 if b <= k)


def test_schema_hash_is_stable_and_names_unique() -> None:
    assert len(set(LOAD_FEATURE_NAMES)) == N_LOAD_FEATURES
    assert load_feature_schema_hash() == load_feature_schema_hash()
    assert len(load_feature_schema_hash()) == 64


def test_selected_rows_equal_the_full_matrix() -> None:
    t, cpu, mem = generated(7, 1500)
    first, buckets = bucketize(t, cpu, mem)
    rows = np.array([0, 3, len(buckets) // 2, len(buckets) - 1])
    assert np.array_equal(load_features_matrix(first, buckets, rows), load_features_matrix(first, buckets)[rows],
                          equal_nan=True)
