"""The risk service publishes the card's calibrated probability: np.interp(score, x, y) per horizon, both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from services.risk.model import calibration_tables, load_failure_model
from services.runtime.model_watch import ModelRefusedError
from tests.unit.test_risk_service import HORIZONS, _points, synthetic_task_events, train_provisional_failure_model


def with_calibration(vdir: Path, tables: dict[str, Any]) -> Path:
    card = orjson.loads((vdir / "model_card.json").read_bytes())
    card["calibration"] = {"method": "isotonic", "horizons": tables}
    (vdir / "model_card.json").write_bytes(orjson.dumps(card))
    return vdir


def test_calibrated_probabilities_follow_the_table_on_both_backends(tmp_path: Path) -> None:
    vdir = train_provisional_failure_model(tmp_path / "raw")
    x, _ = _points(synthetic_task_events(seed=3), True, 3)
    (raw,) = load_failure_model(vdir)(x)
    # halve every score at 300 s; 900 s maps [0, 1] onto [0.1, 0.2]; 3600 s has no table (published as is)
    with_calibration(vdir, {"300s": {"x": [0.0, 1.0], "y": [0.0, 0.5]}, "900s": {"x": [0.0, 1.0], "y": [0.1, 0.2]}})
    model = load_failure_model(vdir, xgb_min_batch=10)
    assert model.backend_for(len(x)) == "xgboost" and model.backend_for(1) == "onnxruntime"
    (big,) = model(x)
    small = np.concatenate([model(x[i: i + 1])[0] for i in range(len(x))])
    for probs in (big, small):
        np.testing.assert_allclose(probs[:, 0], raw[:, 0] * 0.5, atol=1e-5)
        np.testing.assert_allclose(probs[:, 1], 0.1 + 0.1 * raw[:, 1], atol=1e-5)
        np.testing.assert_allclose(probs[:, 2], raw[:, 2], atol=1e-5)


def test_a_card_without_calibration_publishes_the_score(tmp_path: Path) -> None:
    assert load_failure_model(train_provisional_failure_model(tmp_path, boosters=False)).calibration == ()


@pytest.mark.parametrize("table", [
    {"x": [0.0], "y": [0.0]},  # one knot
    {"x": [0.0, 0.5, 0.5, 1.0], "y": [0, 0.1, 0.2, 1]},  # x not strictly increasing
    {"x": [0.0, 1.0], "y": [0.6, 0.2]},  # decreasing
    {"x": [0.0, 1.0], "y": [0.0, 1.5]},  # not a probability
    {"x": [0.0, 1.0], "y": [0.0]},
])
def test_a_malformed_table_is_refused(tmp_path: Path, table: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not an increasing map"):
        calibration_tables({"calibration": {"horizons": {"300s": table}}}, HORIZONS)
    vdir = with_calibration(train_provisional_failure_model(tmp_path, boosters=False), {"900s": table})
    with pytest.raises(ModelRefusedError, match="horizon 900s"):
        load_failure_model(vdir)
