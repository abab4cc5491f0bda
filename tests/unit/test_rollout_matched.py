"""The rollout rule at matched coverage (``services/runtime/selective.py`` judged by ``rollout.judge``), hand-built."""

from __future__ import annotations

import numpy as np

from services.runtime import rollout
from services.runtime.rollout import Comparison, RolloutState, judge
from services.runtime.selective import Answers, compare, matched, top_correct

MARGIN, COVERAGE_MARGIN, MIN_SAMPLES = 0.05, 0.25, 20


def answers(n: int, given: list[tuple[float, bool]]) -> Answers:
    """``n`` labelled windows; the first ``len(given)`` answered with (confidence, correct), the rest abstained."""
    answered = np.zeros(n, bool)
    correct = np.zeros(n, bool)
    confidence = np.zeros(n)
    for i, (conf, ok) in enumerate(given):
        answered[i], correct[i], confidence[i] = True, ok, conf
    return Answers(answered, correct, confidence)


def verdict(current: Answers, candidate: Answers, *, labels_expected: bool = True) -> rollout.Judgement:
    labelled = len(current.answered)
    done = Comparison("completion", 1.0, 1.0, labelled, margin=0.01, labelled=False)
    return judge([done, *compare(current, candidate, coverage_margin=COVERAGE_MARGIN)], 0.5, labelled,
                 margin=MARGIN, min_samples=MIN_SAMPLES, labels_expected=labels_expected)


def running() -> RolloutState:
    return RolloutState(kind="regime", candidate="v2", baseline="v1", status="running", dwell_s=1.0)


def test_top_correct_ranks_by_the_models_own_confidence() -> None:
    a = answers(6, [(0.9, False), (0.99, True), (0.5, True), (0.95, True)])
    assert top_correct(a, 1) == 1 and top_correct(a, 2) == 2, "0.99 and 0.95 first"
    assert top_correct(a, 3) == 2, "then 0.9, wrong"
    assert top_correct(a, 99) == 3 and top_correct(a, 0) == 0
    assert matched(a, answers(6, [])) == (0.0, 0.0, 0), "nothing to match when one model never answers"


def test_a_good_but_broader_candidate_advances_although_less_accurate_when_answering() -> None:
    # current: 20 answers of 100 windows, 18 right (0.90 when answering, 18 right in all)
    current = answers(100, [(0.9, i < 18) for i in range(20)])
    # candidate: 60 answers, 50 right (0.833 when answering: 0.067 below, the old rule rolled it back), but its
    # 20 most confident answers are 19 right: 0.95 at the current model's coverage, and 50 windows right, not 18
    given = [(0.99, i < 19) for i in range(20)] + [(0.6, i < 31) for i in range(40)]
    candidate = answers(100, given)
    when_answering = candidate.correct.sum() / candidate.answered.sum()
    assert when_answering < current.correct.sum() / current.answered.sum() - MARGIN, "the old rule's verdict"
    cur, cand, n = matched(current, candidate)
    assert (cur, cand, n) == (0.9, 0.95, 20)
    v = verdict(current, candidate)
    assert v.reason is None and v.ready, v
    assert v.details["correct_candidate"] == 0.5 and v.details["correct_current"] == 0.18
    assert rollout.advance(running(), 1_000, v).step == 1


def test_a_narrower_and_worse_candidate_rolls_back_at_matched_coverage() -> None:
    # current answers 40, its 20 most confident all right; the candidate answers 20, 10 right
    current = answers(100, [(0.99, True)] * 20 + [(0.7, i % 2 == 0) for i in range(20)])
    candidate = answers(100, [(0.99, i < 10) for i in range(20)])
    v = verdict(current, candidate)
    assert v.reason is not None and "matched_accuracy 0.500 vs current 1.000" in v.reason, v
    assert rollout.advance(running(), 1_000, v).status == "rolled_back"


def test_a_broader_candidate_whose_extra_answers_are_fine_but_best_answers_worse_rolls_back() -> None:
    # right more often overall (more answers), but its most confident answers are worse than all of the current's
    current = answers(100, [(0.9, True)] * 20)
    candidate = answers(100, [(0.99, i < 15) for i in range(20)] + [(0.5, True)] * 40)
    v = verdict(current, candidate)
    assert v.reason is not None and "matched_accuracy 0.750 vs current 1.000" in v.reason


def test_a_narrower_candidate_as_good_where_both_answer_is_judged_by_the_coverage_margin() -> None:
    current = answers(100, [(0.9, i < 45) for i in range(50)])
    cautious = answers(100, [(0.9, True)] * 40)  # 10 points less coverage: within 0.25
    assert verdict(current, cautious).reason is None
    silent = answers(100, [(0.9, True)] * 15)  # 35 points less coverage, 30 fewer windows right
    reason = verdict(current, silent).reason
    assert reason is not None and reason.startswith("candidate correct 0.150 vs current 0.450"), reason


def test_a_tie_advances_and_nothing_is_judged_before_min_samples() -> None:
    same = answers(100, [(0.8, i % 4 != 0) for i in range(40)])
    v = verdict(same, same)
    assert v.reason is None and v.ready
    assert v.details["matched_accuracy_current"] == v.details["matched_accuracy_candidate"] == 0.75
    few = answers(10, [(0.99, True)] * 5)
    bad = answers(10, [(0.99, False)] * 5)
    v = verdict(few, bad)
    assert v.reason is None and not v.ready, "5 matched answers < MIN_SAMPLES: neither rolled back nor advanced"
    assert rollout.advance(running(), 10_000, v) == running()


def test_no_labels_yet_never_advances_on_compared_windows_alone() -> None:
    nothing = answers(0, [])
    assert compare(nothing, nothing, coverage_margin=COVERAGE_MARGIN) == []
    done = Comparison("completion", 1.0, 1.0, 5_000, margin=0.01, labelled=False)
    expecting = judge([done], 0.9, 5_000, margin=MARGIN, min_samples=MIN_SAMPLES, labels_expected=True)
    assert expecting.reason is None and not expecting.ready, "labelled: 0 must not step 10 -> 50 %"
    assert rollout.advance(running(), 60_000, expecting) == running()
    # without a truth source (a real cluster, risk) compared windows are all there is
    assert judge([done], 0.9, 5_000, margin=MARGIN, min_samples=MIN_SAMPLES).ready
    failing = Comparison("completion", 1.0, 0.5, 5_000, margin=0.01, labelled=False)
    assert "completion" in str(judge([failing], 0.9, 5_000, margin=MARGIN, min_samples=MIN_SAMPLES,
                                     labels_expected=True).reason), "failures roll back with or without labels"
