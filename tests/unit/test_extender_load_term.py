"""The extender's load term (``corunner.load_harm``): the co-runner term on per-pod pressure estimates.

Hand-computed with the interference model: an llc-sensitive pod beside a memory-bound pod pressing
(0.4, 0.9, 0.1, 0.05) sees 1 + 1.2 · 0.2 + 0.4 · 0.8667 = 1.5867 (over the 1.25 SLO).
"""

from __future__ import annotations

import pytest

from services.scheduler_extender.corunner import load_harm
from services.scheduler_extender.scoring import CLASS_INDEX, NodeInputs, ScoringConfig, evaluate, score_with_penalty
from simulator.workloads import CLASS_PRESSURE_GUESS
from training.corunner import ROOT, pressure_guess, train_kinds

CPU, LLC, MEM = (CLASS_INDEX[c] for c in ("cpu_bound", "llc_sensitive", "memory_bound"))
HOG = (0.4, 0.9, 0.1, 0.05)
QUIET = (0.1, 0.1, 0.1, 0.1)
MILD = (0.1, 0.6625, 0.1, 0.05)
"""Presses membw at 0.6625 (excess 0.55): slows an llc pod to 1 + 0.4 · 0.55 = 1.22, between 1.20 and the SLO."""
SLOWED = 1 + 1.2 * 0.15 / 0.75 + 0.4 * 0.65 / 0.75


def test_guess_is_the_training_kinds_mean() -> None:
    assert pressure_guess(train_kinds(ROOT / "models" / "regime")) == CLASS_PRESSURE_GUESS


def test_harm_hand_computed() -> None:
    # a latency-sensitive llc pod beside the hog: its own slowdown above 1, plus 1 for crossing the SLO
    assert load_harm(LLC, QUIET, True, [(MEM, HOG, False)]) == pytest.approx(SLOWED - 1 + 1)
    assert load_harm(LLC, QUIET, False, [(MEM, HOG, False)]) == 0.0  # batch beside batch: nothing
    # the hog joining a lone latency-sensitive llc pod: it goes from 1.0 to 1.5867 (crossing the SLO)
    assert load_harm(MEM, HOG, False, [(LLC, QUIET, True)]) == pytest.approx(SLOWED - 1 + 1)
    # ... when that pod already sees the hog's twin, nothing is added
    assert load_harm(MEM, HOG, False, [(LLC, QUIET, True), (MEM, HOG, False)]) == pytest.approx(0.0)
    # a quiet pod adds nothing anywhere (every pressure below the free 0.25)
    assert load_harm(CPU, QUIET, True, [(LLC, QUIET, True), (MEM, QUIET, False)]) == 0.0
    assert load_harm(LLC, HOG, True, []) == 0.0


def test_guard_band_counts_a_crossing_below_the_slo() -> None:
    # MILD slows an llc pod to 1.22: under the 1.25 SLO, over a 1.20 guard band (EXTENDER_CORUNNER_SLO_SLOWDOWN),
    # where the crossing adds 1
    assert load_harm(LLC, QUIET, True, [(MEM, MILD, False)]) == pytest.approx(0.22)
    assert load_harm(LLC, QUIET, True, [(MEM, MILD, False)], 1.20) == pytest.approx(1.22)
    assert load_harm(MEM, MILD, False, [(LLC, QUIET, True)], 1.20) == pytest.approx(1.22)
    with pytest.raises(ValueError, match="corunner_slo_slowdown must be > 1"):
        ScoringConfig(corunner_slo_slowdown=1.0)


def test_score_with_penalty_mixes_like_the_class_term() -> None:
    card = evaluate(NodeInputs(), ScoringConfig(), 1_800_000_000_000)  # nothing known: penalty 0.5, score 5
    assert score_with_penalty(card, MEM, 1.0, ScoringConfig()) == 5  # weight 0: the card's score
    assert score_with_penalty(card, MEM, 0.0, ScoringConfig(weight_corunner=1.0)) == 10
    assert score_with_penalty(card, MEM, 3.0, ScoringConfig(weight_corunner=1.0)) == 0  # capped at 1
    assert score_with_penalty(card, MEM, 0.2, ScoringConfig(weight_corunner=0.5)) == 7  # 10 * (1 - 0.35) = 6.5
