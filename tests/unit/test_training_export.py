"""ONNX export: parity with XGBoost (NaN = missing), refusal when parity fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import xgboost as xgb

from featurelib.task_features import TASK_FEATURE_NAMES, task_feature_schema_hash
from training.export_onnx import ParityError, export_with_parity, onnx_probability, session
from training.failure_model import DEFAULT_PARAMS, FitConfig, fit_failure_model

N = len(TASK_FEATURE_NAMES)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, N)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = np.nan
    y = ((np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 9]) + rng.normal(size=len(x))) > 2.0).astype(np.float64)
    return x, y


@pytest.fixture(scope="module")
def booster(data: tuple[np.ndarray, np.ndarray]) -> xgb.Booster:
    x, y = data
    config = FitConfig(max_rounds=60, early_stopping_rounds=10, min_rounds=20, negative_rate=0.5)
    fitted = fit_failure_model(x[:2500], y[:2500], x[3000:], y[3000:], x[:3000], y[:3000], seed=0, config=config)
    assert fitted.rounds >= 20
    return fitted.booster


def test_export_matches_xgboost_within_tolerance(booster: xgb.Booster, data: tuple[np.ndarray, np.ndarray],
                                                 tmp_path: Path) -> None:
    x, _ = data
    path = tmp_path / "horizon_300s.onnx"
    parity = export_with_parity(booster, x, path, {"feature_schema_hash": task_feature_schema_hash()})
    assert parity.max_abs_diff <= 1e-5
    expected = booster.predict(xgb.DMatrix(x))
    assert np.max(np.abs(onnx_probability(session(path), x) - expected)) <= 1e-5
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert props["feature_schema_hash"] == task_feature_schema_hash()


def test_export_refuses_when_parity_fails(booster: xgb.Booster, data: tuple[np.ndarray, np.ndarray],
                                          tmp_path: Path) -> None:
    path = tmp_path / "horizon_300s.onnx"
    with pytest.raises(ParityError, match="parity check failed"):
        export_with_parity(booster, data[0], path, {}, tolerance=-1.0)
    assert not path.exists()


def test_named_features_are_rejected(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    x, y = data
    named = xgb.train(dict(DEFAULT_PARAMS), xgb.DMatrix(x, label=y, feature_names=list(TASK_FEATURE_NAMES)), 2)
    with pytest.raises(ValueError, match=r"f0\.\.fN"):
        export_with_parity(named, x, tmp_path / "m.onnx", {})
