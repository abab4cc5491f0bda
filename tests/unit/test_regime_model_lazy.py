"""The regime model runs its interference regressors only on rows it answers; those rows are unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from featurelib.node.schema import N_FEATURES
from services.regime.model import MAX_SLOWDOWN, RegimeModel, load_regime_model
from services.runtime.model_watch import resolve

ROOT = Path(__file__).resolve().parents[2]


def _full_slowdown(model: RegimeModel, x_full: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x_full[:, model.columns], dtype=np.float32)
    logs = np.concatenate(
        [
            np.asarray(s.run(None, {model.input_name: x})[0], dtype=np.float64).reshape(-1, 1)
            for s in model.interference
        ],
        axis=1,
    )
    out: np.ndarray = np.clip(np.exp(logs), 1.0, MAX_SLOWDOWN)
    return out


def test_abstained_rows_skip_the_regressors_and_answered_rows_match(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_regime_model(resolve(ROOT / "models" / "regime"))
    rng = np.random.default_rng(5)
    x_full = rng.uniform(0.0, 2.0, size=(6, N_FEATURES)).astype(np.float32)
    mask = np.array([1, 0, 4, 0, 0, 2], dtype=np.uint8)  # rows 1, 3, 4 answered
    calls: list[int] = []
    original = model.judge

    def judge(x: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append(len(x))
        return mask[: len(x)], original(x, probs)[1]

    monkeypatch.setattr(RegimeModel, "judge", lambda self, x, p: judge(x, p))
    probs, slowdown = model(x_full)
    assert calls == [6]
    expected = _full_slowdown(model, x_full)
    answered = mask == 0
    np.testing.assert_array_equal(slowdown[answered], expected[answered])
    np.testing.assert_array_equal(slowdown[~answered], np.ones((3, len(model.interference))))
    assert probs.shape == (6, len(model.regimes))
    # nothing answered: no regressor runs at all, and every row reads 1.0
    mask[:] = 1
    _, none = model(x_full)
    np.testing.assert_array_equal(none, np.ones_like(none))
