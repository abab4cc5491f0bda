"""The default model shipped in models/failure matches this code's features and loads (no data needed)."""

from __future__ import annotations

import numpy as np
import orjson

from featurelib.task_features import TASK_FEATURE_NAMES, task_feature_schema_hash
from training import settings
from training.export_onnx import onnx_probability, session
from training.model_card import CARD_FILE, horizon_file, resolve_model_dir, sha256_file


def test_shipped_model_is_current_intact_and_matches_the_feature_schema() -> None:
    version_dir = resolve_model_dir(settings.DEFAULT_MODEL_DIR)
    card = orjson.loads((version_dir / CARD_FILE).read_bytes())
    assert card["features"]["schema_hash"] == task_feature_schema_hash(), (
        "featurelib/task_features.py changed since the shipped model was trained: retrain it "
        "(borgctl train failure) and commit the new version")
    assert card["features"]["names"] == list(TASK_FEATURE_NAMES)
    for name, digest in card["onnx"]["sha256"].items():
        assert sha256_file(version_dir / name) == digest
    assert card["training_command"] and card["data"]["fingerprint"]
    x = np.full((3, len(TASK_FEATURE_NAMES)), np.nan, dtype=np.float32)
    x[1] = 1.0
    for horizon_s in card["label"]["horizons_s"]:
        prob = onnx_probability(session(version_dir / horizon_file(horizon_s * 1_000_000)), x)
        assert prob.shape == (3,) and np.all((prob >= 0) & (prob <= 1))
