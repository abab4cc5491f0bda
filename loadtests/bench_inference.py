"""`borgctl bench inference`: XGBoost native vs onnxruntime, single rows and batches.

The stream services choose their inference path from these numbers: onnxruntime per
message (low single-row latency), batched calls where a stage sees many rows at once.
Shipped ONNX models under models/*/CURRENT are measured too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loadtests.bench_format import ROOT, Result, percentile

N_FEATURES = 32


def _time_calls(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _xgb_vs_onnx(quick: bool) -> list[Result]:
    import onnxruntime as ort
    import xgboost as xgb
    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    rng = np.random.default_rng(7)
    x = rng.normal(size=(5000, N_FEATURES)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.5, size=5000) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=200, max_depth=6, n_jobs=1, tree_method="hist")
    model.fit(x, y)
    onnx_model = convert_xgboost(model, initial_types=[("input", FloatTensorType([None, N_FEATURES]))], target_opset=15)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    booster = model.get_booster()
    booster.set_param({"nthread": 1})
    results: list[Result] = []
    repeats = 200 if quick else 1000
    for rows in (1, 100, 10_000):
        batch = rng.normal(size=(rows, N_FEATURES)).astype(np.float32)
        reps = max(5, repeats // max(1, rows // 100))
        def dmatrix_fn(b: np.ndarray = batch) -> object:
            return booster.inplace_predict(b)

        def onnx_fn(b: np.ndarray = batch) -> object:
            return session.run(None, {"input": b})

        for engine, fn in (("xgboost", dmatrix_fn), ("onnxruntime", onnx_fn)):
            samples = _time_calls(fn, reps)
            p50 = percentile(samples, 50)
            results.append(Result("inference", f"{engine} rows={rows}", "latency_p50", p50, "ms", offered=rows))
            results.append(
                Result("inference", f"{engine} rows={rows}", "latency_p99", percentile(samples, 99), "ms", offered=rows)
            )
            results.append(
                Result("inference", f"{engine} rows={rows}", "throughput", rows / (p50 / 1000), "rows/s", offered=rows)
            )
    return results


def _shipped_models(quick: bool) -> list[Result]:
    import onnxruntime as ort

    results: list[Result] = []
    for current in sorted((ROOT / "models").glob("*/CURRENT")):
        version_dir = current.parent / current.read_text().strip()
        for path in sorted(version_dir.glob("*.onnx")):
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            inp = session.get_inputs()[0]
            if len(inp.shape) != 2 or "float" not in inp.type:
                continue  # not a row model (the placement Q-table takes one integer state key per row)
            width = inp.shape[1] if isinstance(inp.shape[1], int) else N_FEATURES
            for rows in (1, 1000):
                batch = np.random.default_rng(1).normal(size=(rows, width)).astype(np.float32)
                def run(b: np.ndarray = batch, s: ort.InferenceSession = session, n: str = inp.name) -> object:
                    return s.run(None, {n: b})

                # --quick is the format check `make test` runs: 21 models × 2 sizes, so few calls each
                samples = _time_calls(run, (20 if rows == 1 else 5) if quick else 500)
                case = f"{current.parent.name}/{Path(path).stem} rows={rows}"
                results.append(Result("inference", case, "latency_p99", percentile(samples, 99), "ms", offered=rows))
    return results


def run_inference_bench(quick: bool) -> list[Result]:
    return _xgb_vs_onnx(quick) + _shipped_models(quick)
