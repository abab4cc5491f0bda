"""Crash recovery plans from the committed offset and its mark (pure logic)."""

from __future__ import annotations

import pytest

from services.runtime.recovery import CAREFUL_FIRST, CAREFUL_MAX, Mark, Plan, commit_mark, plan_partition


@pytest.mark.parametrize("mark", [
    Mark(ts_ms=1, attempts=0), Mark(ts_ms=1, attempts=3, careful_at=7, clean=True), Mark(ts_ms=5, careful_at=None),
])
def test_mark_round_trips(mark: Mark) -> None:
    assert Mark.decode(mark.encode()) == mark
    assert len(mark.encode()) < 100  # well under the broker's offset.metadata.max.bytes (4096)


@pytest.mark.parametrize("text", [None, "", "not json", "[1]", '{"v": 2, "ts": 1}', '{"v": 1}', '{"v": 1, "ts": "x"}'])
def test_foreign_or_garbled_metadata_is_no_mark(text: str | None) -> None:
    assert Mark.decode(text) is None


def test_first_start_and_clean_stop_need_nothing() -> None:
    assert plan_partition(None, None, careful_base=500) == Plan(attempts=1)
    assert plan_partition(40, None, careful_base=500) == Plan(attempts=1)
    assert plan_partition(40, Mark(ts_ms=9, attempts=4, clean=True), careful_base=500) == Plan(attempts=1)


def test_a_crash_after_progress_reads_back_dead_letters_and_goes_carefully_over_a_short_window() -> None:
    plan = plan_partition(40, Mark(ts_ms=9, attempts=0), careful_base=500)
    assert plan == Plan(attempts=1, careful=CAREFUL_FIRST, crashed=True, since_ms=9)
    assert plan_partition(40, Mark(ts_ms=9, attempts=0), careful_base=50).careful == 50  # never more than a batch


def test_a_second_start_without_progress_goes_carefully_and_widens_each_time() -> None:
    assert plan_partition(40, Mark(ts_ms=9, attempts=1), careful_base=500).careful == 500
    assert plan_partition(40, Mark(ts_ms=9, attempts=2), careful_base=500).careful == 1000
    assert plan_partition(40, Mark(ts_ms=9, attempts=3), careful_base=500).attempts == 4
    assert plan_partition(40, Mark(ts_ms=9, attempts=60), careful_base=500).careful == CAREFUL_MAX


def test_a_careful_mark_at_the_committed_offset_names_the_poison() -> None:
    plan = plan_partition(40, Mark(ts_ms=9, attempts=2, careful_at=40), careful_base=500)
    assert (plan.poison, plan.careful, plan.crashed) == (40, 0, True)
    # a careful mark behind the committed offset: that record was passed, no poison
    assert plan_partition(41, Mark(ts_ms=9, attempts=2, careful_at=40), careful_base=500).poison is None
    # ahead of it: the stage held earlier input in flight (it is delivered again); the mark still names the poison
    plan = plan_partition(37, Mark(ts_ms=9, attempts=1, careful_at=40), careful_base=500)
    assert (plan.poison, plan.careful, plan.crashed) == (40, 0, True)


def test_the_end_of_a_careful_pass_is_no_progress() -> None:
    """The pass's closing mark keeps the run's attempts: crashing again later widens the next pass."""
    assert plan_partition(90, Mark(ts_ms=9, attempts=2), careful_base=50).careful == 100
    assert plan_partition(90, Mark(ts_ms=9, attempts=1), careful_base=50).careful == 50


def test_no_commit_in_the_middle_of_a_careful_pass_says_clean_or_resets_the_attempts() -> None:
    plan = Plan(attempts=2, careful=50, crashed=True, since_ms=1)
    handover = commit_mark(5, clean=True, plan=plan, careful_left=10, poison=None)
    assert handover == Mark(ts_ms=5, attempts=2)
    # the next owner goes carefully again, over a wider window
    assert plan_partition(60, handover, careful_base=50).careful == 100
    # a pending poison stays named, so the next owner quarantines it without another crash
    pending = commit_mark(5, clean=False, plan=Plan(attempts=1, poison=70, crashed=True), careful_left=0, poison=70)
    assert plan_partition(60, pending, careful_base=50).poison == 70
    # otherwise as before: clean on hand-over, a progress mark on a regular commit
    assert commit_mark(5, clean=True, plan=plan, careful_left=0, poison=None) == Mark(ts_ms=5, clean=True)
    assert commit_mark(5, clean=False, plan=None, careful_left=0, poison=None) == Mark(ts_ms=5)
