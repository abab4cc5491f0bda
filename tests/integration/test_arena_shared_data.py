"""Arena arrivals from the real Google 2011 task_events part 0 (the synthetic path is tested in tests/unit)."""

from __future__ import annotations

import pytest

from simulator.arena.arrivals import load_trace_tasks, to_arrivals
from simulator.arena.aware import ArenaView
from simulator.arena.loop import Arena
from simulator.arena.policies import make_policy
from training import settings

TASK_EVENTS = settings.google2011_dir() / "task_events"
HELD_OUT = ("search_index", "spmv", "video_encode", "web_frontend")

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.skipif(not TASK_EVENTS.is_dir(), reason=f"shared trace data not found at {TASK_EVENTS} "
                       "(set BORG_DATA_DIR to the folder holding google2011/)"),
]


def test_trace_part_becomes_arena_arrivals() -> None:
    tasks = load_trace_tasks(TASK_EVENTS, parts=1)
    assert len(tasks) > 1000
    assert all(t.submit_s > 0 and t.duration_s >= 1.0 for t in tasks)  # time-0 rows (censored start) dropped
    assert {t.scheduling_class for t in tasks} <= {0, 1, 2, 3}
    assert all(0.0 <= t.cpu <= 1.0 and 0.0 <= t.memory <= 1.0 for t in tasks)
    assert any(not t.censored for t in tasks) and any(t.censored for t in tasks)
    arrivals, stats = to_arrivals(tasks, kinds=HELD_OUT, nodes=10, seed=1, horizon_s=600.0)
    assert stats.tasks_kept == len(arrivals) > 50
    assert 0 < sum(a.latency_sensitive for a in arrivals) < len(arrivals)
    assert {a.kind for a in arrivals} <= set(HELD_OUT)
    out = Arena(arrivals, 10, make_policy("kube-default", 1), ArenaView(10), horizon_s=600.0).run()
    assert out.placements > 50 and len(out.finished) > 0
