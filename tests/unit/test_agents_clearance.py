"""Blame by history (``services.agents.clearance`` and ``MoveSettings.attribute``), by hand-computed cases.

A co-runner present through every window of a calm stretch (observed slowdown <= limit) cannot alone slow
the pod beyond the limit (its worst co-runner sets its slowdown): it is cleared; once the pod is slowed, the
move rule looks for the cause among the others.
"""

from __future__ import annotations

import pytest

from services.agents.clearance import Clearance
from services.agents.interference_policy import MoveSettings, NodeLoad, PodLoad, plan

MEMORY_HOG = (0.4, 0.9, 0.1, 0.05)
QUIET = (0.1, 0.1, 0.1, 0.1)
ROOM = (16_000, 64 << 30)


def test_a_co_runner_present_through_a_calm_stretch_is_cleared() -> None:
    c = Clearance(window=3, limit=1.2)
    for _ in range(2):
        c.record("web", frozenset({"old"}))
        c.judge("web", 1.05)
    assert c.cleared("web") == frozenset()  # two windows of three: the stretch is not complete yet
    c.record("web", frozenset({"old", "new"}))  # "new" arrived in the last window only
    c.judge("web", 1.05)
    assert c.cleared("web") == frozenset({"old"})
    c.record("web", frozenset({"old", "new"}))
    c.judge("web", 1.4)  # slowed: nothing more is cleared, "old" stays cleared
    assert c.cleared("web") == frozenset({"old"})


def test_nothing_is_cleared_over_the_limit_or_without_an_observation() -> None:
    c = Clearance(window=1, limit=1.2)
    c.record("web", frozenset({"a"}))
    c.judge("web", 1.21)
    assert c.cleared("web") == frozenset()
    c.record("web", frozenset({"a"}))
    c.judge("web", None)
    assert c.cleared("web") == frozenset()
    c.record("web", frozenset({"a"}))
    c.judge("web", 1.2)
    assert c.cleared("web") == frozenset({"a"})


def test_cleared_co_runners_that_leave_and_pods_that_finish_are_forgotten() -> None:
    c = Clearance(window=1, limit=1.2)
    c.record("web", frozenset({"a", "b"}))
    c.judge("web", 1.0)
    assert c.cleared("web") == frozenset({"a", "b"})
    c.record("web", frozenset({"b"}))  # "a" left: if it comes back, that is a new stretch
    c.judge("web", 1.5)
    assert c.cleared("web") == frozenset({"b"})
    c.retain({"other"})
    assert c.cleared("web") == frozenset()
    c.judge("web", 1.0)  # a pod never recorded (or forgotten) is a no-op
    assert c.cleared("web") == frozenset()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window >= 1"):
        Clearance(window=0, limit=1.2)
    with pytest.raises(ValueError, match="limit >= 1"):
        Clearance(window=3, limit=0.9)


def _pod(key: str, cls: str, pressure: tuple[float, float, float, float], job: str, *, ls: bool = False,
         slowdown: float | None = None, cleared: frozenset[str] = frozenset()) -> PodLoad:
    return PodLoad(key, job, cls, ls, pressure, 60.0, 1000, 1 << 30, slowdown, cleared=cleared)


def _world(web: PodLoad) -> list[NodeLoad]:
    # n0: the web pod, an old pod the estimates call a memory hog, a newcomer they call quiet
    hot = NodeLoad("n0", (web, _pod("batch/old", "memory_bound", MEMORY_HOG, "scan"),
                          _pod("batch/new", "cpu_bound", QUIET, "scan")), *ROOM)
    spare = NodeLoad("n1", (), *ROOM)
    sibling = NodeLoad("n9", (_pod("batch/scan-2", "cpu_bound", QUIET, "scan"),), 0, 0)
    return [hot, spare, sibling]


def test_history_moves_the_newcomer_when_the_estimates_blame_a_cleared_pod() -> None:
    web = _pod("ls/web", "llc_sensitive", QUIET, "web", ls=True, slowdown=1.4, cleared=frozenset({"batch/old"}))
    # the estimates alone: removing "old" would bring web from 1.59 (predicted) to 1.0 -> "old" is moved
    assert [m.pod.key for m in plan(_world(web), MoveSettings())] == ["batch/old"]
    # with history: web ran beside "old" unslowed, so the cause is the newcomer, whatever its estimate says
    [m] = plan(_world(web), MoveSettings(attribute=True))
    assert (m.pod.key, m.relieved) == ("batch/new", 1)


def test_history_does_not_apply_without_an_observed_slowdown_or_a_clearance() -> None:
    predicted_only = _pod("ls/web", "llc_sensitive", QUIET, "web", ls=True, cleared=frozenset({"batch/old"}))
    assert [m.pod.key for m in plan(_world(predicted_only), MoveSettings(attribute=True))] == ["batch/old"]
    nothing_cleared = _pod("ls/web", "llc_sensitive", QUIET, "web", ls=True, slowdown=1.4)
    assert [m.pod.key for m in plan(_world(nothing_cleared), MoveSettings(attribute=True))] == ["batch/old"]
    # everyone cleared: no co-runner is to blame, so only the victim itself can be moved (its job has no other
    # pod here, so nothing is proposed)
    all_cleared = _pod("ls/web", "llc_sensitive", QUIET, "web", ls=True, slowdown=1.4,
                       cleared=frozenset({"batch/old", "batch/new"}))
    assert plan(_world(all_cleared), MoveSettings(attribute=True)) == []
