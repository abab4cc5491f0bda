"""The regime trainer's recipe options reach the fitted models (learning rate; argument checks)."""

from __future__ import annotations

import numpy as np

from featurelib.node.schema import N_FEATURES
from training.regime.cli import _args
from training.regime.model import LEARNING_RATE, fit_regime_models, regime_feature_names


def test_learning_rate_reaches_classifier_and_regressors() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, N_FEATURES)).astype(np.float32)
    regime = np.arange(200) % 5
    slowdown = 1.0 + rng.random((200, 4))
    models = fit_regime_models(x, regime, slowdown, trees=3, depth=2, seed=0, learning_rate=0.05,
                               feature_names=regime_feature_names("contention"))
    assert models.classifier.get_params()["learning_rate"] == 0.05
    assert {r.get_params()["learning_rate"] for r in models.interference} == {0.05}


def test_learning_rate_option_default_and_bounds() -> None:
    assert _args([]).learning_rate == LEARNING_RATE
    assert _args(["--learning-rate", "0.05"]).learning_rate == 0.05
    for bad in ("0", "1.5"):
        try:
            _args(["--learning-rate", bad])
        except SystemExit as exc:
            assert "learning-rate" in str(exc.code)
        else:
            raise AssertionError(f"--learning-rate {bad} accepted")
