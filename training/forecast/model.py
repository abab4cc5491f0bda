"""Quantile boosters (XGBoost ``reg:quantileerror``) on the change from the last bucket, and their ONNX export.

Each (resource, horizon, quantile) is one booster predicting ``y[k+S] - y[k]``: the level is
given, the trees only learn how it moves, so a VM at a level no training VM had is still
forecast sensibly. The ONNX graph adds the level back (``Gather`` the ``<r>_last`` column +
``Add``), so the served output is the forecast itself in percent: input ``input`` float32[N, F]
(featurelib.load_features order, NaN = missing) -> output ``forecast`` float32[N, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import onnx
import xgboost as xgb
from onnx import TensorProto, helper

from training.export_onnx import INPUT_NAME, TARGET_OPSET, ParityError, session, to_onnx

OUTPUT_NAME: Final = "forecast"
QUANTILES: Final = (0.5, 0.9)
PARITY_TOLERANCE: Final = 1e-3
"""Percentage points: ONNX sums the trees in float32, XGBoost too but in another order."""


@dataclass(frozen=True, slots=True)
class Params:
    depth: int = 6
    eta: float = 0.15
    rounds: int = 200
    patience: int = 30
    min_child_weight: float = 20.0
    subsample: float = 0.8
    colsample: float = 0.8
    threads: int = 1


def fit_quantile(x: np.ndarray, delta: np.ndarray, x_val: np.ndarray, delta_val: np.ndarray, alpha: float,
                 params: Params, seed: int) -> xgb.Booster:
    """Fit on training rows, early-stopped on ``*_val`` (other rows than the ones reported)."""
    train = xgb.DMatrix(x, label=delta)
    val = xgb.DMatrix(x_val, label=delta_val)
    config = {"objective": "reg:quantileerror", "quantile_alpha": alpha, "tree_method": "hist",
              "max_depth": params.depth, "eta": params.eta, "min_child_weight": params.min_child_weight,
              "subsample": params.subsample, "colsample_bytree": params.colsample, "nthread": params.threads,
              "seed": seed, "base_score": 0.0}
    booster = xgb.train(config, train, num_boost_round=params.rounds, evals=[(val, "val")],
                        early_stopping_rounds=params.patience if len(x_val) else None, verbose_eval=False)
    if booster.best_iteration is not None and booster.best_iteration + 1 < booster.num_boosted_rounds():
        booster = booster[: booster.best_iteration + 1]
    return booster


def predict(booster: xgb.Booster, x: np.ndarray, base_col: int) -> np.ndarray:
    """Native prediction in percent (the level plus the predicted change)."""
    x32 = np.asarray(x, dtype=np.float32)
    if not len(x32):
        return np.zeros(0)
    delta = np.asarray(booster.inplace_predict(x32), dtype=np.float32)
    return (delta + x32[:, base_col]).astype(np.float64)


def to_forecast_onnx(booster: xgb.Booster, n_features: int, base_col: int, metadata: dict[str, str]) -> bytes:
    model = to_onnx(booster, n_features, metadata)
    graph = model.graph
    raw = graph.output[0].name
    renamed = f"{raw}_delta"
    for node in graph.node:
        node.output[:] = [renamed if o == raw else o for o in node.output]
    graph.initializer.append(helper.make_tensor("base_col", TensorProto.INT64, [1], [base_col]))
    graph.node.append(helper.make_node("Gather", [INPUT_NAME, "base_col"], ["level"], axis=1))
    graph.node.append(helper.make_node("Add", [renamed, "level"], [OUTPUT_NAME]))
    del graph.output[:]
    if not any(op.domain in ("", "ai.onnx") for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", TARGET_OPSET))
    graph.output.append(helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [None, 1]))
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def onnx_forecast(data: bytes | Path, x: np.ndarray) -> np.ndarray:
    sess = session(data)
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    if not len(x32):
        return np.zeros(0)
    (out,) = sess.run([OUTPUT_NAME], {INPUT_NAME: x32})
    return np.asarray(out, dtype=np.float64)[:, 0]


def export(booster: xgb.Booster, x_check: np.ndarray, base_col: int, path: Path, metadata: dict[str, str]) -> float:
    """Write ``path`` only if ONNX reproduces the native forecast within PARITY_TOLERANCE; returns max |diff|."""
    data = to_forecast_onnx(booster, x_check.shape[1], base_col, metadata)
    expected = predict(booster, x_check, base_col)
    got = onnx_forecast(data, x_check)
    ok = ~np.isnan(expected)
    diff = float(np.max(np.abs(expected[ok] - got[ok]))) if ok.any() else 0.0
    if not diff <= PARITY_TOLERANCE or not np.array_equal(np.isnan(expected), np.isnan(got)):
        raise ParityError(f"ONNX parity check failed for {path.name}: max |onnx - xgboost| = {diff:.3g} "
                          f"percentage points > {PARITY_TOLERANCE:g} on {len(x_check):,} rows")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return diff
