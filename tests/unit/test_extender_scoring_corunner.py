"""The extender's co-runner term and trusted-regime threshold (issue 21): hand-computed cases."""

from __future__ import annotations

import pytest

from services.scheduler_extender.corunner import CORUNNER_SLOWDOWN, corunner_harm, corunner_penalty
from services.scheduler_extender.scoring import (
    CLASS_INDEX,
    NodeInputs,
    RegimeIn,
    ScoringConfig,
    evaluate,
    placement_score,
)
from training.corunner import ROOT, table, train_kinds

CPU, LLC, MEM, FE = (CLASS_INDEX[c] for c in ("cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound"))
LS = frozenset({LLC, FE})
NOW = 1_800_000_000_000


def test_shipped_table_is_the_training_kinds_table() -> None:
    # the constants are what training.corunner derives from the shipped regime model's TRAINING kinds only
    kinds = train_kinds(ROOT / "models" / "regime")
    assert table(kinds) == CORUNNER_SLOWDOWN
    assert not {"search_index", "spmv", "video_encode", "web_frontend"} & set(kinds)  # the held-out kinds


def test_harm_hand_computed() -> None:
    # frontend pod beside [frontend, cpu]: own = max(1.417, 1.153) - 1 = 0.417; the frontend resident's worst
    # co-runner goes from the cpu pod's 1.153 to 1.417 (+0.264); the cpu resident is batch: not counted
    assert corunner_harm(FE, [FE, CPU], LS) == pytest.approx(0.417 + 0.264)
    # memory-bound (batch) pod beside a lone llc-sensitive pod: that pod goes from 1.0 to 1.301
    assert corunner_harm(MEM, [LLC], LS) == pytest.approx(0.301)
    # ... beside [llc, memory]: the llc pod already sees 1.301 from the memory pod: nothing added
    assert corunner_harm(MEM, [LLC, MEM], LS) == pytest.approx(0.0)
    assert corunner_harm(MEM, [MEM, CPU], LS) == 0.0  # batch beside batch costs nothing
    assert corunner_harm(FE, [], LS) == 0.0  # an empty node
    assert corunner_harm(FE, [CPU], frozenset()) == 0.0  # nothing latency-sensitive
    # penalty: harm / (max_slowdown - 1), capped
    assert corunner_penalty(MEM, [LLC], LS, 1.5) == pytest.approx(0.602)
    assert corunner_penalty(FE, [FE, CPU], LS, 1.5) == 1.0


def test_placement_score_mixes_card_and_corunner_penalty() -> None:
    card = evaluate(NodeInputs(), ScoringConfig(), NOW)  # nothing known: penalty 0.5, score 5 for every class
    assert placement_score(card, MEM, [LLC], ScoringConfig()) == 5  # weight 0: the card's score
    # 0.5 * 0.5 + 0.5 * 0.602 = 0.551 -> 10 * 0.449 = 4.49 -> 4
    assert placement_score(card, MEM, [LLC], ScoringConfig(weight_corunner=0.5)) == 4
    # weight 1: only the co-runner term; batch beside batch scores 10, a frontend pod beside a frontend one 0
    assert placement_score(card, MEM, [MEM], ScoringConfig(weight_corunner=1.0)) == 10
    assert placement_score(card, FE, [FE], ScoringConfig(weight_corunner=1.0)) == 0
    # every class latency-sensitive: memory beside memory now costs (1.752 - 1) / 0.5 -> capped 1 -> 0
    every = ("cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound")
    assert placement_score(card, MEM, [MEM], ScoringConfig(weight_corunner=1.0, latency_sensitive_classes=every)) == 0


def test_score_confidence_scores_a_doubtful_answer_as_unknown_but_still_filters() -> None:
    regime = RegimeIn(NOW, "membw", 0.7, (("memory_bound", 2.4),))
    # trusted: 0.6 * 1 + 0.25 * 0.5 + 0.15 * 0.5 = 0.8 -> 2; below 0.8 confidence: 0.6 * 0.5 + 0.2 = 0.5 -> 5
    assert evaluate(NodeInputs(regime), ScoringConfig(), NOW).scores[MEM] == 2
    doubtful = evaluate(NodeInputs(regime), ScoringConfig(score_confidence=0.8), NOW)
    assert doubtful.scores[MEM] == 5
    assert doubtful.reasons[MEM] is not None  # 2.4 >= 1.5 at confidence 0.7 >= min_confidence 0.5
    assert evaluate(NodeInputs(regime._replace(confidence=0.85)), ScoringConfig(score_confidence=0.8), NOW).scores[
        MEM] == 2


@pytest.mark.parametrize("bad", [{"weight_corunner": 1.5}, {"weight_corunner": -0.1}, {"score_confidence": 2.0},
                                 {"latency_sensitive_classes": ("gpu_bound",)}])
def test_bad_config_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ScoringConfig(**bad)  # type: ignore[arg-type]
