"""The regime model's abstention rules (services/regime/abstention.py, RegimeModel.judge): each reason on
a constructed window, the card section's parsing and refusal, and the shipped model answering windows of
its training kinds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from featurelib.node.schema import FEATURE_INDEX, N_FEATURES
from services.regime import abstention
from services.regime.model import load_regime_model
from services.runtime.model_watch import ModelRefusedError, resolve
from simulator import holdout_split
from training.regime.simwindows import simulate_windows

ROOT = Path(__file__).resolve().parents[2]
A, B, C = FEATURE_INDEX["ipc_mean_10s"], FEATURE_INDEX["cache_mpki_mean_10s"], FEATURE_INDEX["membw_gbs_mean_10s"]
RULES = abstention.Rules(required=(A,), ood_columns=(B, C), ood_center=(10.0, 50.0), ood_scale=(2.0, 5.0),
                         ood_threshold=2.0, confidence_floor=0.6)


def rows(*values: tuple[float, float, float]) -> np.ndarray:
    x = np.full((len(values), N_FEATURES), 0.5, dtype=np.float32)
    for i, (a, b, c) in enumerate(values):
        x[i, [A, B, C]] = (a, b, c)
    return x


def confident(n: int, top: float = 0.9) -> np.ndarray:
    p = np.full((n, 5), (1 - top) / 4)
    p[:, 0] = top
    return p


def test_a_training_like_window_is_answered() -> None:
    mask, score = abstention.judge(rows((1.0, 10.0, 50.0)), confident(1), RULES)
    assert mask.tolist() == [0]
    assert score[0] == 0.0


def test_each_reason_triggers_on_its_own() -> None:
    x = rows((np.nan, 10.0, 50.0),   # IPC invalid: counters missing
             (1.0, 22.0, 50.0),      # |z| = 6, 0 → mean 3 → score 1.5 > 1: out of distribution
             (1.0, 10.0, 50.0))      # in distribution but not confident
    probs = np.vstack([confident(2), confident(1, top=0.5)])
    mask, score = abstention.judge(x, probs, RULES)
    assert mask.tolist() == [abstention.COUNTERS_MISSING, abstention.OUT_OF_DISTRIBUTION, abstention.LOW_CONFIDENCE]
    assert score[1] == pytest.approx(1.5)
    assert [abstention.reasons_of(int(m)) for m in mask] == [["counters_missing"], ["out_of_distribution"],
                                                             ["low_confidence"]]


def test_ood_score_is_scaled_to_the_threshold_and_ignores_invalid_features() -> None:
    x = rows((1.0, 18.0, 50.0), (1.0, 18.0, np.nan), (1.0, np.nan, np.nan), (1.0, 1e9, 50.0))
    mask, score = abstention.judge(x, confident(4), RULES)
    assert score[0] == pytest.approx(1.0)  # mean |z| (4 + 0) / 2 = threshold: not beyond it
    assert mask[0] == 0
    assert score[1] == pytest.approx(2.0)  # only the valid feature counts: |z| 4 / threshold 2
    assert np.isnan(score[2]) and mask[2] == 0  # nothing to score: no OOD verdict
    assert score[3] == pytest.approx(abstention.OOD_Z_CAP / 2 / 2)  # one wild counter is capped
    assert mask[3] == abstention.OUT_OF_DISTRIBUTION


def test_reasons_combine() -> None:
    mask, _ = abstention.judge(rows((np.nan, 40.0, 50.0)), confident(1, top=0.3), RULES)
    assert abstention.reasons_of(int(mask[0])) == ["counters_missing", "out_of_distribution", "low_confidence"]


def test_card_section_parsing_defaults_and_errors() -> None:
    old = abstention.rules_from_card(None, FEATURE_INDEX)
    assert old.required == tuple(FEATURE_INDEX[n] for n in abstention.DEFAULT_REQUIRED_FEATURES)
    assert old.ood_columns == () and old.confidence_floor == 0.0
    section = {"required_features": ["ipc_mean_10s"],
               "out_of_distribution": {"features": ["cache_mpki_mean_10s"], "center": [1.0], "scale": [2.0],
                                       "threshold": 3.0},
               "low_confidence": {"floor": 0.7}}
    rules = abstention.rules_from_card(section, FEATURE_INDEX)
    assert rules == abstention.Rules(required=(A,), ood_columns=(B,), ood_center=(1.0,), ood_scale=(2.0,),
                                     ood_threshold=3.0, confidence_floor=0.7)
    for bad in ({"required_features": ["no_such_feature"]},
                {"out_of_distribution": {"features": ["ipc_mean_10s"], "center": [1.0], "scale": []}},
                {"out_of_distribution": {"features": ["ipc_mean_10s"], "center": [1.0], "scale": [0.0]}},
                {"low_confidence": {"floor": 1.5}}):
        with pytest.raises(ValueError):
            abstention.rules_from_card(bad, FEATURE_INDEX)


def test_a_card_with_broken_abstention_rules_is_refused(tmp_path: Path) -> None:
    shipped = resolve(ROOT / "models" / "regime")
    copy = tmp_path / "v"
    shutil.copytree(shipped, copy)
    card = orjson.loads((copy / "model_card.json").read_bytes())
    card["abstention"] = {"out_of_distribution": {"features": ["ipc_mean_10s"], "center": [1.0], "scale": [-1.0]}}
    (copy / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match="scale"):
        load_regime_model(copy)


def test_shipped_model_answers_windows_of_its_training_kinds_and_refuses_software_only_nodes() -> None:
    model = load_regime_model(resolve(ROOT / "models" / "regime"))
    assert model.card.get("abstention"), "the shipped card states its abstention rules"
    train_kinds, _ = holdout_split(per_class=1, seed=7)
    data = simulate_windows(kinds=train_kinds, nodes=8, ticks=400, seed=321)
    probs, _ = model(data.x)
    mask, score = model.judge(data.x, probs)
    answered = mask == 0
    assert answered.any()
    assert (probs[answered].max(axis=1) >= model.rules.confidence_floor).all()
    assert (score[answered] <= 1.0).all()
    software_only = data.x.copy()
    software_only[:, [FEATURE_INDEX[n] for n in model.card["abstention"]["required_features"]]] = np.nan
    mask2, _ = model.judge(software_only, probs)
    assert ((mask2 & abstention.COUNTERS_MISSING) != 0).all()
